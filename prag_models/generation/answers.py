"""Personalized LaMP generation: budgeted prompts per (method, sample), cached batched generation, parsed outputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prag_models.config.settings import GeneratorSettings, PromptSettings
from prag_models.data.tasks import LABELS, TASK_KIND
from prag_models.generation.prompts import (
    budget_documents,
    build_prompt,
    content_free_prompts,
    has_profile,
    parse_output,
)
from prag_models.llm.base import GenerationError, Generator, generate_batch
from prag_models.llm.cache import Provenance, cached_outputs

if TYPE_CHECKING:
    import duckdb

ZERO_SHOT = "zero_shot"
LABEL_SCORING = "label_scoring"
GENERATION = "generation"


@dataclass(frozen=True)
class PromptJob:
    """One prompt to generate: which method and sample it belongs to."""

    method: str
    sample_id: str
    prompt: str


def max_new_tokens_for(task: str, settings: GeneratorSettings) -> int:
    """Short answers for label tasks, longer for generation tasks."""
    return settings.max_new_tokens if TASK_KIND[task] == "generation" else settings.label_max_new_tokens


#: Backends that expose log-probabilities, so they can answer label tasks by label scoring.
LABEL_SCORING_BACKENDS = ("llama_cpp", "transformers", "vllm")


def answer_mode(task: str, settings: GeneratorSettings) -> str:
    """How a task's prompts are answered: label scoring for LaMP-1/2/3 when enabled and supported, else generation."""
    if TASK_KIND[task] != "generation" and settings.label_scoring and settings.backend in LABEL_SCORING_BACKENDS:
        return LABEL_SCORING
    return GENERATION


def label_priors(task: str, generator: Generator) -> tuple[list[float], list[float]]:
    """Log-likelihood of each label for the content-free zero-shot and with-profile prompts ("N/A" input)."""
    zero_shot, with_profile = generator.score_choices(content_free_prompts(task), LABELS[task])
    return zero_shot, with_profile


def choose_labels(
    task: str, generator: Generator, prompts: Sequence[str], priors: tuple[list[float], list[float]] | None = None
) -> list[str]:
    """For each prompt, the task label the model finds most likely as its whole answer (ties: first label).

    With priors (label_priors), each label's log-likelihood is first reduced by its content-free log-likelihood for
    the same prompt form, i.e. contextual calibration (Zhao et al., 2021, "Calibrate Before Use"): a small model's
    preference for one label whatever the input (the packaged 135M model answers "1" to nearly every LaMP-3 review)
    no longer hides what the input and the retrieved documents change.
    """
    labels = LABELS[task]
    rows = generator.score_choices(prompts, labels)
    if priors is not None:
        rows = [
            [s - p for s, p in zip(row, priors[1] if has_profile(prompt) else priors[0], strict=True)]
            for row, prompt in zip(rows, prompts, strict=True)
        ]
    return [labels[max(range(len(labels)), key=row.__getitem__)] for row in rows]


def label_scoring_key(generator: Generator, settings: GeneratorSettings) -> str:
    """Cache key of label-scored answers: the model id plus the scoring variant (calibrated or not)."""
    return f"{generator.model_id}#{LABEL_SCORING}" + ("+calibrated" if settings.label_calibration else "")


class LabelChooser:
    """Label scoring of batches of one task's prompts (choose_labels); with calibration the priors are computed once,
    when the first batch comes (a run whose prompts are all cached never scores them)."""

    def __init__(self, task: str, generator: Generator, calibrate: bool) -> None:
        self.task, self.generator, self.calibrate = task, generator, calibrate
        self.priors: tuple[list[float], list[float]] | None = None

    def __call__(self, prompts: list[str]) -> list[str]:
        """The chosen label of each prompt."""
        if self.calibrate and self.priors is None:
            self.generator.forget()  # generator.fresh_batches: priors and batches the same wherever they run
            self.priors = label_priors(self.task, self.generator)
        self.generator.forget()
        return choose_labels(self.task, self.generator, prompts, self.priors)


