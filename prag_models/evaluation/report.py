"""Evaluation tables as markdown (value ± half-width, n) and a bar chart with 95 % error bars sized for the UI."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from prag_models.evaluation.retrieval import candidates, label_references
from prag_models.metrics.lamp import HIGHER_IS_BETTER

CHART_WIDTH_IN, CHART_DPI = 9.0, 100  # 900 px wide: fits the Dagster UI's metadata panel

#: Methods that see the planted truth: a ceiling to read the others against, never "the best method".
REFERENCE_METHODS = ("oracle_community",)
BASELINES = ("zero_shot", "random", "recency", "bm25", "dense", "dense_global")


def method_role(method: str) -> str:
    """reference (sees the truth), baseline (not personalized) or personalized; a variant (`dense_global@consent50`)
    has its method's role."""
    base = method.split("@", 1)[0]
    if base in REFERENCE_METHODS:
        return "reference"
    return "baseline" if base in BASELINES else "personalized"


def primary_by_task(table: pd.DataFrame) -> pd.DataFrame:
    """The compact view: one row per method (its role beside it), one column per task holding the primary metric as
    ``value ± half-width``; the header names the metric and n (reference rows last)."""
    primary = table[table["is_primary"].astype(bool)] if "is_primary" in table else table
    if primary.empty:
        return pd.DataFrame(columns=["method", "role"])
    cells = primary.assign(cell=primary.apply(_cell, axis=1))
    columns = {}
    for task, part in cells.groupby("task", sort=True):
        n = part["n_samples"].max() if "n_samples" in part else None
        header = f"{task} {part['metric'].iloc[0]}" + (f" (n={int(n)})" if n is not None and n == n else "")
        columns[header] = part.set_index("method")["cell"]
    wide = pd.DataFrame(columns).fillna("")
    wide.index.name = "method"
    wide = wide.reset_index()
    wide.insert(1, "role", wide["method"].map(method_role))
    order = wide["role"].map({"personalized": 0, "baseline": 1, "reference": 2})
    return wide.assign(_order=order).sort_values(["_order", "method"]).drop(columns="_order").reset_index(drop=True)


def _cell(row: pd.Series) -> str:
    """``value ± half-width`` (the value alone for rows without an interval)."""
    if pd.isna(row["value"]):
        return ""
    if "ci_low" not in row or pd.isna(row.get("ci_low")):
        n = row.get("n_samples")
        single = isinstance(n, (int, float)) and n == n and n < 2
        return f"not measured (n={int(n)})" if single else f"{row['value']:.3f}"
    return f"{row['value']:.3f} ± {(row['ci_high'] - row['ci_low']) / 2:.3f}"


def evaluation_markdown(table: pd.DataFrame) -> str:
    """Rows = method, columns = task/metric as value ± half-width with n in the header (per cell where it differs);
    the best candidate's value of each column in bold (reference rows such as the oracle are labelled, never bold)."""
    if table.empty:
        return "_no evaluation rows_"
    t = table.assign(cell=table.apply(_cell, axis=1))
    if "n_samples" not in t:
        t["n_samples"] = math.nan
    headers, columns = {}, []
    for (task, metric), part in t.groupby(["task", "metric"], sort=True):
        ns = part["n_samples"].dropna().astype(int).unique()
        same = len(ns) == 1
        header = f"{task} {metric}" + (f" (n={ns[0]})" if same else "")
        cells = part.set_index("method")["cell"].copy()
        if not same:
            cells = cells + part.set_index("method")["n_samples"].map(lambda n: f" (n={int(n)})")
        mine = candidates(part)  # the oracle is a reference row, never the best
        best = mine["value"].max() if HIGHER_IS_BETTER.get(metric, True) else mine["value"].min()
        for method in mine.loc[mine["value"] == best, "method"]:
            cells[method] = f"**{cells[method]}**"
        headers[header] = cells
        columns.append(header)
    wide = pd.DataFrame(headers)[columns].fillna("")
    wide.index = pd.Index(label_references(wide.index), name="method")
    return wide.reset_index().to_markdown(index=False)


