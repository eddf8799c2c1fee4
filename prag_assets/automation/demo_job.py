"""The named job of the main pipeline, `prag_demo`: what `prag materialize` runs (every asset but the real-data
retrieval evaluation), so that runs, the Overview timeline and launches from the UI carry a name and tags."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import dagster as dg

from prag_assets.execution import EVIDENCE_PHASE, PHASE_TAG

#: The job's name (`dagster job launch -j prag_demo`, the UI's Jobs list).
PRAG_DEMO_JOB = "prag_demo"

#: The asset group run apart from the main pipeline, on the real PersonaBench / LongMemEval samples.
RETRIEVAL_EVAL_GROUP = "retrieval_eval"
#: The job of that group (`prag materialize`'s second run when data.real_data_dir is set).
RETRIEVAL_EVAL_JOB = "prag_retrieval_eval"
#: The lifecycle round's retraining (`prag lifecycle`): CFRAG's models and everything downstream of them.
RETRAIN_JOB = "prag_retrain"
#: The LLM evidence that continues the main job (`prag evidence`, issue 47): the utility tests the main job's budget
#: deferred, funded from run.evidence_budget_s, and what reads them (the report, the promotion evidence).
EVIDENCE_JOB = "prag_llm_evidence"
#: The same on the real PersonaBench / LongMemEval samples: the P-PRF generation the main job's budget deferred.
REAL_EVIDENCE_JOB = "prag_llm_evidence_real_data"

#: The main pipeline's selection: `prag materialize`'s `--select 'not group:retrieval_eval'`.
DEMO_SELECTION = dg.AssetSelection.all() - dg.AssetSelection.groups(RETRIEVAL_EVAL_GROUP)


def settings_hash(settings: Any) -> str:
    """A short hash of the configuration (two runs with the same hash ran the same settings), the run section's time
    budgets left out: what the budget cut on a machine is run configuration, not another configuration."""
    values = settings.model_dump(mode="json")
    values.pop("run", None)
    dump = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(dump.encode()).hexdigest()[:12]


#: The code location workspace.yaml loads prag_assets.definitions as. A run tagged with its repository's label is
#: listed on its job's page like a run the UI launched (issue 50.1); a run of a named job also carries the location's
#: origin (prag_assets/cli/run_graph.workspace_origin), which the Overview timeline places runs by.
LOCATION_NAME = "prag"
REPOSITORY_LABEL_TAG = ".dagster/repository"
#: The name Dagster gives the repository of a Definitions object.
REPOSITORY_NAME = "__repository__"


def location_tags() -> dict[str, str]:
    """The tag that places a run in the workspace's code location (its repository's label, as Dagster writes it)."""
    return {REPOSITORY_LABEL_TAG: f"{REPOSITORY_NAME}@{LOCATION_NAME}"}


def demo_run_tags(settings: Any) -> dict[str, str]:
    """The run tags saying which data, tasks and settings a run of the pipeline used."""
    return {
        "prag/data_source": str(settings.data.source),
        "prag/tasks": ",".join(settings.data.tasks),
        "prag/settings_hash": settings_hash(settings),
    }


def code_commit(root: str | Path) -> str:
    """The git commit of the code in ``root`` (with ``+dirty`` when files differ from it); "" outside a checkout."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if dirty else "")


def launch_tags(settings: Any, command: str, root: str | Path) -> dict[str, str]:
    """The tags of a run a prag command launches, to filter runs on in the UI: the command, the settings hash, the
    tasks, and the code's git commit when the code is a git checkout."""
    commit = code_commit(root)
    return {"prag/command": command, **demo_run_tags(settings), **({"prag/git_commit": commit} if commit else {})}


def retrieval_eval_job() -> dg.UnresolvedAssetJobDefinition:
    """`prag_retrieval_eval`: the real-data retrieval evaluation (group retrieval_eval), run apart."""
    return dg.define_asset_job(RETRIEVAL_EVAL_JOB, selection=dg.AssetSelection.groups(RETRIEVAL_EVAL_GROUP),
                               description="The retrieval evaluation on real PersonaBench / LongMemEval samples "
                               "(data.real_data_dir), as `prag materialize` runs it after prag_demo.")  # fmt: skip


def evidence_job() -> dg.UnresolvedAssetJobDefinition:
    """`prag_llm_evidence`: the LLM work the main job's budget may defer (the utility, the generated outputs, P-PRF
    on LaMP) and what reads it, tagged as the evidence phase."""
    deferrable = dg.AssetSelection.assets("llm_utility", "generations", "pbr_lamp_retrievals").downstream()
    return dg.define_asset_job(EVIDENCE_JOB, selection=deferrable - dg.AssetSelection.groups(RETRIEVAL_EVAL_GROUP),
                               tags={PHASE_TAG: EVIDENCE_PHASE},
                               description="The LLM evidence that continues the main job (prag evidence): the "
                               "utility tests and the generated outputs its budget deferred, within "
                               "run.evidence_budget_s, continuing from the cached scores; then the report and the "
                               "promotion evidence.")  # fmt: skip


def real_evidence_job() -> dg.UnresolvedAssetJobDefinition:
    """`prag_llm_evidence_real_data`: the real-data retrieval evaluation with the P-PRF generation the main job's
    budget deferred (group retrieval_eval, tagged as the evidence phase)."""
    return dg.define_asset_job(REAL_EVIDENCE_JOB, selection=dg.AssetSelection.groups(RETRIEVAL_EVAL_GROUP),
                               tags={PHASE_TAG: EVIDENCE_PHASE},
                               description="The real-data retrieval evaluation with the LLM generation the main "
                               "job's budget deferred (prag evidence).")  # fmt: skip


#: The retrievals that read the documents and clusters an incremental update rewrites, outside CFRAG: the round
#: recomputes them on the current documents (issue 48), the clustering in effect kept (no full re-clustering).
RETRAIN_RETRIEVALS = ("baseline_retrievals", "pbr_lamp_retrievals", "tuned_settings", "clusterrag_retrievals")


def retrain_job() -> dg.UnresolvedAssetJobDefinition:
    """`prag_retrain`: the user encoder, CFRAG's retriever and rerankers retrained on the current histories, the
    other methods' retrievals on the current documents (RETRAIN_RETRIEVALS), and everything downstream (CFRAG's
    retrievals for challenger and champion, the evaluations, the verdict, the promotion evidence)."""
    selection = dg.AssetSelection.assets("cfrag_user_encoder", *RETRAIN_RETRIEVALS).downstream() - \
        dg.AssetSelection.groups(RETRIEVAL_EVAL_GROUP)
    return dg.define_asset_job(RETRAIN_JOB, selection=selection, description="The lifecycle round's retraining "
                               "(prag lifecycle): CFRAG's models on the current histories, registered as challengers, "
                               "then their evaluation against the champions (cfrag_model_evaluation).")  # fmt: skip


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
