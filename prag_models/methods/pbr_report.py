"""The real-data retrieval evaluation (PersonaBench, LongMemEval) as markdown: Overall R@K / N@K with 95 % intervals,
then R@5 / N@5 per category (docs/methods.md §4.5, §6.3)."""

from __future__ import annotations

import pandas as pd

from prag_models.data.personabench import CATEGORIES
from prag_models.methods import query_expansion as qe
from prag_models.methods.pbr import PBR_METHODS
from prag_models.methods.pbr_knobs import DEFAULT_METHOD

ALL_METHODS: tuple[str, ...] = (*PBR_METHODS, DEFAULT_METHOD, *qe.QE_METHODS)
RECALL_METRIC = {"personabench": "recall", "longmemeval": "recall_any"}
LABELS = {"base": "Base", "pbr": "PBR", "pbr_wo_anchor": "PBR w/o P-Anchor", "pbr_wo_prf": "PBR w/o P-PRF",
          DEFAULT_METHOD: "PBR, authors' settings",
          "hyde": "HyDE", "query2term": "Query2Term", "mill": "MILL", "cot": "CoT", "thinkqe": "ThinkQE"}  # fmt: skip


def _cell(row: pd.Series | None, with_interval: bool) -> str:
    """``value`` or ``value ± half-width`` of one evaluation row."""
    if row is None:
        return ""
    if with_interval and "ci_low" in row and pd.notna(row["ci_low"]):
        return f"{row['value']:.4f} ± {(row['ci_high'] - row['ci_low']) / 2:.3f}"
    return f"{row['value']:.4f}"


def retrieval_markdown(table: pd.DataFrame) -> str:
    """Per dataset (PersonaBench pooled, then each community ``personabench[<community>]``): Overall R@K / N@K with
    their 95 % intervals and n, then R@5 / N@5 per category (R = the dataset's recall)."""
    parts = []
    for dataset, df in table.groupby("dataset", sort=False):
        recall = RECALL_METRIC.get(str(dataset).split("[")[0], "recall")
        methods = [m for m in ALL_METHODS if m in set(df["method"])]
        ks = sorted(df["k"].unique())
        k5 = 5 if 5 in ks else ks[-1]
        rows = {(r.method, r.category, r.metric, r.k): r._asdict() for r in df.itertuples(index=False)}
        order = {c: i for i, c in enumerate(CATEGORIES)}  # PersonaBench's table order, then the others by name
        cats = sorted(set(df["category"]) - {"Overall"}, key=lambda c: (order.get(c, len(order)), c)) + ["Overall"]
        cols = [(f"R@{k}", "Overall", recall, k) for k in ks] + [(f"N@{k}", "Overall", "ndcg", k) for k in ks]
        cat_cols = [(f"{c} {label}@{k5}", c, metric, k5) for c in cats for label, metric in (("R", recall),
                                                                                            ("N", "ndcg"))]  # fmt: skip
        n = df[(df["category"] == "Overall")]["n_questions"].max()
        for title, columns, intervals in (
            (f"{dataset}: Overall ({n} questions, R = {recall}, 95 % bootstrap intervals)", cols, True),
            (f"{dataset}: per category", cat_cols, False),
        ):
            head = "| method | " + " | ".join(c[0] for c in columns) + " |"
            lines = [f"**{title}**", "", head, "|---" * (len(columns) + 1) + "|"]
            for m in methods:
                cells = [_cell(rows.get((m, c, metric, k)), intervals) for _, c, metric, k in columns]
                lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
            parts.append("\n".join(lines))
    return "\n\n".join(parts) or "_no retrieval evaluation rows_"