def comparisons_markdown(comparisons: pd.DataFrame) -> str:
    """Per task, each method's paired difference of the primary metric against each baseline: ▲ better, ▼ worse,
    = interval includes 0 (positive = better than the baseline, also for MAE)."""
    if comparisons.empty:
        return "_no comparisons_"
    c = comparisons.assign(
        cell=[
            ("▲" if b else "▼" if w else "=") + f" {d:+.3f} ± {(hi - lo) / 2:.3f} (n={n})"
            for b, w, d, lo, hi, n in comparisons[
                ["better", "worse", "difference", "ci_low", "ci_high", "n_samples"]
            ].values
        ],
        column=comparisons["task"] + " " + comparisons["metric"] + " vs " + comparisons["baseline"],
    )
    wide = c.pivot_table(index="method", columns="column", values="cell", aggfunc="first").fillna("")
    wide.index = pd.Index(label_references(wide.index), name="method")
    return wide.reset_index().to_markdown(index=False)


def evaluation_chart(table: pd.DataFrame, path: Path) -> Path:
    """Each task's primary metric per method as horizontal bars with 95 % error bars, a grid of panels 900 px wide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    primary = table[table["is_primary"].astype(bool)] if "is_primary" in table else table
    tasks = sorted(primary["task"].unique())
    cols = min(3, max(1, len(tasks)))
    rows = max(1, math.ceil(len(tasks) / cols))
    n_methods = max(1, primary["method"].nunique())
    height = rows * max(2.2, 0.16 * n_methods + 0.8)
    fig, axes = plt.subplots(rows, cols, figsize=(CHART_WIDTH_IN, height), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(tasks):
            ax.axis("off")
            continue
        part = primary[primary["task"] == tasks[i]].sort_values("method", ascending=False)
        err = None
        if "ci_low" in part:
            err = [(part["value"] - part["ci_low"]).clip(lower=0), (part["ci_high"] - part["value"]).clip(lower=0)]
        ax.barh(part["method"], part["value"], xerr=err, color="#4c72b0", ecolor="#333333", capsize=2)
        n = part["n_samples"].max() if "n_samples" in part else None
        ax.set_title(f"{tasks[i]} {part['metric'].iloc[0]}" + (f" (n≤{int(n)})" if n else ""), fontsize=8)
        ax.tick_params(labelsize=6)
        if i % cols:
            ax.set_yticklabels([])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=CHART_DPI)
    plt.close(fig)
    return path


def write_evaluation_report(con, tasks: Sequence[str], folder: Path) -> tuple[pd.DataFrame, str, Path]:
    """The evaluation of the given tasks as markdown (with the paired comparisons) and a chart, written to folder
    as lamp_evaluation.{md,png}; returns (table, markdown, chart path)."""
    from prag_models.storage.store import table_exists

    if not table_exists(con, "lamp_evaluation"):
        raise LookupError("table lamp_evaluation is empty: materialize lamp_evaluation first")
    table = con.execute("SELECT * FROM lamp_evaluation ORDER BY task, method, metric").df()
    comparisons = (
        con.execute("SELECT * FROM lamp_evaluation_comparisons ORDER BY task, method, baseline").df()
        if table_exists(con, "lamp_evaluation_comparisons")
        else pd.DataFrame()
    )
    table = table[table["task"].isin(tasks)]
    markdown = evaluation_markdown(table)
    if len(comparisons):
        comparisons = comparisons[comparisons["task"].isin(tasks)]
        markdown += "\n\nPaired differences of the primary metric (positive = better than the baseline):\n\n"
        markdown += comparisons_markdown(comparisons)
    chart = evaluation_chart(table, folder / "lamp_evaluation.png")
    (chart.parent / "lamp_evaluation.md").write_text(markdown + "\n", encoding="utf-8")
    return table, markdown, chart
