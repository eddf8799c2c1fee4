"""CFRAG LLM feedback labels (docs/methods.md §2.5): prompt version, token budget, the signal (gold log-likelihood or
the task metric of the answer), its range, and degenerate samples."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.tasks import TASK_KIND
from prag_models.generation.answers import LABEL_SCORING, answer_mode, max_new_tokens_for
from prag_models.generation.prompts import PROMPT_VERSION, parse_output
from prag_models.metrics.lamp import sample_quality

#: Gold log-likelihood prompts scored per batch (one scored continuation each).
GOLD_BATCH = 8


def feedback_max_new_tokens(task: str, settings: Settings) -> int:
    """New-token budget of a feedback generation: the task's generation budget, capped by the CFRAG setting."""
    return min(settings.cfrag.feedback_max_new_tokens, max_new_tokens_for(task, settings.generator))


def feedback_prompt_version(task: str, settings: Settings) -> str:
    """The prompt part of the feedback-label key: prompt text version, CFRAG version, token budget or label scoring,
    and the teacher signal (gold log-likelihood labels never mix with metric labels)."""
    p = settings.prompt
    if settings.cfrag.feedback_signal == "gold_loglik":
        answer = "gll"
    elif settings.cfrag.feedback_signal == "oracle":  # the teacher's noise and seed decide its labels
        answer = f"or{settings.cfrag.teacher_noise:g}s{settings.cfrag.seed}"
    elif answer_mode(task, settings.generator) == LABEL_SCORING:
        answer = "lsc" if settings.generator.label_calibration else "ls"
    else:
        answer = f"n{feedback_max_new_tokens(task, settings)}"
    return f"{PROMPT_VERSION}.{settings.cfrag.prompt_version}.L{p.max_prompt_tokens}.g{p.query_share}.{answer}"


def score_range(task: str, signal: str = "metric") -> tuple[float, float]:
    """Range of a feedback score: accuracy / ROUGE-1 in [0, 1], negated absolute rating error in [-4, 0]; a gold
    log-likelihood in (-inf, 0]; an oracle label in [0, 1]."""
    if signal == "gold_loglik":
        return (-math.inf, 0.0)
    if signal == "oracle":
        return (0.0, 1.0)
    return (-4.0, 0.0) if TASK_KIND[task] == "rating" else (0.0, 1.0)


def gold_loglik_scores(generator: Any, prompts: Sequence[str], golds: Sequence[str]) -> list[float]:
    """The generator's log-probability of each gold output as the whole answer to its prompt (sum over tokens: the
    gold is the same for every candidate of a sample, so its length does not change how candidates compare)."""
    if not getattr(generator, "can_score_choices", False):
        raise ValueError(
            f"{generator.model_id} cannot score a given answer (no log-probabilities): "
            "set cfrag.feedback_signal = 'metric'"
        )
    return [float(generator.score_choices([p], [g])[0][0]) for p, g in zip(prompts, golds, strict=True)]


def score_outputs(task: str, outputs: Sequence[str], golds: Sequence[str]) -> list[float]:
    """Feedback score of each raw output against its gold: ``sample_quality`` of the parsed prediction (§2.5)."""
    # + 0.0 turns the -0.0 of a negated zero error into 0.0
    return [sample_quality(task, parse_output(task, o), g) + 0.0 for o, g in zip(outputs, golds, strict=True)]


def degenerate_samples(labels: pd.DataFrame) -> tuple[int, int]:
    """(samples whose candidates all scored the same, samples) of a feedback-label frame (sample_id, score)."""
    if labels.empty:
        return 0, 0
    spread = labels.groupby("sample_id")["score"].agg(lambda s: float(s.max() - s.min()))
    return int((spread <= 1e-12).sum()), len(spread)


#: Separates a feedback prompt from its gold in the gold log-likelihood cache's prompt text (a NUL never occurs in one).
GOLD_SEPARATOR = "\n\u0000gold: "


def gold_loglik_key(generator: Any) -> str:
    """The generation_cache key id of gold log-likelihood labels."""
    return f"{generator.model_id}#gold_loglik"


def gold_prompts(prompts: Sequence[str], golds: Sequence[str]) -> list[str]:
    """The cached text of each (prompt, gold) pair: the prompt, the separator, the gold."""
    return [f"{p}{GOLD_SEPARATOR}{g}" for p, g in zip(prompts, golds, strict=True)]


def gold_loglik_batch(generator: Any, keyed: Sequence[str]) -> list[str]:
    """The one function scoring a batch of gold_prompts texts (in the run's process or in a Ray actor): each gold's
    log-probability as the cached text (repr of the float)."""
    pairs = [k.partition(GOLD_SEPARATOR)[::2] for k in keyed]
    if hasattr(generator, "forget"):
        generator.forget()  # generator.fresh_batches: the batch's scores then depend on the batch alone
    return [repr(v) for v in gold_loglik_scores(generator, [p for p, _ in pairs], [g for _, g in pairs])]


def feedback_scores(
    task: str,
    generator: Any,
    prompts: Sequence[str],
    golds: Sequence[str],
    settings: Settings,
    con: Any,
    max_new_tokens: int,
    users: Sequence[Sequence[str]] | None = None,
) -> tuple[list[float], list[str], int]:
    """(score, output, model calls) of each feedback prompt, through the DuckDB caches (§2.5).

    ``gold_loglik``: the gold's log-probability (output = the gold); ``metric``: the task metric of the answer.
    ``users``: whose data each prompt and gold show (the caches' provenance).
    """
    from prag_models.generation.answers import answer_cached
    from prag_models.llm.cache import cached_outputs

    if settings.cfrag.feedback_signal == "gold_loglik":
        keyed = gold_prompts(prompts, golds)
        compute = partial(gold_loglik_batch, generator)
        raw, ran = cached_outputs(con, gold_loglik_key(generator), 0, keyed, compute, GOLD_BATCH, users=users)
        return [float(v) for v in raw], list(golds), ran
    outputs, ran = answer_cached(task, generator, list(prompts), settings.generator, con, None, max_new_tokens,
                                 users)  # fmt: skip
    return score_outputs(task, outputs, golds), outputs, ran
