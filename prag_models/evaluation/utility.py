"""The LLM's utility of retrieved documents: a label-free measure of retrieval (docs/methods.md §6.7).

For a sample and a method, the utility is the mean log-likelihood per token of the sample's gold output, as the
generator's whole answer to the LaMP prompt built from the method's retrieved documents: one forward pass, no
generation, a continuous value. It is what CFRAG's feedback computes per document and what LM-supervised retrieval
(REPLUG, Atlas) calls a document's usefulness. Two methods are compared by the paired difference on the same samples
(nats per token), which needs far fewer samples than accuracy or ROUGE of generated outputs to decide.

Values are cached in ``generation_cache`` under ``<model id>#utility`` keyed by the prompt and the answer, so a
prompt two methods share (or a rerun) is scored once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.tasks import TASK_KIND
from prag_models.llm.cache import Provenance, cached_outputs
from prag_models.metrics.intervals import planned_samples as planned_samples  # re-exported
from prag_models.storage.store import table_exists

if TYPE_CHECKING:
    from prag_models.llm.base import Generator

UTILITY_TABLE = "llm_utility"
PLAN_TABLE = "llm_utility_plans"
UTILITY_METRIC = "utility"  # nats per gold token (higher is better)
#: A plan's evidence when the run's budget could not pay the task's test and the cache did not hold it (issue 47)
DEFERRED = "deferred"
PLAN_VERSION = "v4"  # v4: the interim look halfway; v3: one interim look; v2: whole tests funded, planned_n first
#: generation_cache key suffix of utility values; bump the version when the scored text changes
UTILITY_KEY = "#utility-v2"
_JSON_KEY = {"LaMP-4": "title", "LaMP-5": "title", "LaMP-7": "tweet"}
_SEPARATOR = "\n\x1f\x1fgold answer\x1f\x1f\n"


def gold_answer(task: str, gold: str) -> str:
    """The gold output written as the LaMP prompt asks the answer to be written (JSON for LaMP-4/5/7)."""
    gold = str(gold).strip()
    if TASK_KIND.get(task) == "generation" and task in _JSON_KEY:
        return json.dumps({_JSON_KEY[task]: gold}, ensure_ascii=False)
    return gold


def can_score(generator: Generator) -> bool:
    """Whether the generator exposes log-likelihoods (llama.cpp, transformers, vLLM, the fake): utility needs them."""
    return bool(getattr(generator, "can_score_choices", False))


def _encode(loglik: float, tokens: int) -> str:
    return f"{loglik!r} {tokens}"


def _decode(text: str) -> tuple[float, int]:
    loglik, tokens = text.split()
    return float(loglik), int(tokens)


def utility_values(
    con,
    generator: Generator,
    prompts: Sequence[str],
    answers: Sequence[str],
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
    cache_only: bool = False,
    users: Provenance | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(log-likelihood, tokens) of each answer after its prompt through the cache, and how many were computed; with
    cache_only a prompt the cache lacks raises LookupError before any LLM call. ``users``: whose data each prompt
    and answer show (the cache's provenance)."""
    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts for {len(answers)} answers")
    keyed = [f"{p}{_SEPARATOR}{a}" for p, a in zip(prompts, answers, strict=True)]

    def compute(batch: list[str]) -> list[str]:
        if cache_only:
            raise LookupError(f"{len(batch)} utility prompts are not cached")
        pairs = [k.split(_SEPARATOR, 1) for k in batch]
        generator.forget()
        scored = generator.score_answers([p for p, _ in pairs], [a for _, a in pairs])
        return [_encode(loglik, tokens) for loglik, tokens in scored]

    outputs, ran = cached_outputs(con, generator.model_id + UTILITY_KEY, 0, keyed, compute, batch_size, progress, users)
    decoded = [_decode(o) for o in outputs]
    logliks = np.asarray([d[0] for d in decoded], dtype=np.float64)
    tokens = np.asarray([d[1] for d in decoded], dtype=np.int64)
    return logliks, tokens, ran


def per_token(logliks: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Mean log-likelihood per token (the utility value)."""
    return np.asarray(logliks, dtype=np.float64) / np.maximum(np.asarray(tokens, dtype=np.float64), 1.0)


def interim_n(test_n: int, min_samples: int) -> int:
    """Where a test of ``test_n`` samples looks once (utility.interim_p): halfway, never before min_samples; test_n
    itself (no look) when that leaves nothing after the look."""
    return min(test_n, max(min_samples, math.ceil(test_n / 2)))


def clear_at_interim(base: np.ndarray, own: np.ndarray | None, interim_p: float) -> bool:
    """Whether the interim look stops the test (utility.interim_p): the paired gain over dense_global below
    interim_p either way, and where it is up and the own profile is compared, the gain over it too."""
    from prag_models.metrics.intervals import paired_p_value

    if interim_p <= 0 or len(base) < 2 or paired_p_value(base) >= interim_p:
        return False
    if float(np.mean(base)) < 0 or own is None:
        return True
    return float(np.mean(own)) > 0 and paired_p_value(own) < interim_p


def affordable(seconds: float, prompts_per_sample: int, seconds_per_prompt: float) -> int:
    """How many samples of ``prompts_per_sample`` prompts fit ``seconds``."""
    cost = prompts_per_sample * max(seconds_per_prompt, 1e-6)
    return int(math.floor(max(seconds, 0.0) / cost)) if cost > 0 else 0


#: Label-hit sees a task's retrieval only where documents carry labels from a closed set; LaMP-1's label is a paper
#: title, which another paper's reference rarely matches, so without relevance labels LaMP-1 is decided by utility.
LABEL_HIT_SEES = ("LaMP-2", "LaMP-3")


def labelled_choice(con, task: str) -> tuple[str, Any] | None:
    """(metric, cross-fitted choice) of the retrieval evaluation where its labels can see the task, else None."""
    from prag_models.evaluation.claims import cross_fit, retrieval_scores

    for scored_task, metric, scores in retrieval_scores(con):
        if scored_task != task or scores.empty:
            continue
        if not metric.startswith("ndcg") and task not in LABEL_HIT_SEES:
            return None
        if scores["value"].isna().all():
            return None
        crossed = cross_fit(scores.dropna(subset=["value"]), True)
        return (metric, crossed) if crossed is not None else None
    return None


def utility_scores(con, task: str, phase: str = "test") -> pd.DataFrame:
    """Per-sample utility values (method, sample_id, value) of a task's test (or pilot) phase."""
    if not table_exists(con, UTILITY_TABLE):
        return pd.DataFrame(columns=["method", "sample_id", "value"])
    return con.execute(
        f"SELECT method, sample_id, value FROM {UTILITY_TABLE} WHERE task = ? AND phase = ?", [task, phase]
    ).df()


def utility_plan(con, task: str) -> dict[str, Any] | None:
    """The stored plan row of a task, else None."""
    if not table_exists(con, PLAN_TABLE):
        return None
    rows = con.execute(f"SELECT * FROM {PLAN_TABLE} WHERE task = ?", [task]).df()
    return None if rows.empty else rows.iloc[0].to_dict()


def plan_key(settings: Settings, generator_id: str) -> str:
    """What a stored plan depends on: the utility settings, generator, prompt and the retrieval settings (not the
    budget: a plan the budget cut is planned again by a run with more seconds, utility_rows)."""
    parts = [PLAN_VERSION, settings.utility.model_dump(mode="json"), generator_id,
             settings.prompt.model_dump(mode="json"), settings.retrieval.k, list(settings.data.tasks)]  # fmt: skip
    return json.dumps(parts, sort_keys=True)
