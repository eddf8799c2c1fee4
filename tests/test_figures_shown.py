"""No figure of n = 1 shown as precise (issue 50.3): a proportion whose samples all agree gets Wilson's interval,
any other single value none, and the tables show a figure without an interval at n = 1 as not measured."""

import math

import pandas as pd

from prag_models.evaluation.report import primary_by_task
from prag_models.metrics.intervals import estimate


def test_a_proportion_whose_samples_agree_has_a_wilson_interval_not_a_point():
    one, three, eight = estimate([1.0]), estimate([1.0, 1.0, 1.0]), estimate([0.0] * 8)
    assert one.low < 0.25 and one.high == 1.0 and one.n == 1  # Wilson at n = 1: [0.21, 1.00]
    assert 0.3 < three.low < 0.5 and three.high == 1.0
    assert eight.low == 0.0 and 0.2 < eight.high < 0.4
    assert all(e.low <= e.value <= e.high for e in (one, three, eight, estimate([1.0] * 96)))  # never outside
    rouge = estimate([0.42])
    assert rouge.value == 0.42 and math.isnan(rouge.low) and math.isnan(rouge.high)


def test_the_primary_metric_table_shows_a_figure_of_one_sample_as_not_measured():
    hit, rouge = estimate([1.0]), estimate([0.42])
    rows = pd.DataFrame([
        ("LaMP-1", "cfrag", "accuracy", 1.0, hit.low, hit.high, 1, True),
        ("LaMP-5", "cfrag", "rouge-1", 0.42, rouge.low, rouge.high, 1, True),
    ], columns=["task", "method", "metric", "value", "ci_low", "ci_high", "n_samples", "is_primary"])  # fmt: skip
    table = primary_by_task(rows)
    cells = table.drop(columns=["method", "role"]).iloc[0].tolist()
    assert "± 0.000" not in " ".join(cells)
    assert cells[1] == "not measured (n=1)" and cells[0].startswith("1.000 ± 0.")
