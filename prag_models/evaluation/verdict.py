"""Which method to ship, per task: the best personalized method against non-personalized retrieval (docs/methods.md
§6.5). The evidence is the LLM-free retrieval evaluation; a task it cannot score (no relevance labels and no document
labels: LaMP-4/5/7 on real LaMP files) is decided on the LLM evaluation's primary metric instead, with its n.

A collaborative personalized method is worth shipping only where it beats both non-collaborative alternatives:
searching everybody's documents (``dense_global``) and searching the user's own profile (``dense``: where a world's
relevant documents are the user's own, pooling a community that contains them beats ``dense_global`` without
collaboration adding anything). "ship" needs both paired 95 % intervals above 0 (an intersection-union test: no
adjustment) and the sign-flip randomisation test of the whole choosing procedure (``selection_test``) below 2.5 %
one-sided, since the interval alone ignores the selection; the gain printed first is over ``dense_global``. A choice
that beats ``dense_global`` but not the own profile gets "own profile suffices": personalize by the user's own
documents, collaboration is not shown to add.
The method is chosen by cross-fitting (``claims.cross_fit``: on each half of the samples, the personalized method
with the best mean on the other half), and the gain is the gain of choosing that way, measured on held-out samples
only. When both folds choose the same method it is named, and the interval is that method's own held-out gain; when
they disagree no single method is named (each fold's choice is printed) and the interval is the gain of the choosing
procedure. The Holm column controls the family of verdicts (one per task), on the randomisation test's two-sided
p-value. For "keep the baseline" and "own profile
suffices" the table prints how many samples a paired t-test would need for 80 % power at the observed effect and
spread, and says when the effect is too small to matter.

The LLM evaluation of the same choice against ``dense_global`` is shown next to it, with its n, as a confirmation end
to end (confirms / not shown / contradicts) — only from ``min_llm_samples`` samples on; below that it says "too few
samples to tell", and "no LLM evaluation" where there is none.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from prag_models.evaluation.claims import FAMILY_ALPHA, CrossFit, cross_fit, fold_of
from prag_models.evaluation.selection_test import selection_p_values
from prag_models.evaluation.verdict_terms import (  # noqa: F401 - re-exported: the verdict's vocabulary
    BASELINE,
    CONFIRMS,
    CONTRADICTS,
    DEFERRED_LLM,
    IS_EVIDENCE,
    KEEP,
    MIN_GAIN,
    MIN_LLM_SAMPLES,
    MIN_UTILITY_SAMPLES,
    NO_LLM,
    NO_LLM_FIELDS,
    NOT_SHOWN,
    OWN,
    OWN_PROFILE,
    SHIP,
    TOO_FEW,
    WORSE,
    llm_decision,
    power_note,
)
from prag_models.metrics.intervals import CONFIDENCE, holm, paired_difference, paired_p_value, shown_above

VERDICT_COLUMNS = [
    "task", "evidence", "metric", "method", "value", "baseline_value", "gain", "gain_low", "gain_high", "n_samples",
    "p_value", "selection_p", "verdict", "p_holm", "holm_verdict", "family_size", "cross_fitted_methods",
    "fold_methods", "samples_needed", "power_note", "own_gain", "own_gain_low", "own_gain_high", "own_n_samples",
    "llm_metric", "llm_gain", "llm_gain_low", "llm_gain_high", "llm_n_samples",
    "llm_decision", "llm_plan",
]  # fmt: skip


def _paired(
    scores: pd.DataFrame, a: pd.Series, higher_is_better: bool, baseline: str = BASELINE
) -> tuple[np.ndarray, np.ndarray]:
    """(a, baseline) values on the samples both cover, oriented so that a − baseline > 0 means better."""
    base = scores[scores["method"] == baseline].drop_duplicates("sample_id").set_index("sample_id")["value"]
    both = pd.concat([a.rename("a"), base.rename("b")], axis=1).dropna()
    both = both.loc[[s for s in base.index if s in both.index]]  # the baseline's order: resamples independent of folds
    x, y = both["a"].to_numpy(), both["b"].to_numpy()
    return (x, y) if higher_is_better else (-x, -y)


def task_verdict(
    scores: pd.DataFrame, metric: str, higher_is_better: bool = True, min_gain: float = MIN_GAIN
) -> dict | None:
    """The verdict of one task from per-sample values (method, sample_id, value); None without a personalized method,
    without the baseline or without a sample both cover."""
    crossed = cross_fit(scores, higher_is_better)
    if crossed is None or not (scores["method"] == BASELINE).any():
        return None
    x, y = _paired(scores, crossed.values, higher_is_better)
    if len(x) == 0:  # the chosen methods and the baseline share no sample: nothing to decide
        return None
    gain = paired_difference(x, y)
    # the choosing procedure's own test (selection included): the interval alone over-ships under the null (§6.6)
    p_up, p_value = selection_p_values(scores, higher_is_better, BASELINE)
    own_x, own_y = _paired(scores, crossed.values, higher_is_better, OWN_PROFILE)
    own, beats_own = shown_above(own_x, own_y) if len(own_x) else (None, True)
    # Intersection-union: ship only when the choice beats both non-collaborative alternatives (no adjustment needed),
    # each by its interval and its test (the interval alone is narrower than the test at small n)
    shown = gain.low > 0 and p_up < (1 - CONFIDENCE) / 2
    verdict = (SHIP if beats_own else OWN) if shown else WORSE if gain.high < 0 else KEEP
    needed, note = (0, "")
    if verdict == OWN:  # beats everybody's documents, not the user's own profile: what would show collaboration
        needed, note = power_note(own_x - own_y, min_gain)
        note = f"collaboration over the own profile ({OWN_PROFILE}): {note}"
    elif verdict == KEEP:
        needed, note = power_note(x - y, min_gain)
    elif verdict == SHIP and own is not None:
        p_value = max(p_value, paired_p_value(own_x - own_y))
    sign = 1.0 if higher_is_better else -1.0
    return {
        "metric": metric, "method": _named(crossed), "value": sign * float(np.mean(x)),
        "baseline_value": sign * float(np.mean(y)), "gain": gain.value,
        "gain_low": gain.low, "gain_high": gain.high, "n_samples": gain.n, "p_value": p_value, "selection_p": p_up,
        "verdict": verdict, "cross_fitted_methods": crossed.describe(),
        "fold_methods": " / ".join(m or "—" for m in crossed.chosen), "samples_needed": needed, "power_note": note,
        "own_gain": own.value if own else 0.0, "own_gain_low": own.low if own else 0.0,
        "own_gain_high": own.high if own else 0.0, "own_n_samples": own.n if own else 0,
    }  # fmt: skip


def _named(crossed: CrossFit) -> str:
    """The method both folds chose, else the choices per fold (no single method's gain was measured)."""
    return crossed.single or "no single method: " + crossed.describe()


def llm_confirmation(
    scores: pd.DataFrame, method: str | CrossFit, metric: str, higher_is_better: bool,
    min_llm_samples: int = MIN_LLM_SAMPLES,
) -> dict:  # fmt: skip
    """The LLM evaluation's paired difference over the baseline of ``method`` (or of a cross-fitted choice: on each
    fold the method chosen there); zeros and "no LLM evaluation" where either is missing."""
    if isinstance(method, CrossFit):
        folds = scores["sample_id"].map(fold_of)
        picked = [scores[(folds == f) & (scores["method"] == m)] for f, m in enumerate(method.chosen) if m]
        mine_rows = pd.concat(picked) if picked else scores.iloc[:0]
    else:
        mine_rows = scores[scores["method"] == method]
    mine = mine_rows.drop_duplicates("sample_id").set_index("sample_id")["value"]
    x, y = _paired(scores, mine, higher_is_better) if len(mine) else (np.zeros(0), np.zeros(0))
    if len(x) == 0:
        return {"llm_metric": metric, "llm_gain": 0.0, "llm_gain_low": 0.0, "llm_gain_high": 0.0, "llm_n_samples": 0,
                "llm_decision": NO_LLM}  # fmt: skip
    gain = paired_difference(x, y)
    return {"llm_metric": metric, "llm_gain": gain.value, "llm_gain_low": gain.low, "llm_gain_high": gain.high,
            "llm_n_samples": gain.n, "llm_decision": llm_decision(gain.low, gain.high, gain.n, min_llm_samples)}


def with_holm(table: pd.DataFrame, alpha: float = FAMILY_ALPHA) -> pd.DataFrame:
    """p_holm, holm_verdict and family_size over the family of verdicts in the table (one per task): the raw verdict
    where Holm rejects, else keep the baseline (p-values: ship = the larger of its two comparisons' p)."""
    out = table.copy()
    rejected, adjusted = holm(out["p_value"].to_numpy(dtype=float), alpha)
    out["p_holm"], out["family_size"] = adjusted, len(out)
    out["holm_verdict"] = np.where(rejected, out["verdict"], KEEP) if len(out) else []
    return out


def verdicts_from_store(
    con, tasks: list[str] | None = None, min_llm_samples: int = MIN_LLM_SAMPLES, min_gain: float = MIN_GAIN,
    min_utility_samples: int = MIN_UTILITY_SAMPLES,
) -> pd.DataFrame:  # fmt: skip
    """One verdict row per task, with Holm over the tasks (the given ones; all when None). The evidence, in order:
    the retrieval evaluation where its labels see the task (relevance labels, or LaMP-2/3's document labels), with
    the LLM utility (else the generated outputs' metric) of the same choice as its LLM leg; the LLM utility where no
    label sees the task (docs/methods.md §6.7); the generated outputs' metric; else a row saying nothing decided."""
    from prag_models.evaluation.claims import llm_scores, retrieval_scores
    from prag_models.evaluation.utility import LABEL_HIT_SEES, utility_plan, utility_scores
    from prag_models.evaluation.utility_verdict import plan_note, utility_leg, utility_task_verdict
    from prag_models.storage.store import table_exists

    keep = (lambda task: True) if tasks is None else (lambda task: task in tasks)
    have_llm = table_exists(con, "generations")
    llm_tasks = [t for (t,) in con.execute("SELECT DISTINCT task FROM generations").fetchall()] if have_llm else []
    rows = []
    for task, metric, scores in retrieval_scores(con):
        if not keep(task) or not (metric.startswith("ndcg") or task in LABEL_HIT_SEES):
            continue
        row = task_verdict(scores, metric, min_gain=min_gain)
        if row is None:
            continue
        crossed = cross_fit(scores, True)
        llm = dict(NO_LLM_FIELDS)
        utility = utility_scores(con, task)
        if crossed is not None and not utility.empty:
            llm = utility_leg(utility, crossed, min_utility_samples) | {"llm_plan": plan_note(utility_plan(con, task))}
        elif _deferred(utility_plan(con, task)):
            llm = {**NO_LLM_FIELDS, "llm_metric": "utility", "llm_decision": DEFERRED_LLM}
        elif task in llm_tasks and crossed is not None:
            llm_table, llm_metric, higher = llm_scores(con, task)
            llm = llm_confirmation(llm_table, crossed, llm_metric, higher, min_llm_samples)
        rows.append({"task": task, "evidence": f"retrieval ({metric})", **row, **llm})
    decided = {r["task"] for r in rows}
    for task in sorted({*llm_tasks, *_utility_tasks(con)}):  # no label sees them: LaMP-4/5/7 (and 1) on real files
        if task in decided or not keep(task):
            continue
        plan, utility = utility_plan(con, task), utility_scores(con, task)
        row = None
        if _deferred(plan):  # the main job's budget could not pay its test: said, not decided on a few outputs
            why = (f"the LLM utility is its evidence and its test was deferred (≈ {float(plan['budget_s']):.0f} s on "
                   "this machine): run `prag evidence`")  # fmt: skip
            rows.append(undecided(task, "LLM utility (no labels)", why) | {"llm_decision": DEFERRED_LLM})
            continue
        if plan is not None and not utility.empty:
            row = utility_task_verdict(utility, str(plan["chosen"]), min_utility_samples, min_gain)
            evidence = "LLM utility (no labels)"
            if row is not None and plan_note(plan):  # the n column's test ended before its planned n: said
                said = (row.get("power_note", ""), f"the test {plan_note(plan)}")
                row["power_note"] = "; ".join(x for x in said if x)
        if row is not None:
            llm = dict(NO_LLM_FIELDS)
            if task in llm_tasks:  # the generated outputs' metric of the same method, beside it, on samples the
                llm_table, llm_metric, higher = llm_scores(con, task)  # choice never saw (not the pilot's)
                chose = set(utility_scores(con, task, "pilot")["sample_id"].astype(str))
                llm_table = llm_table[~llm_table["sample_id"].astype(str).isin(chose)]
                llm = llm_confirmation(llm_table, row["method"], llm_metric, higher, min_llm_samples)
        elif task in llm_tasks:
            llm_table, llm_metric, higher = llm_scores(con, task)
            row = task_verdict(llm_table, llm_metric, higher, min_gain=min_gain)
            evidence = "LLM evaluation"
            llm = {"llm_metric": llm_metric, "llm_gain": 0.0, "llm_gain_low": 0.0, "llm_gain_high": 0.0,
                   "llm_n_samples": 0, "llm_decision": IS_EVIDENCE}  # fmt: skip
        if row is not None:
            rows.append({"task": task, "evidence": evidence, **row, **llm})
        elif plan is not None:  # the budget paid for no test sample: said, not silently dropped
            why = (f"{int(plan['test_n'])} test samples within the budget (utility.budget_share of "
                   "run.llm_budget_s): raise it, or use a GPU")
            rows.append(undecided(task, "LLM utility (no labels)", why))
    table = pd.DataFrame(rows, columns=[c for c in VERDICT_COLUMNS if c not in ("p_holm", "holm_verdict",
                                                                                 "family_size")])  # fmt: skip
    table["llm_plan"] = table["llm_plan"].fillna("")
    return with_holm(table)[VERDICT_COLUMNS]


def _deferred(plan: dict | None) -> bool:
    """Whether a task's stored utility plan says its test was deferred to the LLM evidence run."""
    from prag_models.evaluation.utility import DEFERRED

    return plan is not None and plan.get("evidence") == DEFERRED


def undecided(task: str, evidence: str, why: str) -> dict:
    """A verdict row for a task its evidence could not decide: keep the baseline, and why."""
    return {"task": task, "evidence": evidence, "metric": "", "method": "", "value": 0.0, "baseline_value": 0.0,
            "gain": 0.0, "gain_low": 0.0, "gain_high": 0.0, "n_samples": 0, "p_value": 1.0, "selection_p": 1.0,
            "verdict": KEEP, "cross_fitted_methods": "", "fold_methods": "", "samples_needed": 0, "power_note": why,
            "own_gain": 0.0, "own_gain_low": 0.0, "own_gain_high": 0.0, "own_n_samples": 0,
            **NO_LLM_FIELDS}  # fmt: skip


def verdicts_for(con, settings, tasks: list[str] | None = None) -> pd.DataFrame:
    """verdicts_from_store with the thresholds of the settings (data.verdict_*, utility.min_samples): the one call
    the report, the run summary and the Dagster report asset make, so all three say the same."""
    return verdicts_from_store(con, tasks, settings.data.verdict_min_llm_samples, settings.data.verdict_min_gain,
                               settings.utility.min_samples)  # fmt: skip


def _utility_tasks(con) -> list[str]:
    """The tasks with a utility plan (tested or not)."""
    from prag_models.evaluation.utility import PLAN_TABLE
    from prag_models.storage.store import table_exists

    if not table_exists(con, PLAN_TABLE):
        return []
    return [t for (t,) in con.execute(f"SELECT DISTINCT task FROM {PLAN_TABLE}").fetchall()]


def _complete(table: pd.DataFrame) -> pd.DataFrame:
    """A verdict table with every column, missing LLM fields as "no LLM evaluation" (never NaN), Holm if absent."""
    out = table.copy()
    defaults = {**NO_LLM_FIELDS, "llm_plan": "", "samples_needed": 0, "power_note": "", "p_value": 1.0,
                "selection_p": 1.0, "own_gain": 0.0, "own_gain_low": 0.0, "own_gain_high": 0.0,
                "own_n_samples": 0}  # fmt: skip
    for column, empty in defaults.items():
        out[column] = out[column].fillna(empty) if column in out else empty
    out.loc[out["llm_n_samples"] == 0, "llm_decision"] = out["llm_decision"].where(
        out["llm_decision"].isin([IS_EVIDENCE, DEFERRED_LLM]), NO_LLM)
    return out if "holm_verdict" in out else with_holm(out)


def _llm_cell(r) -> str:  # noqa: ANN001
    """The LLM column of one verdict row, never NaN."""
    if r.llm_decision == DEFERRED_LLM:
        return DEFERRED_LLM
    if r.llm_decision in (NO_LLM, IS_EVIDENCE) or not r.llm_n_samples:
        return "(the verdict's evidence)" if r.llm_decision == IS_EVIDENCE else NO_LLM
    interval = f"[{r.llm_gain_low:+.3f}, {r.llm_gain_high:+.3f}]"
    n = f"n={int(r.llm_n_samples)}{plan_suffix(getattr(r, 'llm_plan', ''))}"
    return f"{r.llm_metric} {r.llm_gain:+.3f} {interval} ({n}): {r.llm_decision}"


def plan_suffix(note: str) -> str:
    """The plan's note after an LLM n: "n=68 of 88 planned", "n=36, stopped early"; nothing without a note."""
    if not isinstance(note, str) or not note:
        return ""
    return f" {note}" if note.startswith("of ") else f", {note}"


def verdicts_markdown(table: pd.DataFrame) -> str:
    """The verdict table: per task the method each fold chose, the gain of that choice over dense_global on held-out
    samples (95 % interval, n), the verdict raw and Holm-adjusted, the samples a "keep" would need, and the LLM
    evaluation of the same choice."""
    if table.empty:
        return "_no evaluation with a personalized method and dense_global: nothing to decide_"
    table = _complete(table)
    lines = [
        "| task | evidence | verdict | Holm | method chosen (cross-fitted) | held-out value | dense_global "
        "| gain [95 % CI], p | n | over the own profile (dense) [95 % CI] | samples for 80 % power "
        "| LLM evaluation: same choice − dense_global [95 % CI] (n) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples(index=False):
        p = "p < 0.001" if r.selection_p < 0.001 else f"p = {r.selection_p:.3f}"
        gain = f"{r.gain:+.3f} [{r.gain_low:+.3f}, {r.gain_high:+.3f}], {p}"
        own = (f"{r.own_gain:+.3f} [{r.own_gain_low:+.3f}, {r.own_gain_high:+.3f}]" if r.own_n_samples
               else f"— (no {OWN_PROFILE} rows)")
        power = r.power_note if r.verdict in (KEEP, OWN) and isinstance(r.power_note, str) and r.power_note else "—"
        lines.append(
            f"| {r.task} | {r.evidence} | **{r.verdict}** | {r.holm_verdict} | {r.cross_fitted_methods} "
            f"| {r.metric} {r.value:.3f} | {r.baseline_value:.3f} | {gain} | {int(r.n_samples)} | {own} | {power} "
            f"| {_llm_cell(r)} |"
        )
    family = int(table["family_size"].iloc[0])
    lines.append(
        f"\nThe gain is that of choosing the method by cross-fitting (on each half of the samples, the method best on "
        f"the other half), measured on held-out samples; where both folds chose the same method it is that method's "
        f"own held-out gain; p: the sign-flip randomisation test of that whole choosing procedure (one-sided), which "
        f"\"ship\" needs below 0.025 besides the interval. The verdict column decides each task on its own; Holm: the "
        f"{family} verdicts as one family (the test's two-sided p, family-wise 5 %), the column to read for a count "
        f"across tasks (\"ships "
        f"on k of {family}\"). The oracle (`oracle_community`) is a reference ceiling, never a "
        f"candidate."
    )
    return "\n".join(lines)
