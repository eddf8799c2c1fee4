"""Promotion input (docs/methods.md §6): the `cfrag` rows of lamp_evaluation recorded on the MLflow versions of the
bundle cfrag_retrievals used, and as rows of table cfrag_model_evaluations."""

from __future__ import annotations

from typing import Any

import pandas as pd

from prag_models.config.settings import Settings
from prag_models.metrics.lamp import primary_metric
from prag_models.mlops.promotion import KINDS, bundle_figure, bundle_key, record_evaluation
from prag_models.mlops.registry import MlflowTarget, data_version
from prag_models.stages.promotion_evidence import (
    CHAMPION_TABLE,
    evidence_rows,
    evidence_summary,
    read_evidence,
    record_evidence,
)
from prag_models.storage.store import read_rows, replace_rows, table_exists

EVAL_TABLE = "cfrag_model_evaluations"
#: The evaluation method whose metrics gate promotion: full CFRAG.
METHOD = "cfrag"
#: The model versions each task's CFRAG retrieval used (written by cfrag_retrievals).
BUNDLE_TABLE = "cfrag_retrieval_models"


def evaluation_data_version(con, task: str) -> tuple[str, str]:
    """(data version, generator ids) of a task's evaluation: a hash of the dev samples and the generator ids."""
    samples = con.execute(
        "SELECT sample_id, user_id, gold FROM lamp_samples WHERE task = ? AND split = 'dev' ORDER BY sample_id", [task]
    ).df()
    found = con.execute(
        "SELECT DISTINCT generator_id FROM generations WHERE task = ? AND method = ? ORDER BY 1", [task, METHOD]
    ).fetchall()
    generators = ",".join(g for (g,) in found)
    return data_version(samples, generators), generators


def record_task_evaluation(con, task: str, target: MlflowTarget, settings: Settings) -> dict[str, Any]:
    """Record one task's `cfrag` metrics on its bundle's MLflow versions and in cfrag_model_evaluations, and the
    paired evidence against the champion bundle in cfrag_promotion_evidence (stages/promotion_evidence.py)."""
    scores = read_rows(con, "lamp_evaluation", {"task": task, "method": METHOD})
    if scores.empty and settings.run.generation_samples != 0:
        if table_exists(con, EVAL_TABLE):
            con.execute(f"DELETE FROM {EVAL_TABLE} WHERE task = ?", [task])
        return {"skipped": f"no '{METHOD}' rows in lamp_evaluation (is it in retrieval.methods?)"}
    bundle = read_rows(con, BUNDLE_TABLE, {"task": task})
    versions = {k: int(v) for k, v in zip(bundle["kind"], bundle["version"], strict=True)}
    if set(versions) != set(KINDS):
        raise LookupError(f"{task}: {BUNDLE_TABLE} lists {sorted(versions)}, expected {list(KINDS)}: "
                          "re-materialize cfrag_retrievals")  # fmt: skip
    if scores.empty:  # the budget deferred the generated outputs: no figure to record, the gate's evidence still
        out: dict[str, Any] = {"metrics": "deferred to `prag evidence` (run.generation_samples = 0)"}
        return out | _promotion_evidence(con, task, versions, settings)
    metrics = {m: float(v) for m, v in zip(scores["metric"], scores["value"], strict=True)}
    version, generators = evaluation_data_version(con, task)
    n_samples = str(int(scores["n_samples"].max()))
    extra = {"eval.method": METHOD, "eval.bundle.n_samples": n_samples, "eval.generator": generators}
    recorded = record_evaluation(target, task, versions, metrics, version, extra)
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    frame = pd.DataFrame(
        [
            (task, kind, name.rsplit("/", 1)[0], versions[kind], m, v, m == primary_metric(task), version, now)
            for kind, name in recorded.items()
            for m, v in metrics.items()
        ],
        columns=["task", "kind", "registered_name", "version", "metric", "value", "is_primary",
                 "data_version", "recorded_at"],
    )  # fmt: skip
    replace_rows(con, EVAL_TABLE, frame, {"task": task})
    out = {"versions": recorded, "metrics": {m: float(bundle_figure(v)) for m, v in metrics.items()},
           "data_version": version, "n_samples": n_samples}  # fmt: skip
    return out | _promotion_evidence(con, task, versions, settings)


def _promotion_evidence(con, task: str, versions: dict[str, int], settings: Settings) -> dict[str, Any]:
    """Record the paired evidence of the task's bundle against the champion bundle; what it says."""
    champion = read_rows(con, CHAMPION_TABLE, {"task": task}) if table_exists(con, CHAMPION_TABLE) else None
    if champion is None or champion.empty:
        record_evidence(con, task, pd.DataFrame())
        return {"promotion_evidence": "none: the champion bundle is the challenger (nothing to compare)"}
    champion_key = bundle_key({k: int(v) for k, v in zip(champion["kind"], champion["version"], strict=True)})
    rows = evidence_rows(con, task, bundle_key(versions), champion_key, settings)
    record_evidence(con, task, rows)
    legs = read_evidence(con, task, bundle_key(versions), champion_key)
    return {"champion_bundle": champion_key, "promotion_evidence": evidence_summary(legs)}
