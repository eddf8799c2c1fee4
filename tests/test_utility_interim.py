"""The utility test's interim look (issue 47, utility.interim_p): a test planned past utility.min_samples looks once
halfway (never before min_samples) and stops there only on a clear effect; the LLM evidence run counts a stopped test
as complete."""

import duckdb
import numpy as np
import pandas as pd
import pytest

from prag_models.config.settings import Settings
from prag_models.evaluation.claims import PERSONALIZED
from prag_models.evaluation.utility import PLAN_TABLE
from prag_models.stages.llm_utility import PLAN_COLUMNS, _pilot_plan_test
from prag_models.stages.utility_funding import completed_tasks

CHOSEN = "clusterrag_community"


class _StubScorer:
    """Scores every (method, sample): the chosen method at 0, dense_global and dense at -gain on the test (-0.1 on
    the pilot, which underestimates the effect so the plan wants more than min_samples) with noise, the other
    candidates far below."""

    def __init__(self, gain: float) -> None:
        self.gain, self.rng = gain, np.random.default_rng(5)
        self.generator = type("G", (), {"model_id": "stub"})()
        self.seconds, self.computed, self.cache_only = 0.0, 0, False
        self.scored: dict[str, set[str]] = {}
        self.seconds_per_prompt = 0.0  # what each prompt costs (seconds and computed count, as _Scorer keeps them)

    def score(self, pairs: list[tuple[str, str]], phase: str) -> dict[tuple[str, str], float]:
        if self.cache_only:
            raise LookupError("not cached")
        self.scored.setdefault(phase, set()).update(s for _, s in pairs)
        if self.seconds_per_prompt:
            self.seconds += self.seconds_per_prompt * len(pairs)
            self.computed += len(pairs)
        gain = self.gain if phase == "test" else 0.1
        compared = ("dense_global", "dense")  # the other candidates score far below: the pilot always chooses CHOSEN
        return {(m, s): 0.0 if m == CHOSEN else -gain + self.rng.normal(0, 0.3) if m in compared else -5.0
                for m, s in pairs}  # fmt: skip


def _settings(interim_p: float = 0.005) -> Settings:
    """Default settings with a 4-sample pilot, min_samples 6 and power 0.999 (a plan that wants more than 6)."""
    base = Settings()
    utility = {"pilot_samples": 4, "min_samples": 6, "power": 0.999, "interim_p": interim_p}
    return base.model_copy(update={"utility": base.utility.model_copy(update=utility)})


def _plan(gain: float, interim_p: float) -> tuple[object, _StubScorer]:
    """A label-free task's pilot, plan and test on stub scores (power 0.999: the plan wants more than min_samples)."""
    settings = _settings(interim_p)
    ids = [f"s{i:03d}" for i in range(60)]
    docs = {m: {s: ["text"] for s in ids} for m in [*PERSONALIZED, "dense_global", "dense"]}
    scorer = _StubScorer(gain)
    with duckdb.connect() as con:
        plan = _pilot_plan_test(scorer, con, "LaMP-7", settings, ids, ids[:4], ids[4:], docs, 0.0, 0.0)
    return plan, scorer


def test_a_clear_effect_stops_at_the_interim_look_and_the_evidence_run_counts_it_complete():
    """A large gain over dense_global and the own profile: the test stops halfway (28 of the 56 test samples the
    plan wants, above min_samples 6), the plan says so, and completed_tasks treats it as complete (the evidence run
    does not extend it)."""
    plan, scorer = _plan(gain=2.0, interim_p=0.005)
    assert plan.planned_n >= 56 and plan.stopped_early and plan.test_n == 28, plan
    assert len(scorer.scored["test"]) == 28
    settings = _settings()
    row = {c: getattr(plan, c) for c in PLAN_COLUMNS}
    with duckdb.connect() as con:
        con.register("plan_frame", pd.DataFrame([row]))
        con.execute(f"CREATE TABLE {PLAN_TABLE} AS SELECT * FROM plan_frame")
        complete, decided = completed_tasks(con, settings, "stub")
    assert "LaMP-7" in complete and "LaMP-7" not in decided


@pytest.mark.parametrize(("gain", "interim_p"), [(0.05, 0.005), (1.0, 0.0)])
def test_without_a_clear_effect_or_without_the_look_the_test_runs_to_its_planned_n(gain, interim_p):
    """A small gain (not clear at the look), or the look turned off: every planned test sample is scored."""
    plan, scorer = _plan(gain=gain, interim_p=interim_p)
    assert not plan.stopped_early and plan.test_n == min(plan.planned_n, 56) > 6, plan
    assert len(scorer.scored["test"]) == plan.test_n


