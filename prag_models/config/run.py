"""Run settings (issue 28): the time budget of the LLM work of `prag materialize`."""

from __future__ import annotations

from pydantic import Field

from prag_models.config.sources import Section


class RunSettings(Section):
    """How much LLM time a `prag materialize` run may spend on the LLM evaluation and PBR's P-PRF."""

    # Seconds of LLM work of a run over every task: the LLM utility takes utility.budget_share of it first (its
    # pilots and the tests that decide or confirm each verdict, docs/methods.md §6.7), the LLM evaluation of generated
    # outputs (one prompt per method and sample) and P-PRF (two generations per sample) the rest. `prag materialize`
    # measures the generator's speed (a few seconds) and sizes data.llm_eval_samples to fit, never above the
    # configured value (0 = no budget: every utility test as planned, data.llm_eval_samples as is).
    llm_budget_s: float = Field(360.0, ge=0)
    # Where the Dagster UI runs (scripts/ui.sh): MLflow runs and versions link back to their Dagster run there.
    dagster_ui_url: str = "http://127.0.0.1:3000"
