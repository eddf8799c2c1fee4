"""Data-quality rules of the LaMP tables (docs/methods.md §6): a Great Expectations suite and the cross-table rules GX
has no expectation for, per task. The asset checks (prag_assets/checks/lamp_checks.py) run them."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.history import HISTORY_TABLE, has_table
from prag_models.data.source import llm_eval_sample_ids
from prag_models.data.tasks import LABELS, TASK_KIND
from prag_models.metrics.lamp import metric_bounds
from prag_models.privacy.rules import unshareable_retrievals
from prag_models.stages.consent_cost import CONSENT_MARK, ConsentRules, consent_check_rules, task_opted_out
from prag_models.stages.tuning import tuned_check_rules
from prag_models.storage.store import column_to_matrix, table_exists
from prag_models.storage.validation import (
    Expect,
    between,
    has_columns,
    in_set,
    matrix_problems,
    min_rows,
    not_null,
    unique,
)
from prag_models.users.incremental import STATE_TABLE
from prag_models.users.neighbour_refresh import REFRESH_TABLE, UPDATES_TABLE

#: (connection, task, table rows, settings) → problems that GX has no expectation for.
Extra = Callable[[object, str, pd.DataFrame, Settings], list[str]]


def samples_suite(task: str, settings: Settings) -> list[Expect]:
    """Expectations of lamp_samples."""
    return [
        *has_columns("task", "split", "sample_id", "user_id", "input", "query", "gold"),
        *not_null("sample_id", "user_id", "input", "query"),
        unique("sample_id"),
        min_rows(1),
        in_set("split", ["train", "dev"]),
    ]


def samples_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Dev samples exist, have golds, and golds are in the label set."""
    dev = df[df["split"] == "dev"]
    problems = [] if len(dev) else ["no dev samples"]
    if dev["gold"].isna().any():
        problems.append(f"{int(dev['gold'].isna().sum())} dev samples have no gold output")
    if TASK_KIND[task] != "generation":
        bad = sorted(set(dev["gold"].dropna()) - set(LABELS[task]))
        if bad:
            problems.append(f"gold labels outside the label set: {bad[:5]}")
    return problems


def docs_suite(task: str, settings: Settings) -> list[Expect]:
    """Expectations of profile_documents."""
    return [
        *not_null("user_id", "doc_id", "text", "content_hash"),
        unique("user_id", "doc_id"),
        min_rows(1),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "text", "min_value": 1}),
    ]


def vectors_extra(key: str) -> Extra:
    """Finite (unit) vectors, one per document / query / user of the task."""

    def extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
        matrix = column_to_matrix(df["embedding"].tolist())
        problems = matrix_problems(matrix, unit_norm=key != "user")
        if key == "doc":
            n = con.execute("SELECT count(*) FROM profile_documents WHERE task = ?", [task]).fetchone()[0]
            if n != len(df):
                problems.append(f"{len(df)} embeddings for {n} profile documents")
        if key == "query":
            n = con.execute("SELECT count(*) FROM lamp_samples WHERE task = ?", [task]).fetchone()[0]
            if n != len(df):
                problems.append(f"{len(df)} query embeddings for {n} samples")
        if key == "user":
            users_needed = {
                u for (u,) in con.execute("SELECT DISTINCT user_id FROM lamp_samples WHERE task = ?", [task]).fetchall()
            }
            missing = users_needed - set(df["user_id"])
            if missing:
                problems.append(f"{len(missing)} users have no embedding, e.g. {sorted(missing)[:3]}")
        return problems

    return extra


def clusters_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Every user with an embedding has a cluster."""
    users_all = {u for (u,) in con.execute("SELECT user_id FROM user_embeddings WHERE task = ?", [task]).fetchall()}
    missing = users_all - set(df["user_id"])
    return [f"{len(missing)} users have no cluster, e.g. {sorted(missing)[:3]}"] if missing else []


def neighbours_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Neighbours are other members of the same cluster."""
    bad = con.execute(
        "SELECT count(*) FROM similar_users s JOIN user_clusters a ON a.task = s.task AND a.user_id = s.user_id "
        "JOIN user_clusters b ON b.task = s.task AND b.user_id = s.neighbour_id "
        "WHERE s.task = ? AND (a.cluster <> b.cluster OR s.user_id = s.neighbour_id)",
        [task],
    ).fetchone()[0]
    return [f"{bad} neighbour pairs cross clusters or pair a user with itself"] if bad else []


