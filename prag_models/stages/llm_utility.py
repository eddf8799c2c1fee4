"""Stage 5b (LLM utility): the label-free comparison that decides or confirms each task's verdict
(docs/methods.md §6.7).

The LLM calls go where they decide. Dev samples are taken in the LLM work's seeded order:

1. **Pilot** — the first ``utility.pilot_samples``: every candidate personalized method, ``dense_global`` and
   ``dense`` are scored. Where labels already chose the method (the retrieval evaluation's cross-fitted choice: on
   each fold the method best on the other), the pilot scores that choice only; where no labels exist, the pilot
   chooses it (best mean utility). The pilot also gives the spread of the paired differences.
2. **Plan** — the test's sample size for ``utility.power`` at the pilot's effect (paired t-test), within
   [``min_samples``, ``max_samples``] and what the budget pays for at the pilot's measured seconds per prompt. The
   plan is fixed before any test sample is scored (no peeking) and stored, so a rerun takes the same samples.
3. **Test** — the next n samples, never seen by the choice: the chosen method, ``dense_global`` and ``dense``.

The budget buys whole tests (issue 47): a task is funded only with the seconds of its pilot and its smallest deciding
test (``utility.min_samples``) at this machine's measured seconds per prompt; a task the main job cannot fund is
answered from the cache where earlier runs scored it, else **deferred** to the LLM evidence run (``prag evidence``,
job ``prag_llm_evidence``), which funds the deferred tests from ``run.evidence_budget_s`` and continues from what
is cached.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.source import llm_eval_order
from prag_models.evaluation.claims import PERSONALIZED, fold_of
from prag_models.evaluation.retrieval import LLM_SUBSET_METHODS
from prag_models.evaluation.utility import (
    DEFERRED,
    PLAN_TABLE,
    affordable,
    can_score,
    clear_at_interim,
    gold_answer,
    interim_n,
    labelled_choice,
    per_token,
    plan_key,
    planned_samples,
    utility_values,
)
from prag_models.evaluation.verdict import BASELINE, OWN_PROFILE
from prag_models.generation.answers import lamp_prompt
from prag_models.methods.cfrag.variants import CHAMPION_METHOD
from prag_models.stages.generation import retrieved_texts
from prag_models.stages.utility_funding import measured_prompt_s, prompts_needed, stopped_flag, task_budget_s
from prag_models.storage.store import table_exists

if TYPE_CHECKING:
    from prag_models.llm.base import Generator

CHALLENGER = "cfrag"  # the challenger bundle's full CFRAG; cfrag@champion is the champion bundle's
UTILITY_COLUMNS = ["task", "method", "sample_id", "phase", "loglik", "tokens", "value", "generator_id"]
PLAN_COLUMNS = ["task", "evidence", "chosen", "fold_choices", "candidates", "pilot_n", "pilot_gain", "pilot_sd",
                "seconds_per_prompt", "budget_s", "affordable_n", "planned_n", "test_n", "key",
                "stopped_early"]  # fmt: skip


@dataclass
class UtilityPlan:
    """How one task's utility comparison was planned (one row of llm_utility_plans)."""

    task: str
    evidence: str  # "labels chose" (retrieval's cross-fitted choice) or "pilot chose" (no labels)
    chosen: str  # the method tested (labels: per fold, in fold_choices)
    fold_choices: str
    candidates: str
    pilot_n: int
    pilot_gain: float
    pilot_sd: float
    seconds_per_prompt: float
    budget_s: float
    affordable_n: int
    planned_n: int
    test_n: int
    key: str
    stopped_early: bool = False  # the interim look decided at test_n < planned_n (utility.interim_p)


def _stored_plan(con, task: str, key: str) -> UtilityPlan | None:
    """The plan an earlier run stored for this task with the same key, else None."""
    if not table_exists(con, PLAN_TABLE):
        return None
    rows = con.execute(f"SELECT * FROM {PLAN_TABLE} WHERE task = ?", [task]).df()
    if rows.empty or rows.iloc[0]["key"] != key:
        return None
    row = rows.iloc[0].to_dict()
    return UtilityPlan(**{c: row[c] for c in PLAN_COLUMNS if c in row} | {"stopped_early": stopped_flag(row)})


