"""Which method to ship, per task: the best personalized method against non-personalized retrieval (docs/methods.md
§6.5). The evidence is the LLM-free retrieval evaluation; a task it cannot score (no relevance labels and no document
labels: LaMP-4/5/7 on real LaMP files) is decided on the LLM evaluation's primary metric instead, with its n.

A personalized method is worth shipping only where it beats searching everybody's documents (``dense_global``). The
method to ship is the personalized one with the best mean on every sample of the LLM-free retrieval evaluation; its
gain is estimated by cross-fitting (``claims.best_personalized``: on each half of the samples, the method chosen on the
other half), because the gain of a method picked on the same samples it is measured on is optimistic. The verdict is
"ship" only when the paired 95 % interval of that gain lies above 0. The LLM evaluation of the same method against
``dense_global`` is shown next to it, with its n, as a confirmation end to end (confirms / not shown / contradicts)
— it decides nothing at a few samples, but a contradiction is printed, not hidden.
"""

from __future__ import annotations

import pandas as pd

from prag_models.evaluation.claims import best_mean, best_personalized
from prag_models.metrics.intervals import Estimate, estimate, paired_difference

BASELINE = "dense_global"
SHIP, KEEP, WORSE = "ship", "keep the baseline", "personalization hurts"
VERDICT_COLUMNS = [
    "task", "evidence", "metric", "method", "value", "baseline_value", "gain", "gain_low", "gain_high", "n_samples",
    "verdict", "cross_fitted_methods", "llm_metric", "llm_gain", "llm_gain_low", "llm_gain_high", "llm_n_samples",
]  # fmt: skip


def _paired(scores: pd.DataFrame, a: pd.Series, baseline: str, higher_is_better: bool) -> Estimate:
    """The paired difference of per-sample values ``a`` (by sample_id) over the baseline's, positive = better."""
    base = scores[scores["method"] == baseline].drop_duplicates("sample_id").set_index("sample_id")["value"]
    both = pd.concat([a.rename("a"), base.rename("b")], axis=1).dropna()
    x, y = both["a"].to_numpy(), both["b"].to_numpy()
    return paired_difference(x, y) if higher_is_better else paired_difference(y, x)


def task_verdict(scores: pd.DataFrame, metric: str, higher_is_better: bool = True) -> dict | None:
    """The verdict of one task from per-sample values (method, sample_id, value); None without a personalized method
    or without the baseline."""
    method = best_mean(scores, higher_is_better)
    crossed = best_personalized(scores, higher_is_better)
    if method is None or crossed is None or not (scores["method"] == BASELINE).any():
        return None
    gain = _paired(scores, crossed[0], BASELINE, higher_is_better)
    verdict = SHIP if gain.low > 0 else WORSE if gain.high < 0 else KEEP
    values = scores[scores["method"] == method]["value"].to_numpy()
    return {
        "metric": metric, "method": method, "value": estimate(values).value,
        "baseline_value": estimate(scores[scores["method"] == BASELINE]["value"].to_numpy()).value,
        "gain": gain.value, "gain_low": gain.low, "gain_high": gain.high, "n_samples": gain.n, "verdict": verdict,
        "cross_fitted_methods": crossed[1],
    }  # fmt: skip


def llm_confirmation(scores: pd.DataFrame, method: str, metric: str, higher_is_better: bool) -> dict:
    """The LLM evaluation's paired difference of ``method`` over the baseline (NaNs where either is missing)."""
    mine = scores[scores["method"] == method].drop_duplicates("sample_id").set_index("sample_id")["value"]
    if mine.empty or not (scores["method"] == BASELINE).any():
        return {"llm_metric": metric, "llm_gain": float("nan"), "llm_gain_low": float("nan"),
                "llm_gain_high": float("nan"), "llm_n_samples": 0}  # fmt: skip
    gain = _paired(scores, mine, BASELINE, higher_is_better)
    return {"llm_metric": metric, "llm_gain": gain.value, "llm_gain_low": gain.low, "llm_gain_high": gain.high,
            "llm_n_samples": gain.n}  # fmt: skip


def verdicts_from_store(con) -> pd.DataFrame:
    """One verdict row per task with a retrieval evaluation (its primary metric), plus the LLM confirmation."""
    from prag_models.evaluation.claims import llm_scores, retrieval_scores
    from prag_models.storage.store import table_exists

    rows = []
    for task, metric, scores in retrieval_scores(con):
        row = task_verdict(scores, metric)
        if row is None:
            continue
        if table_exists(con, "generations"):
            llm, llm_metric, higher = llm_scores(con, task)
            row |= llm_confirmation(llm, row["method"], llm_metric, higher)
        rows.append({"task": task, "evidence": "retrieval", **row})
    decided = {r["task"] for r in rows}
    if table_exists(con, "generations"):  # tasks the retrieval evaluation cannot score (LaMP-4/5/7 on real files)
        for (task,) in sorted(con.execute("SELECT DISTINCT task FROM generations").fetchall()):
            if task in decided:
                continue
            llm, llm_metric, higher = llm_scores(con, task)
            row = task_verdict(llm, llm_metric, higher)
            if row is not None:
                rows.append({"task": task, "evidence": "LLM evaluation", **row, "llm_n_samples": 0})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def verdicts_markdown(table: pd.DataFrame) -> str:
    """The verdict table: per task the method to ship, its gain over dense_global (cross-fitted, 95 % interval, n),
    the verdict, and the LLM evaluation's difference for the same method."""
    if table.empty:
        return "_no evaluation with a personalized method and dense_global: nothing to decide_"
    lines = [
        "| task | evidence | verdict | best personalized method | its value | dense_global "
        "| gain (cross-fitted) [95 % CI] | n | LLM evaluation: same method − dense_global [95 % CI] (n) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples(index=False):
        llm = "—"
        if r.llm_n_samples:
            interval = f"[{r.llm_gain_low:+.3f}, {r.llm_gain_high:+.3f}]"
            said = "confirms" if r.llm_gain_low > 0 else "contradicts" if r.llm_gain_high < 0 else "not shown"
            llm = f"{r.llm_metric} {r.llm_gain:+.3f} {interval} (n={r.llm_n_samples}): {said}"
        gain = f"{r.gain:+.3f} [{r.gain_low:+.3f}, {r.gain_high:+.3f}]"
        lines.append(
            f"| {r.task} | {r.evidence} | **{r.verdict}** | {r.method} | {r.metric} {r.value:.3f} "
            f"| {r.baseline_value:.3f} | {gain} | {r.n_samples} | {llm} |"
        )
    return "\n".join(lines)