def retrieval_suite(task: str, settings: Settings) -> list[Expect]:
    """Expectations of a retrieval table."""
    return [
        *not_null("method", "sample_id", "user_id", "doc_id", "source_user_id"),
        unique("method", "sample_id", "rank"),
        between("rank", 1, settings.retrieval.k),
    ]


def _groups(con, table: str, column: str, task: str) -> dict[str, int]:
    """user → group id (planted community or cluster) of a task; empty when the table does not exist."""
    if not table_exists(con, table):
        return {}
    return dict(con.execute(f"SELECT user_id, {column} FROM {table} WHERE task = ?", [task]).fetchall())


def retrieval_extra(table: str) -> Extra:
    """Retrieved documents exist and come from users the method may use."""

    def extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
        problems = []
        missing = con.execute(
            f"SELECT count(*) FROM {table} r LEFT JOIN profile_documents p ON p.task = r.task "
            "AND p.user_id = r.source_user_id AND p.doc_id = r.doc_id WHERE r.task = ? AND p.doc_id IS NULL",
            [task],
        ).fetchone()[0]
        if missing:
            problems.append(f"{missing} retrieved documents do not exist in profile_documents")
        allowed = (
            con.execute("SELECT user_id, neighbour_id FROM similar_users WHERE task = ?", [task]).fetchall()
            if table != "baseline_retrievals"
            else []
        )
        neighbours: dict[str, set[str]] = {}
        for u, n in allowed:
            neighbours.setdefault(u, set()).add(n)
        own_only = {"random", "recency", "bm25", "dense", "clusterrag_user_only"}
        groups = {
            "oracle_community": _groups(con, "planted_communities", "community", task),
            "clusterrag_community": _groups(con, "user_clusters", "cluster", task),
        }
        bad = []
        tuned_nb, tuned_top_n, tuned_groups = (tuned_check_rules(con, task, settings) if "clusterrag" in table
                                               else (None, None, None))  # fmt: skip
        consent = consent_rules(con, task, df, settings, "clusterrag" in table)
        for r in df.itertuples():
            nb = neighbours.get(r.user_id, set())
            method = r.method.partition("@")[0]  # a consent-cost row (docs/privacy.md) follows its method's rule
            top_n = settings.clustering.community_top_n
            group = groups.get(method, {})
            if r.method == "clusterrag_collaborative" and tuned_nb is not None:  # tuned rows: the tuned neighbours
                nb = tuned_nb.get(r.user_id, set())
            if r.method == "clusterrag_community" and tuned_top_n is not None:
                top_n, group = tuned_top_n, tuned_groups or group
            if CONSENT_MARK in r.method and consent is not None:  # the consent scenario's own users and knobs
                if r.source_user_id != r.user_id and r.source_user_id in consent.opted_out:
                    bad.append(f"{r.method}/{r.sample_id}: doc {r.doc_id} of opted-out user {r.source_user_id}")
                if consent.neighbours:
                    nb = consent.neighbours.get(method, {}).get(r.user_id, set())
                    top_n, group = consent.community_top_n, consent.community_groups
            if method in ("dense_global", "item_cf") or (method == "clusterrag_community" and top_n):
                ok = True  # everyone the asker may see (not personalized; item_cf) / top-N most similar users of all
            elif method in groups:
                ok = group.get(r.source_user_id, -1) == group.get(r.user_id, -2)
            elif method in own_only:
                ok = r.source_user_id == r.user_id
            elif method == "clusterrag_collaborative":
                ok = r.source_user_id in nb
            else:
                ok = r.source_user_id == r.user_id or r.source_user_id in nb
            if not ok:
                bad.append(f"{r.method}/{r.sample_id}: doc {r.doc_id} of user {r.source_user_id}")
        if bad:
            problems.append(f"{len(bad)} documents come from users the method may not use, e.g. {bad[:3]}")
        return problems + unshareable_retrievals(con, task, df, settings.privacy.default_share)

    return extra


def consent_rules(con, task: str, df: pd.DataFrame, settings: Settings, clusterrag: bool) -> ConsentRules | None:
    """The consent scenario's rules when the rows hold consent-cost rows (ClusterRAG's tables: with its neighbours
    and clusters; others: only who opted out), else None."""
    if not df["method"].str.contains(CONSENT_MARK, regex=False).any():
        return None
    if clusterrag:
        return consent_check_rules(con, task, settings)
    return ConsentRules(set(task_opted_out(con, task, settings)), {}, 0, {})


