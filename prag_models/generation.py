"""Personalized LaMP generation: budgeted prompts per (method, sample), cached batched generation, parsed outputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from prag_models.config import GeneratorSettings, PromptSettings
from prag_models.data.tasks import TASK_KIND
from prag_models.llm.base import Generator
from prag_models.prompts import budget_documents, build_prompt, parse_output

ZERO_SHOT = "zero_shot"


@dataclass(frozen=True)
class PromptJob:
    """One prompt to generate: which method and sample it belongs to."""

    method: str
    sample_id: str
    prompt: str


def max_new_tokens_for(task: str, settings: GeneratorSettings) -> int:
    """Short answers for label tasks, longer for generation tasks."""
    return settings.max_new_tokens if TASK_KIND[task] == "generation" else settings.label_max_new_tokens


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
    task: str,
    jobs: Sequence[PromptJob],
    generate: Callable[[list[str], int], list[str]],
    max_new_tokens: int,
) -> list[tuple[PromptJob, str, str]]:
    """Generate every job's prompt (through the given, usually cached, function) and parse the outputs."""
    outputs = generate([j.prompt for j in jobs], max_new_tokens)
    return [(job, raw, parse_output(task, raw)) for job, raw in zip(jobs, outputs, strict=True)]
