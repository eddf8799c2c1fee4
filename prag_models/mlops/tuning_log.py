"""The per-task tuning search in MLflow: one run per task with the chosen values as params, the default's and the
chosen score as metrics, every trial's score as a metric per step and the trials table as an artifact; tagged like
every run prag writes (``runs.run_tags``: source and the Dagster lineage of the target, the step that searched) and
described with a link to that Dagster run."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pandas as pd

from prag_models.mlops.descriptions import dagster_run_line
from prag_models.mlops.registry import MlflowTarget, experiment_id, make_client
from prag_models.mlops.runs import run_tags


def log_tuning(
    target: MlflowTarget, task: str, chosen: pd.DataFrame, trials: pd.DataFrame, name: str = "tuning",
    summary: dict[str, float] | None = None,
) -> str:
    """Log one task's search as a run named ``<name>-<task>`` (``summary``: further metrics, e.g. a held-out gain),
    tagged with the target's Dagster lineage; returns the run id."""
    from mlflow.entities import Metric, Param

    client = make_client(target)
    run_name = f"{name}-{task}"
    tags = run_tags(target.lineage.for_task(task), run_name, {"kind": "tuning", "task": task})
    note = [f"Tuning search {name} for {task}: the chosen values as params, every trial's score as metrics, the "
            "trials in tuning/trials.csv.", dagster_run_line(tags)]  # fmt: skip
    tags["mlflow.note.content"] = "\n".join(line for line in note if line)  # the run's description (Markdown)
    run = client.create_run(experiment_id(client, target), run_name=run_name, tags=tags)
    run_id, now = run.info.run_id, int(time.time() * 1000)
    params = [Param(f"{r.method}.{r.knob}", str(r.value)) for r in chosen.itertuples()]
    metrics = []
    for method, rows in chosen.groupby("method"):
        first = rows.iloc[0]
        metrics += [Metric(f"{method}.score", float(first.score), now, 0),
                    Metric(f"{method}.default_score", float(first.default_score), now, 0)]  # fmt: skip
    metrics += [Metric(f"{r.method}.trial_score", float(r.score), now, int(r.trial)) for r in trials.itertuples()]
    metrics += [Metric(key, float(value), now, 0) for key, value in (summary or {}).items()]
    for start in range(0, len(params), 100):
        client.log_batch(run_id, params=params[start : start + 100])
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000])
    with tempfile.TemporaryDirectory(prefix="prag-tuning-") as scratch:
        path = Path(scratch) / "trials.csv"
        trials.to_csv(path, index=False)
        client.log_artifact(run_id, str(path), "tuning")
    client.set_terminated(run_id)
    return run_id