def test_a_funded_task_whose_pilot_costs_more_than_estimated_still_runs_its_smallest_deciding_test():
    """Issue 47 (failed first: on the one-core proxy every task's pilot cost 1.4 s a prompt against the 1.1 s
    estimated, the budget then paid fewer than min_samples test samples, and each task was deferred after its pilot
    was scored): a task funded with its pilot and smallest test finishes that test."""
    from prag_models.stages.utility_funding import prompts_needed

    settings = _settings(interim_p=0.0)
    ids = [f"s{i:03d}" for i in range(60)]
    docs = {m: {s: ["text"] for s in ids} for m in [*PERSONALIZED, "dense_global", "dense"]}
    scorer = _StubScorer(gain=0.05)
    scorer.seconds_per_prompt = 1.4
    budget = prompts_needed(False, settings) * 1.1  # funded at the estimate of 1.1 s a prompt
    with duckdb.connect() as con:
        plan = _pilot_plan_test(scorer, con, "LaMP-7", settings, ids, ids[:4], ids[4:], docs, budget, 1.1)
    assert plan.affordable_n < 6 and plan.test_n == 6 and len(scorer.scored["test"]) == 6, plan


@pytest.mark.parametrize(("test_n", "look"), [(56, 28), (30, 20), (21, 20), (20, 20), (8, 8), (41, 21)])
def test_the_look_is_halfway_and_never_before_min_samples(test_n, look):
    """interim_n: half the test (rounded up), at least min_samples (20), the whole test where nothing would follow."""
    from prag_models.evaluation.utility import interim_n

    assert interim_n(test_n, 20) == look


class _CachedStub(_StubScorer):
    """_StubScorer behind a cache, as _Scorer is: a (method, sample) keeps its value; cache_only raises LookupError
    for a pair not scored before."""

    def __init__(self, gain: float) -> None:
        super().__init__(gain)
        self.cache: dict[tuple[str, str], float] = {}

    def score(self, pairs: list[tuple[str, str]], phase: str) -> dict[tuple[str, str], float]:
        missing = [p for p in pairs if p not in self.cache]
        if missing and self.cache_only:
            raise LookupError(f"{len(missing)} prompts not cached")
        self.cache |= super().score(missing, phase) if missing else {}
        return {p: self.cache[p] for p in pairs}


def test_a_cut_test_the_next_run_cannot_fund_keeps_its_samples_and_plan():
    """Issue 47 (failed first: on the one-core proxy `prag evidence` could not fund LaMP-2, whose main-job test had
    decided at n = 20 of 88 planned, re-planned it to 88 from the cache alone and replaced it by "deferred"): a task
    the run cannot fund answers from the cache with the stored plan of the same pilot, the samples it had."""
    from prag_models.stages.utility_funding import prompts_needed

    settings = _settings(interim_p=0.0)
    ids = [f"s{i:03d}" for i in range(60)]
    docs = {m: {s: ["text"] for s in ids} for m in [*PERSONALIZED, "dense_global", "dense"]}
    scorer = _CachedStub(gain=0.05)
    scorer.seconds_per_prompt = 1.0
    budget = prompts_needed(False, settings) * 1.0  # the pilot and min_samples = 6 test samples
    with duckdb.connect() as con:
        cut = _pilot_plan_test(scorer, con, "LaMP-7", settings, ids, ids[:4], ids[4:], docs, budget, 1.0)
        assert cut.test_n == 6 < cut.planned_n and not cut.stopped_early, cut
        con.register("plan_frame", pd.DataFrame([{c: getattr(cut, c) for c in PLAN_COLUMNS}]))
        con.execute(f"CREATE TABLE {PLAN_TABLE} AS SELECT * FROM plan_frame")
        scorer.cache_only, scored = True, len(scorer.cache)  # the next run: no seconds for this task
        again = _pilot_plan_test(scorer, con, "LaMP-7", settings, ids, ids[:4], ids[4:], docs, 0.0, 1.0)
    assert (again.test_n, again.planned_n, again.key) == (cut.test_n, cut.planned_n, cut.key), again
    assert len(scorer.cache) == scored  # nothing new scored
