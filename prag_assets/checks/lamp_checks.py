"""Blocking checks on every LaMP stage: a failure stops everything downstream before it is written."""

from collections.abc import Callable

import dagster as dg
import pandas as pd

from prag_assets.assets import embeddings, evaluation, generation, lamp_data, retrieval, users
from prag_assets.checks.per_task import CheckEvents, TaskOutcome, report, task_check
from prag_assets.common import run_tasks
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models.config import Settings
from prag_models.data.source import llm_eval_sample_ids
from prag_models.data.tasks import LABELS, TASK_KIND
from prag_models.metrics import metric_bounds
from prag_models.store import column_to_matrix, read_rows, table_exists
from prag_models.validation import (
    Expect,
    between,
    has_columns,
    in_set,
    matrix_problems,
    min_rows,
    not_null,
    unique,
    validate_frame,
)

#: (connection, task, table rows, settings) → problems that GX has no expectation for.
Extra = Callable[[object, str, pd.DataFrame, Settings], list[str]]


def table_check(
    asset: dg.AssetsDefinition,
    table: str,
    name: str,
    description: str,
    suite: Callable[[str, Settings], list[Expect]],
    extra: Extra | None = None,
) -> dg.AssetChecksDefinition:
    """A blocking check that runs a GX suite (and optional extra checks) on each task's rows, reported per task."""

    @task_check(asset, name, description)
    def _check(
        context: dg.AssetCheckExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
    ) -> CheckEvents:
        settings = prag_settings.get()
        outcomes: dict[str, TaskOutcome] = {}
        with duckdb.connect() as con:
            for task in run_tasks(context, settings):
                df = read_rows(con, table, {"task": task})
                ok, problems = validate_frame(f"{table}_{task.replace('-', '')}", df, suite(task, settings))
                if extra and len(df):
                    problems += extra(con, task, df, settings)
                outcomes[task] = TaskOutcome(errors=problems, metadata={"rows": len(df)})
        yield from report(context, outcomes)

    return _check


def _samples_suite(task: str, settings: Settings) -> list[Expect]:
    return [
        *has_columns("task", "split", "sample_id", "user_id", "input", "query", "gold"),
        *not_null("sample_id", "user_id", "input", "query"),
        unique("sample_id"),
        min_rows(1),
        in_set("split", ["train", "dev"]),
    ]


def _samples_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    dev = df[df["split"] == "dev"]
    problems = [] if len(dev) else ["no dev samples"]
    if dev["gold"].isna().any():
        problems.append(f"{int(dev['gold'].isna().sum())} dev samples have no gold output")
    if TASK_KIND[task] != "generation":
        bad = sorted(set(dev["gold"].dropna()) - set(LABELS[task]))
        if bad:
            problems.append(f"gold labels outside the label set: {bad[:5]}")
    return problems


def _docs_suite(task: str, settings: Settings) -> list[Expect]:
    return [
        *not_null("user_id", "doc_id", "text", "content_hash"),
        unique("user_id", "doc_id"),
        min_rows(1),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "text", "min_value": 1}),
    ]


def _vectors_extra(key: str) -> Extra:
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


def _clusters_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    users_all = {u for (u,) in con.execute("SELECT user_id FROM user_embeddings WHERE task = ?", [task]).fetchall()}
    missing = users_all - set(df["user_id"])
    return [f"{len(missing)} users have no cluster, e.g. {sorted(missing)[:3]}"] if missing else []


def _neighbours_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    bad = con.execute(
        "SELECT count(*) FROM similar_users s JOIN user_clusters a ON a.task = s.task AND a.user_id = s.user_id "
        "JOIN user_clusters b ON b.task = s.task AND b.user_id = s.neighbour_id "
        "WHERE s.task = ? AND (a.cluster <> b.cluster OR s.user_id = s.neighbour_id)",
        [task],
    ).fetchone()[0]
    return [f"{bad} neighbour pairs cross clusters or pair a user with itself"] if bad else []


def _retrieval_suite(task: str, settings: Settings) -> list[Expect]:
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


def _retrieval_extra(table: str) -> Extra:
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
        for r in df.itertuples():
            nb = neighbours.get(r.user_id, set())
            if r.method == "dense_global" or (
                r.method == "clusterrag_community" and settings.clustering.community_top_n
            ):
                ok = True  # not personalized / top-N most similar users of all
            elif r.method in groups:
                ok = groups[r.method].get(r.source_user_id, -1) == groups[r.method].get(r.user_id, -2)
            elif r.method in own_only:
                ok = r.source_user_id == r.user_id
            elif r.method == "clusterrag_collaborative":
                ok = r.source_user_id in nb
            else:
                ok = r.source_user_id == r.user_id or r.source_user_id in nb
            if not ok:
                bad.append(f"{r.method}/{r.sample_id}: doc {r.doc_id} of user {r.source_user_id}")
        if bad:
            problems.append(f"{len(bad)} documents come from users the method may not use, e.g. {bad[:3]}")
        return problems

    return extra


