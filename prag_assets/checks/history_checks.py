"""Checks on the dynamic-user assets: an incremental update never leaves a user without exactly one cluster.

The incremental checks read only the rows their run changed (the users it updated, the lists it refreshed: issue 14
§2), so their cost follows the change, not the task."""

from collections.abc import Callable

import dagster as dg

from prag_assets.assets import history
from prag_assets.checks.per_task import CheckEvents, TaskOutcome, report, task_check
from prag_assets.execution import task_run
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import Settings
from prag_models.data.history import has_table
from prag_models.stages.table_rules import changed_rows, neighbour_problems, one_cluster_problems, state_problems
from prag_models.users.incremental import STATE_TABLE

#: (connection, task, settings, run id) → problems found in the task's tables (the run's changed rows).
Probe = Callable[[object, str, Settings, str], list[str]]


def tables_check(
    asset: dg.AssetsDefinition,
    name: str,
    description: str,
    probe: Probe,
    tables: tuple[str, ...],
    blocking: bool,
    scoped: bool = False,
) -> dg.AssetChecksDefinition:
    """A check running a probe over each task of the run (tables missing = nothing to check); a scoped probe reads
    the rows the run changed, whose counts go to the metadata."""

    @task_check(asset, name, description, blocking)
    def _check(
        context: dg.AssetCheckExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
    ) -> CheckEvents:
        outcomes: dict[str, TaskOutcome] = {}
        with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
            ready = all(has_table(con, t) for t in tables)
            for task in tasks:
                problems = probe(con, task, settings, context.run.run_id) if ready else []
                scope = changed_rows(con, task, context.run.run_id) if ready and scoped else {}
                outcomes[task] = TaskOutcome(errors=problems, metadata={"checked": ready, **scope})
        yield from report(context, outcomes)

    return _check


history_checks = [
    tables_check(
        history.incremental_user_clusters,
        "every_user_one_cluster",
        "After an incremental update every user it updated (new users included) is in exactly one cluster; "
        "blocking: the similar-user refresh does not run otherwise.",
        one_cluster_problems,
        ("user_embeddings", "user_clusters"),
        blocking=True,
        scoped=True,
    ),
    tables_check(
        history.incremental_similar_users,
        "neighbours_in_same_cluster",
        "The refreshed neighbour lists hold other members of the same cluster, at most k per user.",
        neighbour_problems,
        ("similar_users", "user_clusters"),
        blocking=True,
        scoped=True,
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