def answer_key(
    task: str, generator: Generator, settings: GeneratorSettings, max_new_tokens: int | None = None
) -> tuple[str, int]:
    """The generation_cache key of a task's answers: (label_scoring_key, 0) when label-scored, else (model id,
    new-token budget; default the task's budget)."""
    if answer_mode(task, settings) == LABEL_SCORING:
        return label_scoring_key(generator, settings), 0
    return generator.model_id, max_new_tokens_for(task, settings) if max_new_tokens is None else max_new_tokens


def answer_batches(
    task: str, generator: Generator, settings: GeneratorSettings, max_new_tokens: int | None = None
) -> Callable[[list[str]], list[str]]:
    """The one function that answers a batch of a task's prompts (in the run's process or in a Ray actor): label
    scoring (LabelChooser) or greedy generation with the budget of answer_key."""
    if answer_mode(task, settings) == LABEL_SCORING:
        if not generator.can_score_choices:
            raise GenerationError(
                f"{generator.model_id} cannot score labels (no log-probabilities or chat template); "
                "set generator.label_scoring = false to generate and parse instead"
            )
        return LabelChooser(task, generator, settings.label_calibration)
    _, budget = answer_key(task, generator, settings, max_new_tokens)
    return lambda batch: generate_batch(generator, batch, budget)


def answer_cached(
    task: str,
    generator: Generator,
    prompts: list[str],
    settings: GeneratorSettings,
    con: duckdb.DuckDBPyConnection,
    progress: Callable[[int, int], None] | None = None,
    max_new_tokens: int | None = None,
    users: Provenance | None = None,
) -> tuple[list[str], int]:
    """Raw answers to a task's prompts through the DuckDB cache, and how many prompts the model actually ran.

    Label scoring caches the chosen label under label_scoring_key (budget 0); generation caches the
    completion under the model id and its new-token budget (max_new_tokens, default: the task's budget).
    ``users``: whose data each prompt shows (the cache's provenance, what `prag forget` deletes by).
    """
    compute = answer_batches(task, generator, settings, max_new_tokens)
    key, variant = answer_key(task, generator, settings, max_new_tokens)
    return cached_outputs(con, key, variant, prompts, compute, settings.batch_size, progress, users)


def lamp_prompt(task: str, user_input: str, docs: Sequence[str], generator: Generator, p: PromptSettings) -> str:
    """The budgeted LaMP prompt for one sample and its retrieved documents."""
    fitted, fitted_input = budget_documents(
        docs, user_input, generator.count_tokens, generator.truncate, p.max_prompt_tokens, p.query_share
    )
    return build_prompt(task, fitted_input, fitted)


def build_jobs(
    task: str,
    inputs: Mapping[str, str],
    docs_by_method: Mapping[str, Mapping[str, Sequence[str]]],
    generator: Generator,
    prompt_settings: PromptSettings,
    zero_shot: bool = True,
) -> list[PromptJob]:
    """Prompts for every method's retrieved documents of every sample, plus the zero-shot baseline."""
    jobs = []
    if zero_shot:
        jobs += [
            PromptJob(ZERO_SHOT, sid, lamp_prompt(task, text, [], generator, prompt_settings))
            for sid, text in inputs.items()
        ]
    for method, by_sample in docs_by_method.items():
        for sid, text in inputs.items():
            docs = by_sample.get(sid, [])
            jobs.append(PromptJob(method, sid, lamp_prompt(task, text, docs, generator, prompt_settings)))
    return jobs


def run_jobs(
    task: str, jobs: Sequence[PromptJob], answer: Callable[[list[str]], list[str]]
) -> list[tuple[PromptJob, str, str]]:
    """Answer every job's prompt (through the given, usually cached, function) and parse the outputs."""
    outputs = answer([j.prompt for j in jobs])
    return [(job, raw, parse_output(task, raw)) for job, raw in zip(jobs, outputs, strict=True)]
