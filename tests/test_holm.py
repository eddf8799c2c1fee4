"""prag's Holm (prag_models/metrics/intervals.py) gives statsmodels' numbers without its gc.collect() per call."""

from __future__ import annotations

import numpy as np
from statsmodels.stats.multitest import multipletests

from prag_models.metrics.intervals import holm


def test_holm_equals_statsmodels_bit_for_bit_on_random_families_with_ties(monkeypatch) -> None:
    # statsmodels' gc.collect() per call took 0.4 s each in a test worker's large heap (2,000 calls: 13 minutes)
    monkeypatch.setattr("gc.collect", lambda *_args: 0)
    rng = np.random.default_rng(7)
    for i in range(2000):
        m = int(rng.integers(1, 15))
        draws = [rng.uniform(0, 0.1, m), np.round(rng.uniform(0, 0.2, m), 2), rng.uniform(0, 1, m) ** 3]
        p = draws[i % 3]
        expected_rejected, expected_adjusted, _, _ = multipletests(p, alpha=0.05, method="holm")
        rejected, adjusted = holm(p, 0.05)
        np.testing.assert_array_equal(rejected, expected_rejected)
        np.testing.assert_array_equal(adjusted, expected_adjusted)


def test_holm_steps_down_and_stops_at_its_first_failure() -> None:
    rejected, adjusted = holm([0.04, 0.001, 0.015, 0.5], 0.05)
    # sorted: 0.001 <= 0.05/4, 0.015 <= 0.05/3, 0.04 > 0.05/2: the step-down stops there, 0.5 is not tested
    assert rejected.tolist() == [False, True, True, False]
    np.testing.assert_allclose(adjusted, [0.08, 0.004, 0.045, 0.5])


def test_a_missing_p_value_is_never_rejected() -> None:
    rejected, adjusted = holm([np.nan], 0.05)  # statsmodels 0.15 rejects a family of one NaN
    assert not rejected.any() and np.isnan(adjusted).all()
    rejected, _ = holm([0.01, np.nan, 0.2], 0.05)
    assert rejected.tolist() == [True, False, False]
