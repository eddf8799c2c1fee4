"""Evaluation tables as markdown and a bar chart image."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from prag_models.metrics import HIGHER_IS_BETTER


def evaluation_markdown(table: pd.DataFrame) -> str:
    """One markdown table: rows = method, columns = task/metric (best value of each column in bold)."""
    if table.empty:
        return "_no evaluation rows_"
    wide = table.pivot_table(index="method", columns=["task", "metric"], values="value", aggfunc="first")
    wide = wide.sort_index(axis=1)
    shown = wide.map(lambda v: "" if pd.isna(v) else f"{v:.4f}")
    for col in wide.columns:
        values = wide[col].dropna()
        if values.empty:
            continue
        best = values.max() if HIGHER_IS_BETTER.get(col[1], True) else values.min()
        for method in values.index[values == best]:
            shown.at[method, col] = f"**{best:.4f}**"
    shown.columns = [f"{task} {metric}" for task, metric in shown.columns]
    return shown.reset_index().to_markdown(index=False)


def evaluation_chart(table: pd.DataFrame, path: Path) -> Path:
    """Bar chart of each task's primary metric per method, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    primary = table[table["is_primary"]] if "is_primary" in table else table
    tasks = sorted(primary["task"].unique())
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(3.2 * max(1, len(tasks)), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=False):
        part = primary[primary["task"] == task].sort_values("method")
        ax.barh(part["method"], part["value"], color="#4c72b0")
        ax.set_title(f"{task} {part['metric'].iloc[0]}", fontsize=9)
        ax.tick_params(labelsize=7)
        if ax is not axes[0][0]:
            ax.set_yticklabels([])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
