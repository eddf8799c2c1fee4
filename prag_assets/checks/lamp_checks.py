"""Blocking checks on every LaMP stage: a failure stops everything downstream before it is written."""

from collections.abc import Callable

import dagster as dg

from prag_assets.assets import embeddings, evaluation, generation, lamp_data, retrieval, tuning, users, utility
from prag_assets.checks.per_task import CheckEvents, TaskOutcome, report, task_check
from prag_assets.execution import task_run
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import Settings
from prag_models.stages import table_rules as rules
from prag_models.stages.llm_utility import utility_extra, utility_suite
from prag_models.stages.table_rules import Extra
from prag_models.storage.store import read_rows
from prag_models.storage.validation import (
    Expect,
    between,
    not_null,
    unique,
    validate_frame,
)


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
        outcomes: dict[str, TaskOutcome] = {}
        with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
            for task in tasks:
                df = read_rows(con, table, {"task": task})
                ok, problems = validate_frame(f"{table}_{task.replace('-', '')}", df, suite(task, settings))
                if extra and len(df):
                    problems += extra(con, task, df, settings)
                outcomes[task] = TaskOutcome(errors=problems, metadata={"rows": len(df)})
        yield from report(context, outcomes)

    return _check


lamp_checks = [
    table_check(
        lamp_data.lamp_samples,
        "lamp_samples",
        "samples_valid",
        "Schema, ids unique, no nulls, dev golds present and inside the label set.",
        rules.samples_suite,
        rules.samples_extra,
    ),
    table_check(
        lamp_data.profile_documents,
        "profile_documents",
        "documents_valid",
        "No nulls or empty texts, (user, doc) unique.",
        rules.docs_suite,
    ),
    table_check(
        embeddings.document_embeddings,
        "document_embeddings",
        "embeddings_valid",
        "One finite unit vector of one dimension per profile document.",
        lambda t, s: [*not_null("doc_id", "embedding"), unique("user_id", "doc_id")],
        rules.vectors_extra("doc"),
    ),
    table_check(
        embeddings.query_embeddings,
        "query_embeddings",
        "embeddings_valid",
        "One finite unit vector per sample query.",
        lambda t, s: [*not_null("sample_id", "embedding"), unique("sample_id")],
        rules.vectors_extra("query"),
    ),
    table_check(
        users.user_embeddings,
        "user_embeddings",
        "user_vectors_valid",
        "Every user of the task has exactly one finite embedding.",
        lambda t, s: [*not_null("user_id", "embedding"), unique("user_id")],
        rules.vectors_extra("user"),
    ),
    table_check(
        users.user_clusters,
        "user_clusters",
        "one_cluster_per_user",
        "Every user is in exactly one cluster.",
        lambda t, s: [*not_null("user_id", "cluster"), unique("user_id"), between("cluster", 0, None)],
        rules.clusters_extra,
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
        rules.neighbours_extra,
    ),
    table_check(
        tuning.tuned_settings,
        "tuned_settings",
        "tuned_values_valid",
        "One row per ClusterRAG knob and tuned method (none when tuning is off), every value inside its search "
        "space, the chosen train score at least the default's.",
        lambda t, s: [
            *not_null("method", "knob", "value", "default_value", "score", "default_score"),
            unique("method", "knob"),
            between("n_trials", 1, None),
            between("n_samples", 1, None),
        ],
        rules.tuned_settings_extra,
    ),
    table_check(
        retrieval.baseline_retrievals,
        "baseline_retrievals",
        "retrieved_docs_allowed",
        "Retrieved documents exist and come only from the user's own profile (dense_global: anyone; "
        "oracle_community: the user's planted community).",
        rules.retrieval_suite,
        rules.retrieval_extra("baseline_retrievals"),
    ),
    table_check(
        retrieval.clusterrag_retrievals,
        "clusterrag_retrievals",
        "retrieved_docs_allowed",
        "Retrieved documents exist and come only from the user or its similar users, as the mode allows "
        "(community mode: the user's cluster).",
        rules.retrieval_suite,
        rules.retrieval_extra("clusterrag_retrievals"),
    ),
    table_check(
        generation.generations,
        "generations",
        "generations_non_empty",
        "Every (method, dev sample) has a generation; outputs non-empty (at least 90 %).",
        rules.generation_suite,
        rules.generation_extra,
    ),
    table_check(
        utility.llm_utility,
        "llm_utility",
        "utility_valid",
        "Every utility value is a finite log-likelihood per token (<= 0) over at least one token; every test sample "
        "has the chosen method's value and dense_global's.",
        utility_suite,
        utility_extra,
    ),
    table_check(
        evaluation.lamp_evaluation,
        "lamp_evaluation",
        "metrics_in_bounds",
        "Every metric within its bounds and inside its 95 % interval, computed over at least one sample.",
        rules.evaluation_suite,
        rules.evaluation_extra,
    ),
]
