"""The LLM utility (docs/methods.md §6.7): the measure, its cache, the planned sample size and the verdict it gives
where no label sees a task."""

import duckdb
import numpy as np
import pandas as pd
import pytest

from prag_models.evaluation.utility import gold_answer, per_token, planned_samples, utility_values
from prag_models.evaluation.utility_verdict import utility_leg, utility_task_verdict
from prag_models.evaluation.verdict import KEEP, OWN, SHIP, WORSE
from prag_models.llm.fake import FakeGenerator


def test_the_gold_answer_is_written_as_the_prompt_asks_for_it():
    assert gold_answer("LaMP-4", "A headline") == '{"title": "A headline"}'
    assert gold_answer("LaMP-7", "so good") == '{"tweet": "so good"}'
    assert gold_answer("LaMP-2", " comedy ") == "comedy"


def test_utility_is_higher_where_the_prompt_holds_the_answers_words_and_is_cached(tmp_path):
    con = duckdb.connect(str(tmp_path / "u.duckdb"))
    generator = FakeGenerator()
    prompts = ["profile: knights and castles and jousting", "profile: espresso and latte"]
    answers = ["knights jousting", "knights jousting"]
    logliks, tokens, ran = utility_values(con, generator, prompts, answers)
    values = per_token(logliks, tokens)
    assert ran == 2 and values[0] > values[1]
    again, _, ran_again = utility_values(con, generator, prompts, answers)
    assert ran_again == 0 and np.allclose(again, logliks)


def test_the_planned_size_gives_power_at_the_pilots_effect_within_its_bounds():
    noise = np.array([-1.5, -1.0, -0.5, -0.2, 0.2, 0.5, 1.0, 1.5])
    strong, weak = 1.0 + noise, 0.3 + noise
    assert planned_samples(strong, 5, 200, 0.8) < planned_samples(weak, 5, 200, 0.8)
    assert planned_samples(weak, 5, 30, 0.8) <= 30
    assert planned_samples(-np.abs(strong), 12, 200, 0.8) == 12  # no gain in the pilot: the minimum
    assert planned_samples(strong, 12, 5, 0.8) == 5  # the budget's cap wins


def _scores(gain: float, own_gain: float, n: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = rng.normal(-3.0, 0.5, n)
    ids = [f"s{i}" for i in range(n)]
    rows = [("dense_global", s, b) for s, b in zip(ids, base, strict=True)]
    rows += [("clusterrag_community", s, b + gain + rng.normal(0, 0.3)) for s, b in zip(ids, base, strict=True)]
    rows += [("dense", s, b + gain - own_gain + rng.normal(0, 0.3)) for s, b in zip(ids, base, strict=True)]
    return pd.DataFrame(rows, columns=["method", "sample_id", "value"])


@pytest.mark.parametrize(
    ("gain", "own_gain", "n", "expected"),
    [(0.8, 0.8, 40, SHIP), (0.8, 0.0, 40, OWN), (0.0, 0.0, 40, KEEP), (-0.8, -0.8, 40, WORSE), (0.8, 0.8, 10, KEEP)],
)
def test_the_utility_verdict_ships_only_a_shown_gain_over_both_alternatives(gain, own_gain, n, expected):
    row = utility_task_verdict(_scores(gain, own_gain, n), "clusterrag_community", 20, 0.01)
    assert row["verdict"] == expected
    assert row["n_samples"] == n and row["metric"] == "utility"
    if n < 20:
        assert "fewer than utility.min_samples" in row["power_note"]


def test_the_utility_leg_says_too_few_below_its_minimum_and_confirms_above():
    scores = _scores(0.8, 0.8, 30)
    assert utility_leg(scores, "clusterrag_community", 20)["llm_decision"] == "confirms"
    assert utility_leg(scores, "clusterrag_community", 40)["llm_decision"] == "too few samples to tell"
    assert utility_leg(_scores(-0.8, 0.0, 30), "clusterrag_community", 20)["llm_decision"] == "contradicts"


def _barely_over_own(n: int = 20) -> np.ndarray:
    """Per-sample gains over the own profile whose bootstrap interval lies just above 0 while the paired t-test's
    one-sided p is above 2.5 % (t about 2.0 on 20 samples): the case a calibration world of the null family shipped."""
    d = np.random.default_rng(0).normal(0.3, 1.0, n)
    return d - d.mean() + 0.45 * d.std(ddof=1)


def test_beating_the_own_profile_needs_the_same_test_as_beating_everybody():
    """"ship" says collaboration beats the own profile: the interval above 0 is not enough when the paired test
    does not reject at 2.5 % one-sided (the verdict's own p would contradict it) — "own profile suffices"."""
    from prag_models.metrics.intervals import paired_difference, paired_p_value

    over_own = _barely_over_own()
    own_interval = paired_difference(over_own, np.zeros(len(over_own)))
    assert own_interval.low > 0 and paired_p_value(over_own) / 2 > 0.025  # the case, as built
    ids = [f"s{i}" for i in range(len(over_own))]
    base = np.random.default_rng(1).normal(-3.0, 0.5, len(ids))
    rows = [("dense_global", s, b) for s, b in zip(ids, base, strict=True)]
    rows += [("clusterrag_community", s, b + 2.0) for s, b in zip(ids, base, strict=True)]
    rows += [("dense", s, b + 2.0 - g) for s, b, g in zip(ids, base, over_own, strict=True)]
    row = utility_task_verdict(pd.DataFrame(rows, columns=["method", "sample_id", "value"]),
                               "clusterrag_community", 20, 0.01)  # fmt: skip
    assert row["verdict"] == OWN, row


@pytest.mark.parametrize(
    ("base_gain", "own_gain", "p", "stops"),
    [(0.5, 0.5, 0.001, True), (0.5, 0.0, 0.001, False), (-0.5, 0.0, 0.001, True), (0.02, 0.02, 0.001, False),
     (0.5, 0.5, 0.0, False), (0.5, None, 0.001, True)],
)  # fmt: skip
def test_the_interim_look_stops_only_on_an_effect_clear_in_every_comparison_the_verdict_needs(
    base_gain, own_gain, p, stops
):
    """Issue 47: one interim look (Haybittle–Peto) stops the utility test early only where every comparison the
    verdict needs is below utility.interim_p: a clear gain over dense_global (and over the own profile where it is
    compared), or a clear loss, never a gain shown over dense_global alone; interim_p = 0 turns it off."""
    from prag_models.evaluation.utility import clear_at_interim

    rng = np.random.default_rng(3)
    base = base_gain + rng.normal(0, 0.3, 20)
    own = None if own_gain is None else own_gain + rng.normal(0, 0.3, 20)
    assert clear_at_interim(base, own, p) is stops