def _generation_suite(task: str, settings: Settings) -> list[Expect]:
    return [
        *not_null("method", "sample_id", "output", "prediction"),
        unique("method", "sample_id"),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "output", "min_value": 1, "mostly": 0.9}),
    ]


def _generation_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    dev = [
        s
        for (s,) in con.execute(
            "SELECT sample_id FROM lamp_samples WHERE task = ? AND split = 'dev'", [task]
        ).fetchall()
    ]
    n = len(llm_eval_sample_ids(dev, settings))
    short = {m: len(g) for m, g in df.groupby("method") if len(g) != n}
    return [f"methods without a generation for each of the {n} LLM-evaluation samples: {short}"] if short else []


def _evaluation_suite(task: str, settings: Settings) -> list[Expect]:
    return [
        *not_null("method", "metric", "value"),
        unique("method", "metric"),
        min_rows(1),
        Expect("ExpectColumnValuesToBeBetween", {"column": "n_samples", "min_value": 1}),
    ]


def _evaluation_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    problems = []
    for r in df.itertuples():
        low, high = metric_bounds(r.metric)
        if not low <= r.value <= high:
            problems.append(f"{r.method} {r.metric} = {r.value} outside [{low}, {high}]")
        if not r.ci_low - 1e-9 <= r.value <= r.ci_high + 1e-9:
            problems.append(f"{r.method} {r.metric} = {r.value} outside its interval [{r.ci_low}, {r.ci_high}]")
    return problems


lamp_checks = [
    table_check(
        lamp_data.lamp_samples,
        "lamp_samples",
        "samples_valid",
        "Schema, ids unique, no nulls, dev golds present and inside the label set.",
        _samples_suite,
        _samples_extra,
    ),
    table_check(
        lamp_data.profile_documents,
        "profile_documents",
        "documents_valid",
        "No nulls or empty texts, (user, doc) unique.",
        _docs_suite,
    ),
    table_check(
        embeddings.document_embeddings,
        "document_embeddings",
        "embeddings_valid",
        "One finite unit vector of one dimension per profile document.",
        lambda t, s: [*not_null("doc_id", "embedding"), unique("user_id", "doc_id")],
        _vectors_extra("doc"),
    ),
    table_check(
        embeddings.query_embeddings,
        "query_embeddings",
        "embeddings_valid",
        "One finite unit vector per sample query.",
        lambda t, s: [*not_null("sample_id", "embedding"), unique("sample_id")],
        _vectors_extra("query"),
    ),
    table_check(
        users.user_embeddings,
        "user_embeddings",
        "user_vectors_valid",
        "Every user of the task has exactly one finite embedding.",
        lambda t, s: [*not_null("user_id", "embedding"), unique("user_id")],
        _vectors_extra("user"),
    ),
    table_check(
        users.user_clusters,
        "user_clusters",
        "one_cluster_per_user",
        "Every user is in exactly one cluster.",
        lambda t, s: [*not_null("user_id", "cluster"), unique("user_id"), between("cluster", 0, None)],
        _clusters_extra,
    ),
    table_check(
        users.similar_users,
        "similar_users",
        "neighbours_valid",
        "Neighbours are other members of the same cluster, ranks 1..k, cosine in [-1, 1].",
        lambda t, s: [
            unique("user_id", "neighbour_id"),
            between("rank", 1, s.clustering.similar_users),
            between("similarity", -1.0001, 1.0001),
        ],
        _neighbours_extra,
    ),
    table_check(
        retrieval.baseline_retrievals,
        "baseline_retrievals",
        "retrieved_docs_allowed",
        "Retrieved documents exist and come only from the user's own profile (dense_global: anyone; "
        "oracle_community: the user's planted community).",
        _retrieval_suite,
        _retrieval_extra("baseline_retrievals"),
    ),
    table_check(
        retrieval.clusterrag_retrievals,
        "clusterrag_retrievals",
        "retrieved_docs_allowed",
        "Retrieved documents exist and come only from the user or its similar users, as the mode allows "
        "(community mode: the user's cluster).",
        _retrieval_suite,
        _retrieval_extra("clusterrag_retrievals"),
    ),
    table_check(
        generation.generations,
        "generations",
        "generations_non_empty",
        "Every (method, dev sample) has a generation; outputs non-empty (at least 90 %).",
        _generation_suite,
        _generation_extra,
    ),
    table_check(
        evaluation.lamp_evaluation,
        "lamp_evaluation",
        "metrics_in_bounds",
        "Every metric within its bounds and inside its 95 % interval, computed over at least one sample.",
        _evaluation_suite,
        _evaluation_extra,
    ),
]
