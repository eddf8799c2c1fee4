"""The one LLM interface every backend implements (llama.cpp, transformers, OpenAI-compatible HTTP, vLLM)."""

from __future__ import annotations

import abc
import re
from collections.abc import Sequence

import numpy as np


class GenerationError(RuntimeError):
    """The backend could not produce an output (bad model path, unreachable server, ...)."""


class Generator(abc.ABC):
    """Greedy chat generation for a batch of single-turn user prompts."""

    #: Stable id of backend + model, part of every cache key (e.g. "llama_cpp:SmolLM2-135M-Instruct.Q4_1.gguf").
    model_id: str

    @abc.abstractmethod
    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Return one greedy completion per prompt, each sent as a single user chat message."""

    #: True when score_choices is implemented (log-likelihoods from the model); else callers generate and parse.
    can_score_choices: bool = False

    def score_choices(self, prompts: Sequence[str], choices: Sequence[str]) -> list[list[float]]:
        """Log-likelihood of each choice as the complete assistant answer to each prompt (one row per prompt)."""
        raise NotImplementedError(f"{type(self).__name__} cannot score choices; generate and parse instead")

    def score_answers(self, prompts: Sequence[str], answers: Sequence[str]) -> list[tuple[float, int]]:
        """(log-likelihood, token count) of each answer as the complete assistant reply to its prompt: the LLM's
        utility of what the prompt holds for producing that answer (one forward pass, no generation)."""
        if len(prompts) != len(answers):
            raise ValueError(f"{len(prompts)} prompts for {len(answers)} answers")
        pairs = zip(prompts, answers, strict=True)
        return [(self.score_choices([p], [a])[0][0], max(1, self.count_tokens(a))) for p, a in pairs]

    def _tokens(self, text: str) -> list:
        """The tokens of text: the model's own token ids where a backend has its tokenizer, else word-like pieces."""
        return _approx_tokens(text)

    def _detokenize(self, tokens: list) -> str:
        """Text of a prefix of ``_tokens``' result."""
        return "".join(tokens)

    def count_tokens(self, text: str) -> int:
        """Number of tokens of text (approximate for backends without a local tokenizer)."""
        return len(self._tokens(text)) if text else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        """Cut text to at most max_tokens tokens."""
        if max_tokens <= 0:
            return ""
        tokens = self._tokens(text)
        if len(tokens) <= max_tokens:
            return text
        return self._detokenize(tokens[:max_tokens]).strip()

    def forget(self) -> None:  # noqa: B027 - optional hook
        """Drop what the backend keeps from earlier prompts when the settings ask for it (llama.cpp's KV cache with
        generator.fresh_batches: its reused prefix changes the logits slightly), so that a batch computes the same
        whatever ran before it and wherever it runs."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model or connection."""


def generate_batch(generator: Generator, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
    """The one function generating a batch of prompts (in the run's process or in a Ray actor): from a fresh state."""
    generator.forget()
    return generator.generate(prompts, max_new_tokens)


_TOKEN_RE = re.compile(r"\s*\w+|\s*[^\w\s]")


def _approx_tokens(text: str) -> list[str]:
    """Word/punctuation pieces: a tokenizer-free stand-in close to BPE counts for English."""
    return _TOKEN_RE.findall(text)


def answer_continuation(prefix: str, full: str, choice: str) -> str:
    """The text a chat template appends for an assistant answer: full minus the generation prefix.

    prefix is the conversation rendered up to the assistant's turn, full the same conversation with choice as the
    assistant's message; the difference is the answer plus the template's end-of-turn marker.
    """
    if not full.startswith(prefix):
        raise GenerationError(
            f"the chat template renders the answer {choice!r} so that the prompt is not a prefix of it; "
            "label scoring needs a prefix-stable template (set generator.label_scoring = false)"
        )
    return full[len(prefix) :].rstrip()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable log-softmax of a logit vector."""
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def usable_cores(threads: int = 0) -> int:
    """``threads`` when set (> 0), else the cores this process may run on (its CPU affinity, e.g. under taskset)."""
    import os

    if threads > 0:
        return threads
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
