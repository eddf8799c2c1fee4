"""Checks on the dynamic-user assets: an incremental update never leaves a user without exactly one cluster."""

from collections.abc import Callable

import dagster as dg

from prag_assets.assets import history
from prag_assets.checks.per_task import CheckEvents, TaskOutcome, report, task_check
from prag_assets.common import run_tasks
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models.config import Settings
from prag_models.data.history import HISTORY_TABLE, has_table
from prag_models.users.incremental import STATE_TABLE

#: (connection, task, settings) → problems found in the task's tables.
Probe = Callable[[object, str, Settings], list[str]]


def _count(con, sql: str, task: str) -> int:
    """A count query with the task as its only parameter (repeated for every '?')."""
    return int(con.execute(sql, [task] * sql.count("?")).fetchall()[0][0])


def one_cluster_problems(con, task: str, settings: Settings) -> list[str]:
    """Users without exactly one non-negative cluster, or clustered users without an embedding."""
    problems = []
    checks = {
        "users with an embedding but no cluster": "SELECT count(*) FROM user_embeddings e WHERE e.task = ? AND NOT "
        "EXISTS (SELECT 1 FROM user_clusters c WHERE c.task = e.task AND c.user_id = e.user_id)",
        "users with more than one cluster row": "SELECT count(*) FROM (SELECT user_id FROM user_clusters "
        "WHERE task = ? GROUP BY user_id HAVING count(*) > 1)",
        "users with a null or negative cluster": "SELECT count(*) FROM user_clusters WHERE task = ? AND "
        "(cluster IS NULL OR cluster < 0)",
        "clustered users without an embedding": "SELECT count(*) FROM user_clusters c WHERE c.task = ? AND NOT "
        "EXISTS (SELECT 1 FROM user_embeddings e WHERE e.task = c.task AND e.user_id = c.user_id)",
    }
    for what, sql in checks.items():
        if n := _count(con, sql, task):
            problems.append(f"{n} {what}")
    if has_table(con, HISTORY_TABLE) and has_table(con, "profile_documents"):
        sql = (
            f"SELECT count(DISTINCT h.user_id) FROM {HISTORY_TABLE} h JOIN profile_documents p USING (task, user_id, "
            "doc_id, content_hash) WHERE h.task = ? AND NOT EXISTS (SELECT 1 FROM user_clusters c WHERE "
            "c.task = h.task AND c.user_id = h.user_id)"
        )
        if n := _count(con, sql, task):
            problems.append(f"{n} users with applied history have no cluster")
    return problems


def neighbour_problems(con, task: str, settings: Settings) -> list[str]:
    """Neighbour pairs across clusters or with the user itself, or more than k neighbours for a user."""
    problems = []
    cross = (
        "SELECT count(*) FROM similar_users s JOIN user_clusters a ON a.task = s.task AND a.user_id = s.user_id "
        "JOIN user_clusters b ON b.task = s.task AND b.user_id = s.neighbour_id WHERE s.task = ? AND "
        "(a.cluster <> b.cluster OR s.user_id = s.neighbour_id)"
    )
    if n := _count(con, cross, task):
        problems.append(f"{n} neighbour pairs cross clusters or pair a user with itself")
    k = settings.clustering.similar_users
    over = f"SELECT count(*) FROM (SELECT user_id FROM similar_users WHERE task = ? GROUP BY 1 HAVING count(*) > {k})"
    if n := _count(con, over, task):
        problems.append(f"{n} users have more than {k} neighbours")
    return problems


def state_problems(con, task: str, settings: Settings) -> list[str]:
    """cluster_state must hold every clustered user with the same cluster, and fit rows with embeddings."""
    sql = (
        f"SELECT count(*) FROM (SELECT user_id, cluster FROM user_clusters WHERE task = ?) u FULL OUTER JOIN "
        f"(SELECT user_id, cluster FROM {STATE_TABLE} WHERE task = ?) s ON u.user_id = s.user_id "
        "WHERE u.cluster IS DISTINCT FROM s.cluster"
    )
    n = _count(con, sql, task)
    return [f"{n} users differ between user_clusters and cluster_state"] if n else []


def tables_check(
    asset: dg.AssetsDefinition, name: str, description: str, probe: Probe, tables: tuple[str, ...], blocking: bool
) -> dg.AssetChecksDefinition:
    """A check running a probe over each task of the run (tables missing = nothing to check)."""

    @task_check(asset, name, description, blocking)
    def _check(
        context: dg.AssetCheckExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
    ) -> CheckEvents:
        settings = prag_settings.get()
        outcomes: dict[str, TaskOutcome] = {}
        with duckdb.connect() as con:
            ready = all(has_table(con, t) for t in tables)
            for task in run_tasks(context, settings):
                problems = probe(con, task, settings) if ready else []
                outcomes[task] = TaskOutcome(errors=problems, metadata={"checked": ready})
        yield from report(context, outcomes)

    return _check


history_checks = [
    tables_check(
        history.incremental_user_clusters,
        "every_user_one_cluster",
        "After an incremental update every user with an embedding (new users included) is in exactly one cluster; "
        "blocking: the similar-user refresh does not run otherwise.",
        one_cluster_problems,
        ("user_embeddings", "user_clusters"),
        blocking=True,
    ),
    tables_check(
        history.incremental_similar_users,
        "neighbours_in_same_cluster",
        "Refreshed neighbours are other members of the same cluster, at most k per user.",
        neighbour_problems,
        ("similar_users", "user_clusters"),
        blocking=True,
    ),
    tables_check(
        history.cluster_state,
        "state_matches_clusters",
        "cluster_state holds every clustered user with its current cluster (the incremental reference is fresh).",
        state_problems,
        ("user_clusters", STATE_TABLE),
        blocking=False,
    ),
]
