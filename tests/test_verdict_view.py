"""The verdict's deciding columns (prag_models/evaluation/verdict_view.py, issue 42): the short table a terminal run
ends with fits 100 columns whatever the methods are called, the report asset shows the same cells as markdown, and
the chart plots the verdict's gain per task with its n."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from prag_models.evaluation.verdict import VERDICT_COLUMNS, undecided
from prag_models.evaluation.verdict_view import DECIDING_HEADERS, deciding_markdown, deciding_text, verdict_chart


def _row(task: str, **over) -> dict:
    base = {"task": task, "evidence": "retrieval (ndcg@3)", "metric": "ndcg@3", "method": "clusterrag_community",
            "value": 0.887, "baseline_value": 0.501, "gain": 0.386, "gain_low": 0.288, "gain_high": 0.479,
            "n_samples": 96, "p_value": 0.001, "selection_p": 0.0005, "verdict": "ship",
            "cross_fitted_methods": "clusterrag_community (both folds)", "fold_methods": "clusterrag_community / "
            "clusterrag_community", "samples_needed": 0, "power_note": "", "own_gain": 0.4, "own_gain_low": 0.3,
            "own_gain_high": 0.5, "own_n_samples": 96, "llm_metric": "accuracy", "llm_gain": 0.0, "llm_gain_low": 0.0,
            "llm_gain_high": 0.0, "llm_n_samples": 1, "llm_decision": "too few samples to tell"}  # fmt: skip
    return base | over


def _table() -> pd.DataFrame:
    rows = [_row(f"LaMP-{i}") for i in (1, 2, 3, 4, 5)]
    rows[1] |= {"verdict": "personalization hurts", "gain": -0.2, "gain_low": -0.3, "gain_high": -0.1}
    rows[2] |= {"method": "no single method: fold 0: clusterrag_collaborative, fold 1: clusterrag_community",
                "fold_methods": "clusterrag_collaborative / clusterrag_community", "verdict": "own profile suffices",
                "llm_n_samples": 40, "llm_decision": "confirms"}  # fmt: skip
    rows[3] |= {"evidence": "LLM utility (no labels)", "metric": "utility", "llm_decision": "no LLM evaluation",
                "llm_n_samples": 0}  # fmt: skip
    rows[4] |= {"evidence": "LLM utility (no labels)", "metric": "utility", "llm_metric": "rouge-1",
                "llm_n_samples": 5}  # the generated outputs of a few samples beside the utility that decided
    rows.append(undecided("LaMP-7", "LLM utility (no labels)", "0 test samples within the budget"))
    return pd.DataFrame(rows, columns=[c for c in VERDICT_COLUMNS if c not in ("p_holm", "holm_verdict",
                                                                                "family_size")])  # fmt: skip


def _rows(lines: list[str]) -> dict[str, str]:
    """Each table row's text by task, its continuation lines (wrapped cells) joined to it word by word."""
    rows: dict[str, list[str]] = {}
    for line in lines[next(i for i, ln in enumerate(lines) if set(ln.replace(" ", "")) == {"-"}) + 1 :]:
        if not line.startswith(" "):
            rows[line.split()[0]] = []
        rows[list(rows)[-1]] += line.split()
    return {task: " ".join(words) for task, words in rows.items()}


def test_the_deciding_table_fits_100_columns() -> None:
    lines = deciding_text(_table()).splitlines()
    assert max(len(ln) for ln in lines) <= 100, [ln for ln in lines if len(ln) > 100]
    assert lines[0].split()[:3] == ["task", "verdict", "method"]
    rows = _rows(lines)
    assert list(rows) == ["LaMP-1", "LaMP-2", "LaMP-3", "LaMP-4", "LaMP-5", "LaMP-7"]
    assert "ship clusterrag_community ndcg@3 +0.386 [+0.288, +0.479]" in rows["LaMP-1"]
    assert rows["LaMP-1"].endswith("96 too few, n=1")
    assert rows["LaMP-2"].startswith("LaMP-2 personalization")
    third = rows["LaMP-3"].split()  # wrapped cells: their words interleave line by line
    assert {"clusterrag_collaborative", "clusterrag_community", "confirms,", "n=40", "suffices"} <= set(third)
    # a task the utility decided: its gain in that metric, and the LLM evidence is the utility, not "none" or the
    # few generated outputs' "too few" (which only follows, named as the outputs')
    assert "utility +0.386 [+0.288, +0.479] 96 utility" in rows["LaMP-4"]
    assert rows["LaMP-5"].endswith("96 utility; outputs too few, n=5")
    seventh = rows["LaMP-7"].split()
    assert seventh[:5] == ["LaMP-7", "keep", "the", "baseline", "—"] and seventh[-2:] == ["0", "none"]
    assert "nothing to decide" in deciding_text(pd.DataFrame())
    # a plain demo verdict (one metric, short words) needs no wrapping: one line a task
    plain = deciding_text(pd.DataFrame([_row(f"LaMP-{i}") for i in (1, 2, 3)])).splitlines()
    assert len(plain) == 2 + 3 and plain[2].split()[-4:] == ["96", "too", "few,", "n=1"]


def test_the_report_shows_the_same_cells_and_charts_the_gain(tmp_path: Path) -> None:
    import matplotlib.image

    table = _table()
    md = deciding_markdown(table).splitlines()
    assert md[0] == "| " + " | ".join(DECIDING_HEADERS) + " |"
    assert md[2] == "| LaMP-1 | **ship** | clusterrag_community | ndcg@3 +0.386 [+0.288, +0.479] | 96 | too few, n=1 |"
    assert len(md) == 2 + len(table)
    chart = verdict_chart(table, tmp_path / "gain.png")
    height, width = matplotlib.image.imread(chart).shape[:2]
    assert width == 900 and height < 600
    assert verdict_chart(pd.DataFrame(), tmp_path / "empty.png").is_file()
