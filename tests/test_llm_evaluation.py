"""LLM evaluation rows with n and intervals, paired comparisons, the report's markdown and chart size."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from prag_models.evaluation.llm import compare_with_baselines, evaluate_generations
from prag_models.evaluation.report import comparisons_markdown, evaluation_chart, evaluation_markdown


def _gens(task: str, by_method: dict[str, list[str]], golds: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        [(m, f"s{i:02d}", p, golds[i]) for m, preds in by_method.items() for i, p in enumerate(preds)],
        columns=["method", "sample_id", "prediction", "gold"],
    )


def test_classification_rows_carry_n_and_an_interval() -> None:
    golds = ["comedy", "dark comedy"] * 10
    gens = _gens("LaMP-2", {"good": golds, "random": ["comedy"] * 20}, golds)
    table = evaluate_generations("LaMP-2", gens).set_index(["method", "metric"])
    good, rnd = table.loc[("good", "accuracy")], table.loc[("random", "accuracy")]
    # every answer right: no spread to bootstrap, so Wilson's interval (issue 50.3: never a point with ± 0)
    assert good.value == 1.0 and 0.8 < good.ci_low < 0.9 and good.ci_high == 1.0 and good.n_samples == 20
    assert rnd.value == 0.5 and rnd.ci_low < 0.5 < rnd.ci_high
    f1 = table.loc[("random", "f1_macro")]
    assert f1.ci_low <= f1.value <= f1.ci_high and table.loc[("good", "accuracy"), "is_primary"]


def test_resampled_macro_f1_is_sklearns_on_every_resample() -> None:
    """The bootstrap's macro-F1, counted for all resamples at once, equals sklearn's f1_score (through lamp_metrics)
    on each resample: labels never true nor predicted, answers that are no label, and a gold outside the labels."""
    import numpy as np

    from prag_models.data.tasks import LABELS
    from prag_models.evaluation.llm import resampled_macro_f1
    from prag_models.metrics.lamp import lamp_metrics

    rng = np.random.default_rng(3)
    labels = list(LABELS["LaMP-2"])
    golds = [labels[i] for i in rng.integers(0, 5, 40)] + ["not a tag"]
    predictions = [labels[i] if i < len(labels) else "rambling" for i in rng.integers(0, len(labels) + 3, 41)]
    index = {label: i for i, label in enumerate(labels)}
    resamples = rng.integers(0, 41, (30, 41))
    counted = resampled_macro_f1(np.array([index.get(g, -1) for g in golds]),
                                 np.array([index.get(p, -1) for p in predictions]), len(labels), resamples)  # fmt: skip
    expected = [lamp_metrics("LaMP-2", [predictions[i] for i in r], [golds[i] for i in r])["f1_macro"]
                for r in resamples]  # fmt: skip
    assert counted == pytest.approx(expected, abs=1e-12)


def test_rating_comparison_is_oriented_so_that_positive_is_better() -> None:
    golds = ["3"] * 12
    gens = _gens("LaMP-3", {"close": ["3"] * 12, "random": ["5"] * 12, "dense_global": ["4"] * 12}, golds)
    comp = compare_with_baselines("LaMP-3", gens).set_index(["method", "baseline"])
    row = comp.loc[("close", "random")]
    assert row.metric == "mae" and row.difference == 2.0 and row.better and not row.worse
    assert comp.loc[("random", "dense_global")].worse
    rmse = evaluate_generations("LaMP-3", gens).set_index(["method", "metric"]).loc[("random", "rmse")]
    assert rmse.value == pytest.approx(2.0)


def test_report_markdown_and_chart_fit(tmp_path: Path) -> None:
    golds = ["comedy", "dark comedy", "romance", "comedy"] * 5
    gens = _gens("LaMP-2", {"a": golds, "random": ["romance"] * 20, "dense": golds[:18] + ["comedy"] * 2}, golds)
    table = evaluate_generations("LaMP-2", gens)
    markdown = evaluation_markdown(table)
    assert "±" in markdown and "(n=20)" in markdown and "**1.000 ± 0.081**" in markdown
    assert "▲" in comparisons_markdown(compare_with_baselines("LaMP-2", gens))
    import matplotlib.image

    three_tasks = pd.concat([table.assign(task=t) for t in ("LaMP-1", "LaMP-2", "LaMP-3", "LaMP-4")])
    height, width = matplotlib.image.imread(evaluation_chart(three_tasks, tmp_path / "c.png")).shape[:2]
    assert width <= 1000 and height <= 1000
