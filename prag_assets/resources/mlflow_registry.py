"""MLflow as a Dagster resource: tracking + registry in a sqlite store under the prag home (or a configured URI).

Every CFRAG model it registers is an MLflow pyfunc model (``prag_models.mlops.pyfunc``) whose
predict serves (task, user_id, query) rows from this home's DuckDB file. Every MLflow run written through it carries
the Dagster lineage of the step writing it (:func:`dagster_lineage`: run id, job, asset, partition and the run's page
at ``run.dagster_ui_url``): the target it hands out holds that lineage (:meth:`MlflowResource.target`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import Settings
from prag_models.mlops.registry import MlflowTarget, RegisteredVersion
from prag_models.mlops.runs import Lineage, RunTracker, dagster_run_url

if TYPE_CHECKING:
    from torch import nn


def dagster_lineage(
    context: dg.AssetExecutionContext | dg.OpExecutionContext, settings: Settings, partition: str = ""
) -> Lineage:  # fmt: skip
    """The Dagster run id, job (none for an ad-hoc materialization's hidden job), asset key, ``partition``, the
    partitions the step materializes and the run's page at ``run.dagster_ui_url``, as plain strings: the lineage
    every MLflow run prag writes is tagged with."""
    run_id, job = context.run.run_id, context.job_name
    keys = list(context.selected_asset_keys) if context.has_assets_def else []
    partitioned = bool(keys) and context.assets_def.partitions_def is not None
    ranged = partitioned and (context.has_partition_key_range or context.has_partition_key)
    return Lineage(run_id, keys[0].to_user_string() if len(keys) == 1 else "", partition,
                   dagster_run_url(settings.run.dagster_ui_url, run_id), "" if job.startswith("__") else job,
                   tuple(context.partition_keys) if ranged else ())  # fmt: skip


def current_lineage(settings: Settings) -> Lineage:
    """The lineage of the Dagster step running in this thread (:func:`dagster_lineage`); empty outside an asset or op
    step (the command line, a check)."""
    try:
        context = dg.AssetExecutionContext.get()
    except dg.DagsterInvariantViolationError:
        return Lineage()
    return dagster_lineage(context, settings)


class MlflowResource(dg.ConfigurableResource):
    """Logs, registers and loads the CFRAG models (safetensors folders) through ``prag_models.mlops.registry``."""

    settings: PragSettingsResource

    def target(self) -> MlflowTarget:
        """Tracking URI (``settings.mlflow_uri``), experiment, the local artifact folder of the default store, and
        the lineage of the Dagster step calling it (every run written through the target is tagged with it)."""
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
        s = self.settings.get()
        artifacts = "" if s.mlflow.tracking_uri else str(s.mlflow_artifacts_path)
        return MlflowTarget(tracking_uri=s.mlflow_uri, experiment=s.mlflow.experiment, artifact_location=artifacts,
                            lineage=current_lineage(s))  # fmt: skip

    def log_and_register(self, model_dir: str | Path, name: str, params: Mapping[str, Any], loss_curve: Sequence[float],
                         data_version: str, tags: Mapping[str, str] | None = None, settings: Any = None,
                         **record: Any) -> RegisteredVersion:  # fmt: skip
        """Log a saved model folder with its training record (``record``: prag_models.mlops.registry.log_and_register's
        epoch_metrics, run_id — the run the fit opened —, lineage, dataset) and register it as a new version of
        ``name``: a pyfunc model when ``tags`` name the task and a CFRAG model kind, serving with ``settings`` (the
        task's, CFRAG's tuned knobs included; the resource's settings when None)."""
        from functools import partial

        from prag_models.mlops import pyfunc as serving_pyfunc
        from prag_models.mlops.registry import log_and_register

        target, tags = self.target(), dict(tags or {})
        package = None
        if tags.get("task") and tags.get("kind") in serving_pyfunc.KIND_VARIANTS:
            config = serving_pyfunc.model_config(
                tags["task"], tags["kind"], name, settings or self.settings.get(), target.tracking_uri
            )
            package = partial(serving_pyfunc.save_pyfunc, weights=model_dir, config=config)
        return log_and_register(
            target, model_dir, name, params, loss_curve, data_version, tags, package=package, **record
        )

    def tracker(self, task: str, lineage: Lineage) -> RunTracker:
        """kind -> an MLflow run around that kind's fit for ``task``, tagged with the Dagster lineage."""
        from prag_models.mlops.registry import tracker

        return tracker(self.target(), task, lineage)

    def ui_links(self, entry: RegisteredVersion) -> dict[str, str]:
        """The MLflow UI pages (``Settings.mlflow_ui_url``) of a version's run and of the version (classic view)."""
        from prag_models.mlops.registry import ui_links

        return ui_links(self.target(), self.settings.get().mlflow_ui_url, entry)

    def load(self, name: str, version: int | None = None, alias: str = "") -> tuple[nn.Module, RegisteredVersion]:
        """A registered version (by number or alias), downloaded and loaded from safetensors."""
        from prag_models.mlops.registry import load_registered

        return load_registered(self.target(), name, version, alias)
