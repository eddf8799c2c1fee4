"""The named job of the main pipeline, `prag_demo`: what `prag materialize` runs (every asset but the real-data
retrieval evaluation), so that runs, the Overview timeline and launches from the UI carry a name and tags."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import dagster as dg

#: The job's name (`dagster job launch -j prag_demo`, the UI's Jobs list).
PRAG_DEMO_JOB = "prag_demo"

#: The asset group run apart from the main pipeline, on the real PersonaBench / LongMemEval samples.
RETRIEVAL_EVAL_GROUP = "retrieval_eval"

#: The main pipeline's selection: `prag materialize`'s `--select 'not group:retrieval_eval'`.
DEMO_SELECTION = dg.AssetSelection.all() - dg.AssetSelection.groups(RETRIEVAL_EVAL_GROUP)


def settings_hash(settings: Any) -> str:
    """A short hash of the whole configuration (two runs with the same hash ran the same settings)."""
    dump = json.dumps(settings.model_dump(mode="json"), sort_keys=True, default=str)
    return hashlib.sha256(dump.encode()).hexdigest()[:12]


def demo_run_tags(settings: Any) -> dict[str, str]:
    """The run tags saying which data, tasks and settings a run of the pipeline used."""
    return {
        "prag/data_source": str(settings.data.source),
        "prag/tasks": ",".join(settings.data.tasks),
        "prag/settings_hash": settings_hash(settings),
    }


def demo_job(settings: Any | None) -> dg.UnresolvedAssetJobDefinition:
    """`prag_demo`: the main pipeline's assets and their checks, tagged with the configuration it was loaded with."""
    return dg.define_asset_job(
        PRAG_DEMO_JOB,
        selection=DEMO_SELECTION,
        description="The main pipeline, as `prag materialize` runs it: LaMP data to the evaluation report, task "
        "partitions as one run per task range (launch it with a partition range, e.g. LaMP-1...LaMP-7). The real-"
        "data retrieval evaluation (group retrieval_eval) runs apart.",
        tags=demo_run_tags(settings) if settings is not None else None,
    )
