"""The one LLM interface every backend implements (llama.cpp, transformers, OpenAI-compatible HTTP, vLLM)."""

from __future__ import annotations

import abc
import re
from collections.abc import Sequence


class GenerationError(RuntimeError):
    """The backend could not produce an output (bad model path, unreachable server, ...)."""


class Generator(abc.ABC):
    """Greedy chat generation for a batch of single-turn user prompts."""

    #: Stable id of backend + model, part of every cache key (e.g. "llama_cpp:SmolLM2-135M-Instruct.Q4_1.gguf").
    model_id: str

    @abc.abstractmethod
    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Return one greedy completion per prompt, each sent as a single user chat message."""

    def count_tokens(self, text: str) -> int:
        """Number of tokens of text (approximate for backends without a local tokenizer)."""
        return len(_approx_tokens(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """Cut text to at most max_tokens tokens."""
        if max_tokens <= 0:
            return ""
        tokens = _approx_tokens(text)
        if len(tokens) <= max_tokens:
            return text
        return "".join(tokens[:max_tokens]).strip()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model or connection."""


_TOKEN_RE = re.compile(r"\s*\w+|\s*[^\w\s]")


def _approx_tokens(text: str) -> list[str]:
    """Word/punctuation pieces: a tokenizer-free stand-in close to BPE counts for English."""
    return _TOKEN_RE.findall(text)