class _Scorer:
    """Scores (method, sample) prompts of one task through the cache and keeps the values and the time spent."""

    def __init__(self, con, task: str, settings: Settings, generator: Generator, samples: pd.DataFrame,
                 docs: dict[str, dict[str, list[str]]], progress: Callable | None,
                 cache_only: bool = False) -> None:  # fmt: skip
        self.con, self.task, self.settings, self.generator = con, task, settings, generator
        self.samples, self.docs, self.progress = samples.set_index("sample_id"), docs, progress
        self.cache_only = cache_only  # NotCached for a prompt the cache lacks: no LLM call
        self.rows: list[tuple] = []
        self.computed, self.seconds = 0, 0.0

    def score(self, pairs: list[tuple[str, str]], phase: str) -> dict[tuple[str, str], float]:
        """Utility of each (method, sample) pair; rows kept for the table."""
        if not pairs:
            return {}
        prompts = [
            lamp_prompt(self.task, self.samples.at[s, "input"], self.docs.get(m, {}).get(s, []), self.generator,
                        self.settings.prompt)
            for m, s in pairs
        ]  # fmt: skip
        answers = [gold_answer(self.task, self.samples.at[s, "gold"]) for _, s in pairs]
        from prag_models.stages.generation import prompt_users  # the cache's provenance (docs/privacy.md)

        users = prompt_users(self.con, self.task, pairs)
        started = time.perf_counter()
        logliks, tokens, ran = utility_values(self.con, self.generator, prompts, answers,
                                              self.settings.generator.batch_size, self.progress,
                                              cache_only=self.cache_only, users=users)  # fmt: skip
        if ran:
            self.computed, self.seconds = self.computed + ran, self.seconds + time.perf_counter() - started
        values = per_token(logliks, tokens)
        for (m, s), ll, n, v in zip(pairs, logliks, tokens, values, strict=True):
            self.rows.append((self.task, m, s, phase, float(ll), int(n), float(v), self.generator.model_id))
        return {pair: float(v) for pair, v in zip(pairs, values, strict=True)}


def _covered(docs: dict[str, dict[str, list[str]]], methods: list[str], samples: list[str]) -> list[str]:
    """The methods with retrieved documents for every one of the samples."""
    return [m for m in methods if m in docs and all(s in docs[m] for s in samples)]


