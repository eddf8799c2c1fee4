"""The one Definitions object that workspace.yaml (and `dagster ... -m prag_assets.definitions`) loads."""

from __future__ import annotations

import dagster as dg

from prag_assets.assets import (
    cfrag,
    cfrag_promotion,
    cfrag_training,
    cfrag_users,
    embeddings,
    evaluation,
    generation,
    history,
    lamp_data,
    pbr_eval,
    pbr_lamp,
    retrieval,
    retrieval_evaluation,
    tuning,
    users,
    utility,
)
from prag_assets.automation.demo_job import (
    demo_job,
    evidence_job,
    real_evidence_job,
    retrain_job,
    retrieval_eval_job,
)
from prag_assets.automation.promotion_jobs import promotion_jobs
from prag_assets.automation.sensors import jobs, schedules, sensors
from prag_assets.builders.code_versions import versioned
from prag_assets.checks.cfrag_checks import cfrag_checks
from prag_assets.checks.history_checks import history_checks
from prag_assets.checks.lamp_checks import lamp_checks
from prag_assets.checks.pbr_checks import pbr_checks
from prag_assets.checks.promotion_checks import promotion_checks
from prag_assets.checks.retrieval_eval_checks import retrieval_eval_checks
from prag_assets.resources.resource_set import default_resources
from prag_models.config.settings import Settings, load_settings

# pbr_lamp: PBR as a LaMP retrieval option (group retrieval); pbr_eval: real-data retrieval evaluation (retrieval_eval).
# One call: a module re-exporting an imported asset must not load it twice.
ASSET_MODULES = [lamp_data, embeddings, users, retrieval, cfrag_users, cfrag_training, cfrag, pbr_lamp, generation,
                 evaluation, retrieval_evaluation, cfrag_promotion, history, pbr_eval, tuning, utility]  # fmt: skip


def _settings() -> Settings | None:
    """The configuration the code location loads with (None when it does not load: runs then report why)."""
    try:
        return load_settings()
    except Exception:  # noqa: BLE001 - a broken config must not hide the whole code location
        return None


SETTINGS = _settings()
# Code versions hash each asset's stage source and settings sections (prag_assets/builders/code_versions.py).
lamp_assets = versioned(dg.load_assets_from_modules(ASSET_MODULES), ASSET_MODULES, SETTINGS)

# In-process: models load once per run and DuckDB sees one writer; the pool also guards multi-process setups.
defs = dg.Definitions(
    assets=lamp_assets,
    asset_checks=[
        *lamp_checks,
        *cfrag_checks,
        *promotion_checks,
        *history_checks,
        *pbr_checks,
        *retrieval_eval_checks,
    ],
    jobs=[demo_job(SETTINGS), retrieval_eval_job(), retrain_job(), evidence_job(), real_evidence_job(),
          *jobs, *promotion_jobs],
    sensors=sensors,
    schedules=schedules,
    resources=default_resources(),
    executor=dg.in_process_executor,
)
