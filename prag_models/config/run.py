"""Run settings (issues 28, 47): the time budgets of `prag materialize` and of the LLM evidence that continues it."""

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
    # Seconds the whole main job may take (issue 47): `prag materialize` measures this machine's embedder and LLM
    # first and gives the LLM work what the rest of the graph leaves of it (never more than llm_budget_s). A stage
    # whose test cannot be paid in full within its share is not started: the feedback probe records "not measured on
    # this machine" and CFRAG keeps its initialisation; a task's LLM utility is deferred to the LLM evidence run
    # (`prag evidence`), and the run says each cut (0 = no whole-run budget: llm_budget_s alone).
    budget_s: float = Field(900.0, ge=0)
    # Seconds of one LLM evidence run (`prag evidence`, job prag_llm_evidence): the utility tests the main job
    # deferred, a whole test at a time, continuing from the cached scores of earlier runs (0 = every test as planned).
    evidence_budget_s: float = Field(900.0, ge=0)
    # Seconds the CFRAG feedback probe may spend over every task (an equal share each): a task's probe whose pilot
    # and smallest deciding second stage its share cannot pay is not run ("not measured on this machine") and CFRAG
    # keeps its initialisation. -1 = `prag materialize` sets it from run.budget_s (what the LLM evaluation leaves),
    # or no limit without a whole-run budget.
    feedback_budget_s: float = Field(-1.0, ge=-1)
    # LLM-evaluation samples per task this run generates for (generated outputs, PBR's P-PRF on LaMP), set by `prag
    # materialize` from the budget: -1 = data.llm_eval_samples as configured; 0 = none: the budget cannot pay the
    # configured count whole, so they are deferred to `prag evidence` (whole figures or none, issue 47); N = a cut to N
    # (only where data.llm_eval_samples = 0, all). Run configuration: it changes no code version.
    generation_samples: int = Field(-1, ge=-1)
    # Seconds a task's search of knobs by the LLM utility may take on this machine (tasks no label sees), set by `prag
    # materialize` from the budget: -1 = tuning.utility_budget_s as configured; 0 = no search (the default knobs);
    # N = at most N (never above tuning.utility_budget_s). Run configuration: it changes no code version.
    utility_tuning_s: float = Field(-1.0, ge=-1)
    # Where the Dagster UI runs (scripts/ui.sh): MLflow runs and versions link back to their Dagster run there.
    dagster_ui_url: str = "http://127.0.0.1:3000"
