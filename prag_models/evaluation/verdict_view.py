"""The verdict's deciding columns, short enough to read at the end of a terminal run and first in the Dagster report
(issue 42): per task the verdict, the method, the gain over dense_global with its 95 % interval, its n and what the
LLM evaluation says. Every other column (Holm, held-out values, the own-profile comparison, the power note) is in
``verdicts_markdown`` (`prag report`, and after the short table in the report asset). Also the report's chart: the
verdict's gain per task with its interval and n (the labelled comparison, e.g. n=96), not the LLM bars at a few
samples."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

from prag_models.evaluation.utility import UTILITY_METRIC
from prag_models.evaluation.verdict import _complete, plan_suffix
from prag_models.evaluation.verdict_terms import DEFERRED_LLM, IS_EVIDENCE, NO_LLM, TOO_FEW

#: The deciding columns, in order.
DECIDING_HEADERS = ["task", "verdict", "method", "gain [95 % CI]", "n", "LLM evidence"]
#: Columns that never wrap: task, gain, n; the others wrap at spaces when the table is wider than WIDTH, in this
#: order: the LLM evidence (after its decision), the method, and only then the verdict.
_WHOLE = (0, 3, 4)
_SHRINK_ORDER = (5, 2, 1)
NBSP = "\u00a0"
#: Terminal width the short table fits in.
WIDTH = 100
_GAP = "  "


def _method(r) -> str:  # noqa: ANN001 - a row of the verdict table
    """The chosen method, or each fold's choice when the folds disagree."""
    if not r.method:
        return "—"
    return r.method if not str(r.method).startswith("no single method") else f"folds: {r.fold_methods}"


def _gain(r) -> str:  # noqa: ANN001
    """metric gain [low, high] of the verdict's evidence; a dash where nothing was measured."""
    if not int(r.n_samples):
        return "—"
    return f"{r.metric} {r.gain:+.3f} [{r.gain_low:+.3f}, {r.gain_high:+.3f}]".strip()


def _llm(r) -> str:  # noqa: ANN001
    """The LLM evaluation of the same choice in a few words: confirms / not shown / contradicts / too few, with n;
    where the LLM utility decided the task, "utility" first (the generated outputs' word follows, named so)."""
    if r.llm_decision == IS_EVIDENCE:
        return "is the evidence"
    if r.llm_decision == DEFERRED_LLM:
        return "deferred: prag evidence"
    decided = UTILITY_METRIC if r.metric == UTILITY_METRIC else ""
    if r.llm_decision == NO_LLM or not int(r.llm_n_samples):
        return decided or "none"
    word = "too few" if r.llm_decision == TOO_FEW else str(r.llm_decision)
    cell = f"{word}, n={int(r.llm_n_samples)}{plan_suffix(getattr(r, 'llm_plan', ''))}"
    return f"{decided}; outputs {cell}" if decided else cell


def _keep_whole(cell: str, column: int) -> str:
    """The LLM cell's decision as one unit for wrapping (no-break spaces, made plain again after wrapping)."""
    if column != 5 or "," not in cell:
        return cell
    head, _, tail = cell.rpartition("; outputs ")
    word, rest = tail.split(",", 1)
    return (f"{head}; outputs " if head else "") + word.replace(" ", NBSP) + "," + rest


def deciding_rows(table: pd.DataFrame) -> list[list[str]]:
    """One row of DECIDING_HEADERS cells per task of a verdict table (verdict.verdicts_for)."""
    if table.empty:
        return []
    rows = []
    for r in _complete(table).itertuples(index=False):
        rows.append([str(r.task), str(r.verdict), _method(r), _gain(r), str(int(r.n_samples)), _llm(r)])
    return rows


def _widths(cells: list[list[str]], width: int) -> list[int]:
    """Column widths that fit ``width`` with the gaps: natural widths, narrowed in _SHRINK_ORDER (each column down to
    its longest unbreakable word before the next is touched)."""
    natural = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    floor = [natural[i] if i in _WHOLE else max(len(word) for row in cells for word in row[i].split(" ") or [""])
             for i in range(len(natural))]  # fmt: skip
    widths = list(natural)
    over = sum(widths) + len(_GAP) * (len(widths) - 1) - width
    for i in _SHRINK_ORDER:
        cut = min(max(over, 0), widths[i] - floor[i])
        widths[i] -= cut
        over -= cut
    return widths


