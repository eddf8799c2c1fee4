"""The verdict's vocabulary (docs/methods.md §6.5): its decisions, the LLM leg's words, thresholds and the power
note, shared by the label verdict (verdict.py) and the utility verdict (utility_verdict.py)."""

from __future__ import annotations

import numpy as np

from prag_models.metrics.intervals import samples_for_power

BASELINE = "dense_global"
OWN_PROFILE = "dense"  # personal but not collaborative: what collaboration must also beat
SHIP, KEEP, WORSE = "ship", "keep the baseline", "personalization hurts"
OWN = "own profile suffices"  # beats dense_global, but collaboration is not shown to beat the user's own profile
CONFIRMS, CONTRADICTS, NOT_SHOWN = "confirms", "contradicts", "not shown"
TOO_FEW, NO_LLM, IS_EVIDENCE = "too few samples to tell", "no LLM evaluation", "is the evidence"
#: The LLM leg of a task whose utility test the main job's budget could not pay: `prag evidence` runs it (issue 47).
DEFERRED_LLM = "deferred to `prag evidence`"
MIN_LLM_SAMPLES = 30  # default of data.verdict_min_llm_samples
MIN_GAIN = 0.01  # default of data.verdict_min_gain
MIN_UTILITY_SAMPLES = 20  # default of utility.min_samples
NO_LLM_FIELDS = {"llm_metric": "", "llm_gain": 0.0, "llm_gain_low": 0.0, "llm_gain_high": 0.0, "llm_n_samples": 0,
                 "llm_decision": NO_LLM}  # fmt: skip


def power_note(diffs: np.ndarray, min_gain: float = MIN_GAIN) -> tuple[int, str]:
    """(samples for 80 % power of a paired t-test at the observed effect and spread, a note); 0 when no sample size
    would show a gain."""
    gain = float(np.mean(diffs)) if len(diffs) else 0.0
    if gain <= 0:
        return 0, "no gain observed: more samples would not show one"
    needed = samples_for_power(diffs)
    small = f"; a gain of {gain:.3f} is too small to matter (< {min_gain:g})" if gain < min_gain else ""
    if needed is None:
        return 0, "no effect to power" + small
    return needed, f"about {needed} samples for 80 % power at this effect (now {len(diffs)})" + small


def llm_decision(low: float, high: float, n: int, min_llm_samples: int) -> str:
    """confirms / contradicts / not shown, or too few samples to tell below ``min_llm_samples``."""
    if n == 0:
        return NO_LLM
    if n < min_llm_samples:
        return TOO_FEW
    return CONFIRMS if low > 0 else CONTRADICTS if high < 0 else NOT_SHOWN
