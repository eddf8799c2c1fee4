"""Blocking checks on the CFRAG stages: vectors, neighbours, feedback labels, training curves, MLflow round trips
and the provenance of retrieved documents."""

import dagster as dg
import numpy as np

from prag_assets.assets import cfrag, cfrag_training, cfrag_users
from prag_assets.checks.lamp_checks import table_check
from prag_assets.checks.per_task import CheckEvents, TaskOutcome, report, task_check
from prag_assets.execution import task_run
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.methods.cfrag import probes, tables, variants
from prag_models.methods.cfrag import table_rules as rules
from prag_models.methods.cfrag.feedback_probe import probe_stop_reason
from prag_models.methods.knobs import CFRAG_KNOB_SPACE
from prag_models.storage.validation import between, min_rows, not_null, unique

#: Largest allowed difference between the scores of a trained model and of its copy loaded back from MLflow.
ROUNDTRIP_TOLERANCE = 1e-5


@task_check(
    cfrag_training.feedback_labels,
    "feedback_not_degenerate",
    "ERROR (blocks training) when the current labels (generator, prompt version, signal) are missing, "
    "duplicated per (sample, doc) or outside the signal's range ([0, 1], [-4, 0] for negated LaMP-3 MAE, <= 0 for a "
    "gold log-likelihood). Reports the share of samples whose candidates all scored the same (they only teach a "
    "uniform distribution); above 50 % the check fails with WARN severity, which does not block.",
)
def feedback_not_degenerate(
    context: dg.AssetCheckExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> CheckEvents:
    """Validate the feedback labels of each task, reported per task."""
    generator_id = models.generator().model_id
    outcomes: dict[str, TaskOutcome] = {}
    with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
        for task in tasks:
            errors, warnings, info = rules.feedback_result(con, task, settings, generator_id)
            outcomes[task] = TaskOutcome(errors, warnings, {"labels": dg.MetadataValue.json(info)})
    yield from report(context, outcomes)


def _model_check(
    asset: dg.AssetsDefinition, kinds: tuple[str, ...], name: str, description: str, must_decrease: bool
) -> dg.AssetChecksDefinition:
    """A blocking check of trained models: finite loss curve (decreasing if asked), MLflow load-back scores equal."""

    @task_check(asset, name, description)
    def _check(
        context: dg.AssetCheckExecutionContext,
        prag_settings: PragSettingsResource,
        duckdb: DuckDBResource,
        mlflow: MlflowResource,
    ) -> CheckEvents:
        """Check the models of each task, reported per task."""
        outcomes: dict[str, TaskOutcome] = {}
        with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
            for task in tasks:
                probe = tables.load_probe(con, task)
                outcome = outcomes[task] = TaskOutcome()
                for kind in kinds:
                    problems, info = _model_problems(con, mlflow, task, kind, probe, must_decrease)
                    outcome.errors += [f"{kind}: {p}" for p in problems]
                    outcome.metadata[kind] = dg.MetadataValue.json(info)
        yield from report(context, outcomes)

    return _check


def _model_problems(
    con, mlflow: MlflowResource, task: str, kind: str, probe: probes.Probe, must_decrease: bool
) -> tuple[list[str], dict]:
    """Problems of one registered model and what was measured."""
    row = tables.model_row(con, task, kind)
    curve = np.asarray(row["loss_curve"], dtype=np.float64)
    start, end = probes.loss_trend(curve.tolist())
    info = {
        "registered": f"{row['registered_name']}/{row['version']}",
        "steps": len(curve),
        "loss_start": round(start, 5),
        "loss_end": round(end, 5),
    }
    problems = []
    untrained = probe_stop_reason(con, task) if kind != "user_encoder" and not len(curve) else ""
    if untrained:  # the feedback probe found no teacher headroom: the initialisation is registered, not trained
        info["untrained"] = untrained
    elif not len(curve) or not np.isfinite(curve).all():
        problems.append(f"loss curve empty or not finite ({len(curve)} steps)")
    elif must_decrease and not end < start:
        problems.append(f"loss did not decrease: start {start:.4f}, end {end:.4f}")
    model, _ = mlflow.load(row["registered_name"], version=int(row["version"]))
    again = probes.probe_scores(kind, model, probe)
    stored = np.asarray(row["probe_scores"], dtype=np.float32)
    diff = float(np.max(np.abs(again - stored))) if again.shape == stored.shape and len(stored) else float("inf")
    info["probe_scores"], info["roundtrip_max_abs_diff"] = len(stored), diff
    if not diff <= ROUNDTRIP_TOLERANCE:
        problems.append(f"the MLflow copy scores differently from the trained model (max |diff| = {diff})")
    return problems, info


cfrag_checks = [
    _model_check(
        cfrag_users.cfrag_user_encoder,
        ("user_encoder",),
        "encoder_trained",
        "InfoNCE loss finite and lower at the end than at the start (means of the first and last few steps); the "
        "version registered in MLflow loads back (safetensors) and encodes the probe users identically.",
        must_decrease=True,
    ),
    table_check(
        cfrag_users.cfrag_user_embeddings,
        "cfrag_user_embeddings",
        "cfrag_user_vectors_valid",
        "Every user of the task has exactly one finite CFRAG embedding.",
        lambda t, s: [*not_null("user_id", "embedding"), unique("user_id"), min_rows(1)],
        rules.user_vectors_extra,
    ),
    table_check(
        cfrag_users.cfrag_tuned_settings,
        "cfrag_tuned_settings",
        "cfrag_tuned_settings_valid",
        "One row per CFRAG knob (none when tuning is off), every value inside its search space, the chosen train "
        "score at least the default's, trials and samples counted.",
        lambda t, s: [*not_null("knob", "value", "default_value", "score", "default_score", "metric"),
                      unique("knob"), between("n_trials", 1, None), between("n_samples", 1, None)],  # fmt: skip
        rules.tuned_extra,
    ),
    table_check(
        cfrag_users.cfrag_similar_users,
        "cfrag_similar_users",
        "cfrag_neighbours_valid",
        "min(m, users) neighbours per user (m as tuned for the task), ranks 1..m, the user itself first with "
        "include_self, cosine in [-1, 1].",
        lambda t, s: [
            unique("user_id", "neighbour_id"),
            unique("user_id", "rank"),
            between("rank", 1, max(s.cfrag.top_m_users, *CFRAG_KNOB_SPACE["cfrag.top_m_users"])),  # exact: extra
            between("similarity", -1.0001, 1.0001),
        ],
        rules.neighbours_extra,
    ),
    feedback_not_degenerate,
    _model_check(
        cfrag_training.cfrag_retriever,
        ("retriever",),
        "retriever_trained",
        "KL loss finite (one epoch: start and end are reported, not required to decrease); the registered version "
        "loads back from MLflow and scores the probe candidates identically.",
        must_decrease=False,
    ),
    _model_check(
        cfrag_training.cfrag_reranker,
        ("reranker", "reranker_no_eu"),
        "reranker_trained",
        "KL loss finite for the reranker and its no-e_u ablation (start/end reported); both registered versions load "
        "back from MLflow and score the probe (query, doc) pairs identically.",
        must_decrease=False,
    ),
    table_check(
        cfrag.cfrag_retrievals,
        "cfrag_retrievals",
        "retrieved_docs_allowed",
        "Every CFRAG method present; retrieved documents exist and come only from the user's m similar users "
        "(encoder or mean-embedding neighbours, as the method says) or, without user retrieval, from the user.",
        lambda t, s: [
            *not_null("method", "sample_id", "user_id", "doc_id", "source_user_id", "score"),
            unique("method", "sample_id", "rank"),
            between("rank", 1, variants.final_k(s)),
            min_rows(1),
        ],
        rules.retrieval_extra,
    ),
]
