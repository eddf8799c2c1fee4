"""Run settings (issue 28): the time budget of the LLM work of `prag materialize`."""

from __future__ import annotations

from pydantic import Field

from prag_models.config.sources import Section


class RunSettings(Section):
    """How much LLM time a `prag materialize` run may spend on the LLM evaluation and PBR's P-PRF."""

    # Seconds of LLM work for the LLM evaluation (generations: one prompt per method and sample) and P-PRF (two
    # generations per sample) over every task. `prag materialize` measures the generator's speed (a few seconds) and
    # sizes data.llm_eval_samples to fit, never above the configured value (0 = no budget: data.llm_eval_samples as
    # is). The default is sized so the main job fits 15 minutes on a 2-core AVX2 CPU (docs/deployment.md).
    llm_budget_s: float = Field(240.0, ge=0)
    # Where the Dagster UI runs (scripts/ui.sh): MLflow runs and versions link back to their Dagster run there.
    dagster_ui_url: str = "http://127.0.0.1:3000"
