"""CFRAG models in MLflow for the assets: save a trained model, log and register it (MlflowResource) in the run
opened around its fit, record its ``cfrag_models`` row; load the version a training asset registered or the
challenger; loss curves and links to the MLflow UI's run and version pages as metadata (lineage both ways: the runs
and versions carry the Dagster run id, asset key and partition as tags)."""

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg
import numpy as np

from prag_assets.builders.task_table import task_asset
from prag_assets.execution import TaskStep, run_stage
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import Settings
from prag_models.methods.cfrag.probes import loss_trend, probe_scores
from prag_models.methods.cfrag.tables import MODELS_TABLE, load_probe, model_dir, model_row, models_row
from prag_models.methods.cfrag.training import Tracker, Trained
from prag_models.methods.cfrag.tuning import tuned_cfrag_settings
from prag_models.mlops.registry import CHALLENGER, RegisteredVersion, model_aliases, registered_name
from prag_models.mlops.runs import Lineage
from prag_models.storage.store import replace_rows


def record_model(
    con, mlflow: MlflowResource, settings: Settings, task: str, trained: Trained, lineage: Lineage | None = None
) -> tuple[dict[str, Any], RegisteredVersion]:  # fmt: skip
    """Save a trained model, log + register it in MLflow (in the run opened around its fit, with the per-epoch
    validation record of a FitResult when there is one, the training rows and the lineage), write its
    ``cfrag_models`` row; returns a metadata entry and the registered version."""
    from prag_models.methods.cfrag.serialization import save_model

    kind, curve = trained.kind, trained.curve
    folder = save_model(trained.model, model_dir(settings, task, kind))
    probe = probe_scores(kind, trained.model, load_probe(con, task, settings.privacy.default_share))
    name = registered_name(kind, task)
    rows = None if trained.rows is None else (trained.rows, str(settings.duckdb_path))
    entry = mlflow.log_and_register(folder, name, trained.params, curve, trained.data_version,
                                    tags=trained.registry_tags(task), epoch_metrics=trained.epoch_metrics(),
                                    run_id=trained.run_id, lineage=lineage, dataset=rows,
                                    settings=settings)  # fmt: skip
    row = models_row(task, kind, entry, trained.data_version, curve, probe, trained.seconds, folder)
    replace_rows(con, MODELS_TABLE, row, {"task": task, "kind": kind})
    return model_metadata(trained, entry), entry


def model_metadata(trained: Trained, entry: RegisteredVersion) -> dict[str, Any]:
    """A registered model's metadata entry: its version, run and data, then its training figures; a model kept at
    its initialisation says so with why (the probe's figures) instead of loss fields (no nulls)."""
    curve = trained.curve
    meta: dict[str, Any] = {"registered": f"{entry.name}/{entry.version}", "mlflow_run_id": entry.run_id,
                            "aliases": list(entry.aliases), "data_version": trained.data_version}  # fmt: skip
    if trained.skipped or not curve:
        why = trained.skipped or "no training step ran"
        return {**meta, "training": f"untrained: registered at its initialisation ({why})", "steps": 0,
                "train_seconds": round(trained.seconds, 2), **trained.summary()}  # fmt: skip
    start, end = loss_trend(curve)
    return {
        **meta,
        "steps": len(curve),
        "loss_first": round(curve[0], 5),
        "loss_last": round(curve[-1], 5),
        "loss_start_mean": round(start, 5),
        "loss_end_mean": round(end, 5),
        "train_seconds": round(trained.seconds, 2),
        **trained.summary(),
    }


def load_registered_model(con, mlflow: MlflowResource, task: str, kind: str) -> tuple[Any, dict[str, Any]]:
    """Load from MLflow the exact version the training asset registered (version number from ``cfrag_models``)."""
    row = model_row(con, task, kind)
    model, _ = mlflow.load(row["registered_name"], version=int(row["version"]))
    return model, row


def load_challenger(con, mlflow: MlflowResource, task: str, kind: str) -> tuple[object, dict]:
    """The ``challenger`` version of a model kind; the version in ``cfrag_models`` when the alias does not exist."""
    row = model_row(con, task, kind)
    name = row["registered_name"]
    if CHALLENGER in model_aliases(mlflow.target(), name):
        model, entry = mlflow.load(name, alias=CHALLENGER)
        return model, {"registered_name": name, "version": entry.version, "loaded_by": f"alias {CHALLENGER}"}
    model, _ = load_registered_model(con, mlflow, task, kind)
    return model, {"registered_name": name, "version": int(row["version"]), "loaded_by": "cfrag_models version"}


