"""MLflow runs of the CFRAG trainings: opened before the fit and closed by the registration, with lineage.

A training run starts when the fit starts (:func:`training_run`), so its duration is the training's; it carries the
orchestrator's lineage as tags (:class:`Lineage`: the Dagster run id, job, asset key, partition and run page, as plain
strings — prag_models never imports dagster), a source (``mlflow.source.*``) and, once registered, the training rows
as a dataset input (:func:`log_training_dataset`). Every run prag writes (trainings and tuning searches) takes its
tags from :func:`run_tags`. :func:`run_url` and :func:`version_url` are the MLflow UI's pages of a
run and of a model version (the UI's hash routes), which the assets link to from their materializations.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient

#: Run / version tags holding the orchestrator's lineage.
LINEAGE_TAGS = ("dagster.run_id", "dagster.asset_key", "dagster.partition", "dagster.run_url", "dagster.job")
#: The query that opens MLflow 3's UI on its classic model-training view (the UI's default is its GenAI view).
CLASSIC_VIEW = "workflowType=machine_learning"


@dataclass(frozen=True)
class Lineage:
    """Which orchestrator run, job, asset and partition wrote a run (plain strings; empty = unknown)."""

    run_id: str = ""
    asset_key: str = ""
    partition: str = ""
    url: str = ""  # the run's page in the Dagster UI
    job: str = ""
    partitions: tuple[str, ...] = ()  # every partition the step materializes (a range: one step, several tasks)

    def tags(self) -> dict[str, str]:
        """The non-empty lineage fields as MLflow tags (``dagster.run_id``, ``dagster.asset_key``, ...)."""
        values = (self.run_id, self.asset_key, self.partition, self.url, self.job)
        return {key: value for key, value in zip(LINEAGE_TAGS, values, strict=True) if value}

    def for_task(self, task: str) -> Lineage:
        """The lineage of what one task's work writes: its partition when the step materializes that task's."""
        return replace(self, partition=task) if task and task in self.partitions else self


def source_tags(lineage: Lineage, entry_point: str) -> dict[str, str]:
    """``mlflow.source.*`` and user tags: the Dagster asset when there is one, else the Python entry point."""
    from mlflow.tracking.context.registry import resolve_tags

    tags = {k: str(v) for k, v in resolve_tags().items() if k.startswith(("mlflow.source.git", "mlflow.user"))}
    if lineage.asset_key:
        tags |= {"mlflow.source.type": "JOB", "mlflow.source.name": f"dagster asset {lineage.asset_key}"}
    else:
        tags |= {"mlflow.source.type": "LOCAL", "mlflow.source.name": entry_point or sys.argv[0]}
    return tags


def run_tags(lineage: Lineage, entry_point: str, tags: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tags of every run prag writes: its source (:func:`source_tags`), ``tags``, then the Dagster lineage."""
    return source_tags(lineage, entry_point) | dict(tags or {}) | lineage.tags()


def start_run(client: MlflowClient, experiment: str, run_name: str, tags: Mapping[str, str]) -> str:
    """Create a RUNNING run now (its start time is the training's start); returns its id."""
    return client.create_run(experiment, run_name=run_name, tags=dict(tags)).info.run_id


@contextmanager
def training_run(
    client: MlflowClient, experiment: str, run_name: str, tags: Mapping[str, str]
) -> Iterator[str]:  # fmt: skip
    """A run around a fit: started on entry, marked FAILED if the fit raises; the registration terminates it."""
    run_id = start_run(client, experiment, run_name, tags)
    try:
        yield run_id
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise


class RunTracker:
    """The tracker (``methods.cfrag.training.Tracker``) of one task's fits: kind -> a run around that fit
    (registered name as run name; task, kind, lineage and source tags), ended by the registration;
    :meth:`fail_unfinished` ends the ones left open."""

    def __init__(self, client: MlflowClient, experiment: str, task: str, lineage: Lineage,
                 run_names: Callable[[str], str]) -> None:  # fmt: skip
        self.client, self.experiment, self.task, self.lineage, self.run_names = (
            client, experiment, task, lineage, run_names)  # fmt: skip
        self.opened: list[str] = []

    @contextmanager
    def __call__(self, kind: str) -> Iterator[str]:
        """A run around the fit of ``kind``, yielding its id."""
        name = self.run_names(kind)
        tags = run_tags(self.lineage, name, {"task": self.task, "kind": kind})
        with training_run(self.client, self.experiment, name, tags) as run_id:
            self.opened.append(run_id)
            yield run_id

    def fail_unfinished(self) -> list[str]:
        """Mark FAILED every run this tracker opened that is still running (a step that failed before registering
        it); returns their ids."""
        left = [r for r in self.opened if self.client.get_run(r).info.status == "RUNNING"]
        for run_id in left:
            self.client.set_terminated(run_id, status="FAILED")
        return left


def log_training_dataset(client: MlflowClient, run_id: str, rows: pd.DataFrame, name: str, source: str) -> None:
    """Log the training rows as the run's dataset input (context ``training``; digest and schema by MLflow)."""
    import mlflow.data
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.entities import DatasetInput, InputTag

    try:
        origin = resolve_dataset_source(source)
    except Exception:  # noqa: BLE001 - a source MLflow cannot resolve: keep the rows, drop the source
        origin = None
    dataset = mlflow.data.from_pandas(rows, source=origin, name=name)
    context = InputTag(key="mlflow.data.context", value="training")
    client.log_inputs(run_id, [DatasetInput(dataset._to_mlflow_entity(), tags=[context])])


def run_url(ui: str, experiment_id: str, run_id: str) -> str:
    """The MLflow UI page of a run (classic view)."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{CLASSIC_VIEW}"


def version_url(ui: str, name: str, version: int | str) -> str:
    """The MLflow UI page of a registered model version (classic view)."""
    return f"{ui.rstrip('/')}/#/models/{quote(name, safe='')}/versions/{version}?{CLASSIC_VIEW}"


def experiment_url(ui: str, experiment_id: str) -> str:
    """The MLflow UI page of an experiment, on its training (machine learning) view."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}?{CLASSIC_VIEW}"


def sig(value: Any, digits: int = 4) -> str:
    """A number with ``digits`` significant digits (``0.3111`` not ``0.31111111111111106``); others as str."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return f"{value:.{digits}g}"


def dagster_run_url(ui: str, run_id: str) -> str:
    """The Dagster UI page of a run."""
    return f"{ui.rstrip('/')}/runs/{run_id}"