def generation_suite(task: str, settings: Settings) -> list[Expect]:
    """Expectations of generations."""
    return [
        *not_null("method", "sample_id", "output", "prediction"),
        unique("method", "sample_id"),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "output", "min_value": 1, "mostly": 0.9}),
    ]


def generation_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Every method has a generation for each LLM-evaluation sample."""
    dev = [
        s
        for (s,) in con.execute(
            "SELECT sample_id FROM lamp_samples WHERE task = ? AND split = 'dev'", [task]
        ).fetchall()
    ]
    n = len(llm_eval_sample_ids(dev, settings))
    short = {m: len(g) for m, g in df.groupby("method") if len(g) != n}
    return [f"methods without a generation for each of the {n} LLM-evaluation samples: {short}"] if short else []


def evaluation_suite(task: str, settings: Settings) -> list[Expect]:
    """Expectations of lamp_evaluation (rows unless the run's budget deferred the generations: run.generation_samples
    = 0)."""
    return [
        *not_null("method", "metric", "value"),
        unique("method", "metric"),
        *([min_rows(1)] if settings.run.generation_samples != 0 else []),
        Expect("ExpectColumnValuesToBeBetween", {"column": "n_samples", "min_value": 1}),
    ]


def evaluation_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Every metric within its bounds and inside its interval."""
    problems = []
    for r in df.itertuples():
        low, high = metric_bounds(r.metric)
        if not low <= r.value <= high:
            problems.append(f"{r.method} {r.metric} = {r.value} outside [{low}, {high}]")
        if r.ci_low == r.ci_low and not r.ci_low - 1e-9 <= r.value <= r.ci_high + 1e-9:  # NaN: no interval at n = 1
            problems.append(f"{r.method} {r.metric} = {r.value} outside its interval [{r.ci_low}, {r.ci_high}]")
    return problems


# Tables of the dynamic-user (history) assets: an incremental update never leaves a user without one cluster. Given
# the run that made the update, the rules read only the rows it changed (its users, the neighbour lists it refreshed).


def _count(con, sql: str, task: str, run_id: str | None = None) -> int:
    """A count query with the task for every '?' (and the run id for every '$run')."""
    sql = sql.replace("$run", "$2").replace("?", "$1")
    return int(con.execute(sql, [task, run_id] if "$2" in sql else [task]).fetchall()[0][0])


def one_cluster_problems(con, task: str, settings: Settings, run_id: str | None = None) -> list[str]:
    """Users without exactly one non-negative cluster, or clustered users without an embedding, or users with
    applied history placed other than by the rule (docs/privacy.md) — among the users the incremental run ``run_id``
    updated (every user when None)."""
    if run_id and not has_table(con, UPDATES_TABLE):
        return []  # no incremental update has run on this file: the run changed no user
    scope = (
        f"AND user_id IN (SELECT user_id FROM {UPDATES_TABLE} WHERE task = ? AND run_id = $run)" if run_id else ""
    )
    problems = []
    checks = {
        "users with an embedding but no cluster": "SELECT count(*) FROM user_embeddings e WHERE e.task = ? AND NOT "
        f"EXISTS (SELECT 1 FROM user_clusters c WHERE c.task = e.task AND c.user_id = e.user_id) {scope}",
        "users with more than one cluster row": "SELECT count(*) FROM (SELECT user_id FROM user_clusters "
        f"WHERE task = ? {scope} GROUP BY user_id HAVING count(*) > 1)",
        "users with a null or negative cluster": "SELECT count(*) FROM user_clusters WHERE task = ? AND "
        f"(cluster IS NULL OR cluster < 0) {scope}",
        "clustered users without an embedding": "SELECT count(*) FROM user_clusters c WHERE c.task = ? AND NOT "
        f"EXISTS (SELECT 1 FROM user_embeddings e WHERE e.task = c.task AND e.user_id = c.user_id) {scope}",
    }
    for what, sql in checks.items():
        if n := _count(con, sql, task, run_id):
            problems.append(f"{n} {what}")
    if has_table(con, HISTORY_TABLE) and has_table(con, "profile_documents"):
        problems += _placement_problems(con, task, settings, scope.replace("AND user_id", "AND h.user_id"), run_id)
    return problems