def load_champion_bundle(mlflow: MlflowResource, task: str) -> tuple[dict[str, Any], dict[str, int]] | None:
    """The models and versions of a task's ``champion`` bundle (every kind), None when a kind has no champion."""
    from prag_models.mlops.registry import CHAMPION, MODEL_NAMES

    versions = {}
    for kind in MODEL_NAMES:
        aliases = model_aliases(mlflow.target(), registered_name(kind, task))
        if CHAMPION not in aliases:
            return None
        versions[kind] = aliases[CHAMPION]
    return {k: mlflow.load(registered_name(k, task), version=v)[0] for k, v in versions.items()}, versions


def loss_curve_markdown(curves: dict[str, list[float]], points: int = 12) -> dg.MetadataValue:
    """A compact markdown table of loss curves (about ``points`` evenly spaced steps per task)."""
    lines = ["| task | step: loss |", "|---|---|"]
    for task, curve in curves.items():
        steps = sorted({int(i) for i in np.linspace(0, len(curve) - 1, min(points, len(curve)))}) if curve else []
        shown = ", ".join(f"{s}: {curve[s]:.4f}" for s in steps) or "untrained: no training step (initialisation)"
        lines.append(f"| {task} | {shown} |")
    return dg.MetadataValue.md("\n".join(lines))


def lineage_metadata(key: str, links: dict[str, str]) -> dict[str, dg.MetadataValue]:
    """Links that open the MLflow UI on the run and on the model version of one trained model (``key``: the task,
    or task/kind when a task trains several): ``mlflow_run <key>`` and ``mlflow_version <key>``."""
    return {f"mlflow_run {key}": dg.MetadataValue.url(links["run"]),
            f"mlflow_version {key}": dg.MetadataValue.url(links["version"])}  # fmt: skip


def step_lineage(context: dg.AssetExecutionContext, task: str, settings: Settings) -> Lineage:
    """The Dagster run id, job, asset key, partition (the task) and run page (``run.dagster_ui_url``) of one task's
    step, as plain strings (the lineage every MLflow run prag writes carries: ``resources.mlflow_registry``)."""
    from prag_assets.resources.mlflow_registry import dagster_lineage

    return dagster_lineage(context, settings, task)


def training_asset(
    *, name: str, deps: Sequence[Any], description: str, train: Callable[[TaskStep, Tracker], list[Trained]]
) -> dg.AssetsDefinition:
    """A CFRAG training asset: per task, train (one prag_models.methods.cfrag.training call, each fit inside its
    MLflow run), register, record; the metadata links each model's run and version in the MLflow UI."""

    def _step(step: TaskStep) -> dict[str, Any]:
        """Train, register and record one task's models; its partition shows their loss curves and MLflow links."""
        context, con, task, mlflow = step.context, step.con, step.task, step.mlflow
        stats, curves, links = {}, {}, {}
        lineage = step_lineage(context, task, step.settings)
        tracker = mlflow.tracker(task, lineage)
        task_settings = tuned_cfrag_settings(con, task, step.settings)  # registered as the version's settings
        try:
            trained_models = train(TaskStep(context, con, task, task_settings, step.models, mlflow), tracker)
            for trained in trained_models:
                key = task if len(trained_models) == 1 else f"{task}/{trained.kind}"
                stats[key], entry = record_model(con, mlflow, task_settings, task, trained, lineage)
                links.update(lineage_metadata(key, mlflow.ui_links(entry)))
                curves[key] = trained.curve
                context.log.info(f"{key} {trained.kind}: {stats[key]}")
        except BaseException:
            tracker.fail_unfinished()  # a run opened around a fit that never got registered
            raise
        step.shown.update({**({"loss_curves": loss_curve_markdown(curves)} if curves else {}), **links})
        # the task's statistics: the model's own, or one `kind/...` block per model where a task trains several
        per_task: dict[str, Any] = {}
        for key, value in stats.items():
            per_task.update({key.partition("/")[2]: value} if "/" in key else value)
        return per_task

    @task_asset("cfrag", name=name, deps=list(deps), kinds={"duckdb", "pytorch", "mlflow"}, description=description)
    def _asset(
        context: dg.AssetExecutionContext,
        prag_settings: PragSettingsResource,
        duckdb: DuckDBResource,
        models: ModelsResource,
        mlflow: MlflowResource,
    ) -> dg.MaterializeResult:
        run_stage(context, _step, settings=prag_settings.get(), duckdb=duckdb, table=MODELS_TABLE, models=models,
                  mlflow=mlflow)  # fmt: skip
        return dg.MaterializeResult()

    return _asset
