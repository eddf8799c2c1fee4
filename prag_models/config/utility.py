"""The LLM utility's settings (docs/methods.md §6.7): how the label-free evidence spends its LLM calls."""

from __future__ import annotations

from pydantic import Field

from prag_models.config.sources import Section


class UtilitySettings(Section):
    """Pilot, planned test size and budget of the LLM utility comparison that decides or confirms each verdict."""

    # Off: no utility stage; tasks without labels are then decided on the generated outputs' metric, if at all.
    enabled: bool = True
    # Dev samples (the first of the LLM work's seeded order) on which every candidate is scored: they choose the
    # method where no labels choose it, and give the spread the test's sample size is planned from. Never tested on.
    pilot_samples: int = Field(8, ge=2)
    # The test's sample size: planned for `power` at the pilot's effect, never below min_samples (below it the
    # comparison says "too few samples to tell") nor above max_samples (0 = every dev sample after the pilot) or
    # what the budget pays for.
    min_samples: int = Field(20, ge=2)
    max_samples: int = Field(96, ge=0)
    power: float = Field(0.8, gt=0.0, lt=1.0)
    # The share of run.llm_budget_s the utility may spend (the LLM evaluation of generated outputs gets the rest); a
    # task no label sees gets three times a label-decided task's part (stages/llm_utility.py EVIDENCE_WEIGHT).
    budget_share: float = Field(0.65, ge=0.0, le=1.0)
    # One interim look halfway through a test planned past min_samples (at max(min_samples, ⌈n/2⌉) samples): the
    # test stops there only on a clear effect, two-sided p below interim_p for every comparison the verdict needs (the
    # gain over dense_global either way; up, also the gain over the own profile where it is compared). 0.005 is
    # O'Brien–Fleming's boundary for a look at half the information (0.0052, with 0.048 at the end); the final look
    # keeps the usual 0.05, so the error rate rises by at most interim_p (a union bound, docs/methods.md §6.7).
    # 0 = no interim look.
    interim_p: float = Field(0.005, ge=0.0, lt=0.05)
