"""The LLM utility in the verdict (docs/methods.md §6.7): the evidence of a task no label can see, and the LLM leg
that confirms a task decided by labels.

The utility's test samples were never used to choose the method (the pilot or the labels chose it) and their number
was fixed from the pilot before any was scored, so the plain paired interval and the paired t-test are valid: no
selection correction is needed. "ship" needs the gain over ``dense_global`` above 0 (95 % interval and one-sided
p < 0.025) and the gain over the own profile (``dense``) above 0, as for the label verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from prag_models.evaluation.claims import CrossFit, fold_of
from prag_models.evaluation.utility import UTILITY_METRIC
from prag_models.evaluation.verdict_terms import (
    BASELINE,
    KEEP,
    NO_LLM_FIELDS,
    OWN,
    OWN_PROFILE,
    SHIP,
    WORSE,
    llm_decision,
    power_note,
)
from prag_models.metrics.intervals import CONFIDENCE, paired_difference, paired_p_value, shown_above


def _chosen_values(scores: pd.DataFrame, chosen: CrossFit | str) -> pd.Series:
    """Per test sample, the value of the method chosen for it (per fold for a cross-fitted choice)."""
    if isinstance(chosen, str):
        rows = scores[scores["method"] == chosen]
    else:
        folds = scores["sample_id"].map(fold_of)
        parts = [scores[(folds == f) & (scores["method"] == m)] for f, m in enumerate(chosen.chosen) if m]
        rows = pd.concat(parts) if parts else scores.iloc[:0]
    return rows.drop_duplicates("sample_id").set_index("sample_id")["value"]


def paired(scores: pd.DataFrame, chosen: CrossFit | str, against: str) -> tuple[np.ndarray, np.ndarray]:
    """(chosen, against) utility values on the test samples both cover, in sample order."""
    mine = _chosen_values(scores, chosen)
    other = scores[scores["method"] == against].drop_duplicates("sample_id").set_index("sample_id")["value"]
    both = pd.concat([mine.rename("a"), other.rename("b")], axis=1).dropna().sort_index()
    return both["a"].to_numpy(), both["b"].to_numpy()


def utility_leg(scores: pd.DataFrame, chosen: CrossFit | str, min_samples: int) -> dict[str, Any]:
    """The verdict's LLM columns from the utility: the choice's gain over dense_global with its interval and n, and
    what it says (confirms / not shown / contradicts, or too few samples below min_samples)."""
    x, y = paired(scores, chosen, BASELINE)
    if len(x) == 0:
        return dict(NO_LLM_FIELDS)
    gain = paired_difference(x, y)
    decision = llm_decision(gain.low, gain.high, gain.n, min_samples)
    return {"llm_metric": UTILITY_METRIC, "llm_gain": gain.value, "llm_gain_low": gain.low,
            "llm_gain_high": gain.high, "llm_n_samples": gain.n, "llm_decision": decision}  # fmt: skip


def plan_note(plan: dict[str, Any] | None) -> str:
    """What the verdict says beside a utility test that ended before its planned n: "stopped early" (the interim
    look decided: complete) or "of N planned" (the run's budget cut it: `prag evidence` extends it); else ""."""
    if plan is None or str(plan.get("evidence", "")) == "deferred":
        return ""
    stopped = plan.get("stopped_early")
    if stopped is not None and not pd.isna(stopped) and bool(stopped):
        return "stopped early"
    planned, tested = int(plan.get("planned_n") or 0), int(plan.get("test_n") or 0)
    return f"of {planned} planned" if 0 < tested < planned else ""


def utility_task_verdict(scores: pd.DataFrame, chosen: str, min_samples: int, min_gain: float) -> dict[str, Any] | None:
    """The verdict of a task decided by the utility alone (no label sees it): None without a paired test sample."""
    x, y = paired(scores, chosen, BASELINE)
    if len(x) == 0:
        return None
    gain = paired_difference(x, y)
    p_two = paired_p_value(x - y)
    p_up = p_two / 2 if gain.value > 0 else 1 - p_two / 2
    own_x, own_y = paired(scores, chosen, OWN_PROFILE)
    own, beats_own = shown_above(own_x, own_y) if len(own_x) else (None, True)  # interval and test, as below
    enough = gain.n >= min_samples
    shown = enough and gain.low > 0 and p_up < (1 - CONFIDENCE) / 2
    verdict = (SHIP if beats_own else OWN) if shown else WORSE if enough and gain.high < 0 else KEEP
    needed, note = 0, ""
    if verdict == KEEP:
        needed, note = power_note(x - y, min_gain)
        if not enough:
            note = f"{gain.n} test samples, fewer than utility.min_samples = {min_samples}; " + note
    elif verdict == OWN:
        needed, note = power_note(own_x - own_y, min_gain)
        note = f"collaboration over the own profile ({OWN_PROFILE}): {note}"
    p_value = max(p_two, paired_p_value(own_x - own_y)) if verdict == SHIP and own is not None else p_two
    return {
        "metric": UTILITY_METRIC, "method": chosen, "value": float(np.mean(x)), "baseline_value": float(np.mean(y)),
        "gain": gain.value, "gain_low": gain.low, "gain_high": gain.high, "n_samples": gain.n, "p_value": p_value,
        "selection_p": p_up, "verdict": verdict, "cross_fitted_methods": f"{chosen} (chosen on the pilot)",
        "fold_methods": chosen, "samples_needed": needed, "power_note": note,
        "own_gain": own.value if own else 0.0, "own_gain_low": own.low if own else 0.0,
        "own_gain_high": own.high if own else 0.0, "own_n_samples": own.n if own else 0,
    }  # fmt: skip