def deciding_text(table: pd.DataFrame, width: int = WIDTH) -> str:
    """The deciding columns as an aligned plain-text table at most ``width`` columns wide (a long method or LLM cell
    wraps onto the row's next lines); the gain is over dense_global, in the evidence's metric."""
    rows = deciding_rows(table)
    if not rows:
        return "no evaluation with a personalized method and dense_global: nothing to decide"
    rows = [[_keep_whole(cell, i) for i, cell in enumerate(row)] for row in rows]
    widths = _widths([DECIDING_HEADERS, *rows], width)
    lines = []
    for row in [DECIDING_HEADERS, ["-" * w for w in widths], *rows]:
        wrapped = [textwrap.wrap(cell, w, break_long_words=False, break_on_hyphens=False) or [""]
                   for cell, w in zip(row, widths, strict=True)]  # fmt: skip
        for k in range(max(len(cell) for cell in wrapped)):
            parts = [(cell[k] if k < len(cell) else "").ljust(w) for cell, w in zip(wrapped, widths, strict=True)]
            lines.append(_GAP.join(parts).rstrip().replace(NBSP, " "))
    return "\n".join(lines)


def deciding_markdown(table: pd.DataFrame) -> str:
    """The deciding columns as a markdown table (the report asset shows it first, then every column)."""
    rows = deciding_rows(table)
    if not rows:
        return "_no evaluation with a personalized method and dense_global: nothing to decide_"
    lines = ["| " + " | ".join(DECIDING_HEADERS) + " |", "|" + "---|" * len(DECIDING_HEADERS)]
    for row in rows:
        cells = [f"**{c}**" if i == 1 else c for i, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict_chart(table: pd.DataFrame, path: Path) -> Path:
    """The verdict's gain over dense_global per task with its 95 % interval, labelled with the evidence's metric and n
    (the labelled retrieval comparison where labels see the task), coloured by verdict; written as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from prag_models.evaluation.report import CHART_DPI, CHART_WIDTH_IN
    from prag_models.evaluation.verdict_terms import OWN, SHIP, WORSE

    rows = _complete(table) if len(table) else table
    rows = rows[rows["n_samples"] > 0] if len(rows) else rows
    fig, ax = plt.subplots(figsize=(CHART_WIDTH_IN, max(1.6, 0.45 * len(rows) + 1.0)))
    if len(rows):
        rows = rows.iloc[::-1]
        labels = [f"{r.task} {r.metric} (n={int(r.n_samples)})" for r in rows.itertuples(index=False)]
        colours = {SHIP: "#55a868", OWN: "#8172b2", WORSE: "#c44e52"}
        err = [(rows["gain"] - rows["gain_low"]).clip(lower=0), (rows["gain_high"] - rows["gain"]).clip(lower=0)]
        ax.barh(labels, rows["gain"], xerr=err, color=[colours.get(v, "#8c8c8c") for v in rows["verdict"]],
                ecolor="#333333", capsize=3)  # fmt: skip
        for y, r in enumerate(rows.itertuples(index=False)):
            ax.annotate(str(r.verdict), (max(r.gain_high, 0.0), y), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=7)  # fmt: skip
    else:
        ax.text(0.5, 0.5, "nothing decided yet", ha="center", va="center", transform=ax.transAxes)
    ax.axvline(0.0, color="#333333", linewidth=0.8)
    ax.set_title("Verdict: gain of the chosen method over dense_global, 95 % interval (the evidence's metric, n)",
                 fontsize=9)  # fmt: skip
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=CHART_DPI)
    plt.close(fig)
    return path


#: The numbers of a task's gain that its retrieval evaluation's partition reports (Dagster plots numeric metadata per
#: partition in an asset's Plots tab: there the gain per task is a chart that shows without a click).
GAIN_KEYS = {"gain": "verdict gain over dense_global", "gain_low": "verdict gain, 95 % low",
             "gain_high": "verdict gain, 95 % high", "n_samples": "verdict gain, n"}  # fmt: skip


def gain_numbers(con, settings, task: str) -> dict[str, float]:  # noqa: ANN001
    """The cross-fitted gain of the task's labelled verdict over dense_global, its 95 % interval and n, as the report
    computes them (empty where no label sees the task: its LLM utility decides it later)."""
    from prag_models.evaluation.verdict import verdicts_for

    table = verdicts_for(con, settings, [task])
    rows = table[(table["task"] == task) & (table["n_samples"] > 0)] if len(table) else table
    if not len(rows) or not str(rows.iloc[0]["evidence"]).startswith("retrieval"):
        return {}
    row = rows.iloc[0]
    return {label: float(row[column]) for column, label in GAIN_KEYS.items()}