def _placement_problems(con, task: str, settings: Settings, scope: str, run_id: str | None) -> list[str]:
    """Users with applied history are placed (z_u, a cluster) exactly when the rule places them
    (``users/placement.unplaced_users``: not a user known only from documents others may not see)."""
    from prag_models.users.placement import unplaced_users

    sql = (
        "SELECT DISTINCT h.user_id, EXISTS (SELECT 1 FROM user_clusters c WHERE c.task = h.task AND "
        "c.user_id = h.user_id), EXISTS (SELECT 1 FROM user_embeddings e WHERE e.task = h.task AND "
        f"e.user_id = h.user_id) FROM {HISTORY_TABLE} h JOIN profile_documents p USING (task, user_id, doc_id, "
        f"content_hash) WHERE h.task = ? {scope}"
    ).replace("$run", "$2").replace("?", "$1")
    rows = con.execute(sql, [task, run_id] if "$2" in sql else [task]).fetchall()
    unplaced = unplaced_users(con, task, [u for u, _, _ in rows], settings.privacy.default_share)
    problems = []
    if n := sum(1 for u, clustered, _ in rows if not clustered and u not in unplaced):
        problems.append(f"{n} users with applied history have no cluster")
    if n := sum(1 for u, clustered, embedded in rows if (clustered or embedded) and u in unplaced):
        problems.append(f"{n} users known only from documents others may not see have a z_u or a cluster")
    return problems


def neighbour_problems(con, task: str, settings: Settings, run_id: str | None = None) -> list[str]:
    """Neighbour pairs across clusters or with the user itself, or more than k neighbours for a user — in the lists
    the incremental run ``run_id`` refreshed (every list when None)."""
    if run_id and not has_table(con, REFRESH_TABLE):
        return []  # no neighbour list was ever refreshed incrementally: the run changed none
    scope = (
        f"AND s.user_id IN (SELECT user_id FROM {REFRESH_TABLE} WHERE task = ? AND run_id = $run)" if run_id else ""
    )
    problems = []
    cross = (
        "SELECT count(*) FROM similar_users s JOIN user_clusters a ON a.task = s.task AND a.user_id = s.user_id "
        "JOIN user_clusters b ON b.task = s.task AND b.user_id = s.neighbour_id WHERE s.task = ? AND "
        f"(a.cluster <> b.cluster OR s.user_id = s.neighbour_id) {scope}"
    )
    if n := _count(con, cross, task, run_id):
        problems.append(f"{n} neighbour pairs cross clusters or pair a user with itself")
    k = settings.clustering.similar_users
    over = (
        f"SELECT count(*) FROM (SELECT s.user_id FROM similar_users s WHERE s.task = ? {scope} GROUP BY 1 "
        f"HAVING count(*) > {k})"
    )
    if n := _count(con, over, task, run_id):
        problems.append(f"{n} users have more than {k} neighbours")
    return problems


def changed_rows(con, task: str, run_id: str) -> dict[str, int]:
    """How many users an incremental run updated and how many neighbour lists it refreshed (what its checks read)."""
    out = {}
    for name, table in (("users_updated", UPDATES_TABLE), ("lists_refreshed", REFRESH_TABLE)):
        sql = f"SELECT count(DISTINCT user_id) FROM {table} WHERE task = ? AND run_id = $run"
        out[name] = _count(con, sql, task, run_id) if has_table(con, table) else 0
    return out


def state_problems(con, task: str, settings: Settings, run_id: str | None = None) -> list[str]:
    """cluster_state must hold every clustered user with the same cluster, and fit rows with embeddings."""
    sql = (
        f"SELECT count(*) FROM (SELECT user_id, cluster FROM user_clusters WHERE task = ?) u FULL OUTER JOIN "
        f"(SELECT user_id, cluster FROM {STATE_TABLE} WHERE task = ?) s ON u.user_id = s.user_id "
        "WHERE u.cluster IS DISTINCT FROM s.cluster"
    )
    n = _count(con, sql, task)
    return [f"{n} users differ between user_clusters and cluster_state"] if n else []


def tuned_settings_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """ClusterRAG's tuned values: known knobs of a tunable method, each value inside its search space, the chosen
    train score not below the default's (docs/methods.md §3.9)."""
    import json

    from prag_models.methods.knobs import KNOB_SPACE, method_space

    problems = []
    for r in df.itertuples(index=False):
        space = method_space(settings, r.method) if r.method in KNOB_SPACE else {}
        if r.knob not in space:
            problems.append(f"{r.method}: {r.knob} is not one of its knobs {sorted(space)}")
        elif json.loads(r.value) not in space[r.knob]:
            problems.append(f"{r.method}: {r.knob} = {r.value} is outside its search space {space[r.knob]}")
    if (df["score"] < df["default_score"]).any():
        problems.append("a chosen score is below the default's: the search must never choose a worse setting")
    return problems