def utility_rows(
    con, task: str, settings: Settings, generator: Generator, progress: Callable[[int, int], None] | None = None,
    evidence_run: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:  # fmt: skip
    """(utility rows, the task's plan row, statistics) of one task: pilot, plan, test (module docstring); a task the
    run's budget does not fund is answered from the cache, else deferred (a plan row saying so, no rows)."""
    u = settings.utility
    empty = pd.DataFrame(columns=UTILITY_COLUMNS), pd.DataFrame(columns=PLAN_COLUMNS)
    if not u.enabled or not can_score(generator):
        why = "utility.enabled = false" if not u.enabled else f"{generator.model_id} exposes no log-likelihoods"
        return *empty, {"skipped": why}
    samples = con.execute(
        "SELECT sample_id, input, gold FROM lamp_samples WHERE task = ? AND split = 'dev'", [task]
    ).df()
    samples["sample_id"] = samples["sample_id"].astype(str)
    order = llm_eval_order(samples["sample_id"])
    pilot_ids = order[: u.pilot_samples]
    rest = order[u.pilot_samples :]
    if u.max_samples:
        rest = rest[: u.max_samples]
    docs = retrieved_texts(con, task, tuple({*PERSONALIZED, BASELINE, OWN_PROFILE, CHAMPION_METHOD}))
    if BASELINE not in docs:
        return *empty, {"skipped": f"no {BASELINE} retrievals"}
    per_prompt_s = measured_prompt_s(settings)
    total = settings.run.evidence_budget_s if evidence_run else settings.run.llm_budget_s
    budget = task_budget_s(con, task, settings, evidence_run, per_prompt_s, generator.model_id)
    unfunded = total > 0 and budget <= 0  # the budget cannot pay this task's whole test: only what is cached
    scorer = _Scorer(con, task, settings, generator, samples, docs, progress, cache_only=unfunded)
    try:
        plan = _pilot_plan_test(scorer, con, task, settings, order, pilot_ids, rest, docs, budget, per_prompt_s)
    except _NoCandidates as why:
        return *empty, {"skipped": str(why)}
    except LookupError:  # the cache lacks a prompt of a test this run may not pay for
        labelled = labelled_choice(con, task) is not None
        deferred = _deferred_plan(task, settings, generator.model_id, labelled, per_prompt_s)
        stats = {"deferred": f"needs ≈ {deferred.budget_s:.0f} s of LLM work on this machine; `prag evidence` runs "
                 "it (run.evidence_budget_s)"}  # fmt: skip
        return empty[0], pd.DataFrame([asdict(deferred)], columns=PLAN_COLUMNS), stats
    stats = {**asdict(plan)}
    if _covered(docs, [CHALLENGER, CHAMPION_METHOD], pilot_ids + rest) == [CHALLENGER, CHAMPION_METHOD]:
        try:
            stats["promotion_test_n"] = _champion_leg(scorer, pilot_ids, rest, budget, u)
        except LookupError:
            stats["promotion_test_n"] = 0  # deferred with the rest of this task's LLM work
    frame = pd.DataFrame(scorer.rows, columns=UTILITY_COLUMNS).drop_duplicates(["method", "sample_id", "phase"])
    stats |= {"prompts_computed": scorer.computed, "seconds": round(scorer.seconds, 1), "from_cache_only": unfunded}
    stats.pop("key")
    return frame, pd.DataFrame([asdict(plan)], columns=PLAN_COLUMNS), stats


class _NoCandidates(Exception):
    """No personalized method retrieved for every sample: nothing to compare."""


def _deferred_plan(task: str, settings: Settings, generator_id: str, labelled: bool, per_prompt_s: float,
                   ) -> UtilityPlan:  # fmt: skip
    """The plan row of a task whose test this run could not pay: evidence "deferred", the seconds it needs."""
    need = prompts_needed(labelled, settings) * per_prompt_s
    return UtilityPlan(task, DEFERRED, "", "", "", 0, 0.0, 0.0, per_prompt_s, need, 0, 0, 0,
                       plan_key(settings, generator_id))  # fmt: skip


def _pilot_plan_test(scorer: _Scorer, con, task: str, settings: Settings, order: list[str], pilot_ids: list[str],
                     rest: list[str], docs: dict, budget: float, per_prompt_s: float) -> UtilityPlan:  # fmt: skip
    """Score the pilot, plan the test (or reuse the stored plan decided on the same pilot), score the test."""
    u = settings.utility
    labelled = labelled_choice(con, task)
    if labelled is not None:  # the LLM leg of a label verdict: the same cross-fitted choice, against dense_global
        fold_methods = [m or next(x for x in labelled[1].chosen if x) for m in labelled[1].chosen]
        chosen_of = {s: fold_methods[fold_of(s)] for s in order}
        candidates, evidence, own = sorted(set(fold_methods)), "labels chose", []
    else:  # the verdict itself: the choice must also beat the own profile
        candidates = _covered(docs, [m for m in PERSONALIZED if m not in LLM_SUBSET_METHODS], pilot_ids + rest)
        fold_methods, chosen_of, evidence = [], {}, "pilot chose"
        own = [OWN_PROFILE] if _covered(docs, [OWN_PROFILE], pilot_ids + rest) else []
    if not candidates:
        raise _NoCandidates("no personalized method retrieved for every sample")

    # 1. pilot
    pilot_pairs = [(m, s) for s in pilot_ids for m in (candidates if not chosen_of else [chosen_of[s]])]
    pilot_pairs += [(m, s) for s in pilot_ids for m in [BASELINE, *own]]
    pilot = scorer.score(list(dict.fromkeys(pilot_pairs)), "pilot")
    if not chosen_of:
        means = {m: np.mean([pilot[(m, s)] for s in pilot_ids]) for m in candidates}
        best = max(candidates, key=lambda m: (means[m], -candidates.index(m)))
        chosen_of = {s: best for s in order}
    diffs = np.asarray([pilot[(chosen_of[s], s)] - pilot[(BASELINE, s)] for s in pilot_ids])
    own_diffs = np.asarray([pilot[(chosen_of[s], s)] - pilot[(own[0], s)] for s in pilot_ids]) if own else diffs

    # 2. plan, fixed before any test sample is scored. A stored plan is reused when it was decided on the same pilot
    # (its key holds the pilot's values) and the budget did not cut it, or this run has no more seconds for it (a run
    # that cannot fund the task at all answers it from the cache with the samples it had).
    key = plan_key(settings, scorer.generator.model_id) + pilot_digest(pilot)
    stored = _stored_plan(con, task, key)
    spent = scorer.seconds or per_prompt_s * len(pilot)  # a cached pilot still costs its prompts' seconds
    per_prompt = scorer.seconds / scorer.computed if scorer.computed else per_prompt_s
    prompts_per_sample = 2 + len(own)
    budgeted = budget > 0 and per_prompt > 0
    paid = affordable(budget - spent, prompts_per_sample, per_prompt) if budgeted else len(rest)
    cap = min(len(rest), paid)
    no_more = stored is not None and (scorer.cache_only or cap <= stored.test_n)  # this run pays no more samples
    if stored is not None and (stored.test_n >= stored.planned_n or stored.stopped_early or no_more):
        plan = stored
    else:
        # "ship" needs both comparisons shown: the test is sized for the one that needs more samples
        planned = max(planned_samples(d, u.min_samples, len(rest), u.power) for d in (diffs, own_diffs))
        test_n = min(planned, cap)
        if budgeted and test_n < min(u.min_samples, len(rest)):
            # The task was funded with its pilot and smallest deciding test at the machine's estimated seconds per
            # prompt, and the pilot cost more: finish that test (the overrun is the estimate's error) rather than
            # throw the pilot away and defer the task (on the one-core proxy every task was deferred that way).
            test_n = min(u.min_samples, len(rest))
        chosen_name = " / ".join(fold_methods) if fold_methods else chosen_of[pilot_ids[0]]
        plan = UtilityPlan(task, evidence, chosen_name, " / ".join(fold_methods), ", ".join(candidates),
                           len(pilot_ids), float(np.mean(diffs)), float(np.std(diffs, ddof=1)) if len(diffs) > 1
                           else 0.0, per_prompt, budget, cap, planned, test_n, key)  # fmt: skip

    # 3. test, with one interim look halfway (utility.interim_p) where a new plan wants more than min_samples
    def test(ids: list[str]) -> dict[tuple[str, str], float]:
        return scorer.score([(m, s) for s in ids for m in dict.fromkeys([chosen_of[s], BASELINE, *own])], "test")

    first = interim_n(int(plan.test_n), u.min_samples) if plan is not stored and u.interim_p > 0 else int(plan.test_n)
    values = test(rest[:first])
    if first < int(plan.test_n):
        ids = rest[:first]
        base = np.asarray([values[(chosen_of[s], s)] - values[(BASELINE, s)] for s in ids])
        mine = np.asarray([values[(chosen_of[s], s)] - values[(own[0], s)] for s in ids]) if own else None
        if clear_at_interim(base, mine, u.interim_p):
            plan.test_n, plan.stopped_early = first, True
        else:
            test(rest[first : int(plan.test_n)])
    return plan


def pilot_digest(pilot: dict[tuple[str, str], float]) -> str:
    """A short hash of the pilot's (method, sample, value) triples: what a plan was decided on."""
    import hashlib

    text = json.dumps(sorted((m, s, round(v, 6)) for (m, s), v in pilot.items()))
    return "#pilot:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _champion_leg(scorer: _Scorer, pilot_ids: list[str], rest: list[str], budget: float, u: Any) -> int:
    """The promotion gate's utility leg: the challenger bundle (``cfrag``) against the champion (``cfrag@champion``)
    on a pilot and a test planned from it, within what the task's budget has left (phases "promotion pilot" and
    "promotion"); the test's n."""
    pilot = scorer.score([(m, s) for s in pilot_ids for m in (CHALLENGER, CHAMPION_METHOD)], "promotion pilot")
    diffs = np.asarray([pilot[(CHALLENGER, s)] - pilot[(CHAMPION_METHOD, s)] for s in pilot_ids])
    per_prompt = scorer.seconds / scorer.computed if scorer.computed else 0.0
    paid = affordable(budget - scorer.seconds, 2, per_prompt) if budget > 0 and per_prompt > 0 else len(rest)
    # a difference either way decides (promote or keep): plan for its size
    n = planned_samples(-diffs if np.mean(diffs) < 0 else diffs, u.min_samples, min(len(rest), paid), u.power)
    scorer.score([(m, s) for s in rest[:n] for m in (CHALLENGER, CHAMPION_METHOD)], "promotion")
    return n


def utility_suite(task: str, settings: Settings) -> list:
    """Expectations of llm_utility: keys present and unique, at least one token scored, a log-likelihood <= 0."""
    from prag_models.storage.validation import between, not_null, unique

    return [*not_null("method", "sample_id", "phase", "value", "tokens"), unique("method", "sample_id", "phase"),
            between("tokens", 1, None), between("value", None, 0.0)]  # fmt: skip


def utility_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Every test sample has the baseline's value and the chosen method's, and the values are finite."""
    problems = []
    if not np.isfinite(df["value"].to_numpy(dtype=float)).all():
        problems.append("non-finite utility values")
    test = df[df["phase"] == "test"]
    for sample_id, group in test.groupby("sample_id"):
        if BASELINE not in set(group["method"]) or len(group) < 2:
            problems.append(f"test sample {sample_id} lacks {BASELINE} or the chosen method")
            break
    return problems
