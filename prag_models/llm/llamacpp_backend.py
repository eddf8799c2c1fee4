"""llama.cpp backend (llama-cpp-python): GGUF models in process, the default for the packaged SmolLM2."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prag_models.config import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator
from prag_models.llm.packaged import resolve_generator_model


class LlamaCppGenerator(Generator):
    """Greedy chat completions from a local GGUF file with llama.cpp; prompts run one after another."""

    def __init__(self, settings: GeneratorSettings) -> None:
        path = Path(resolve_generator_model(settings.model, "llama_cpp"))
        if not path.is_file():
            raise GenerationError(
                f"llama_cpp backend needs a local .gguf file; {settings.model!r} resolved to {str(path)!r}, "
                "which does not exist"
            )
        # Busy-waiting OpenMP threads slow llama.cpp 2-4x when the 2 cores are shared with other processes
        # (Dagster steps, tests); read when the OpenMP runtime starts, so it must precede the first llama_cpp import.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise GenerationError(f"llama_cpp backend needs llama-cpp-python: {exc}") from None
        self.settings = settings
        self.model_path = path
        self.model_id = f"llama_cpp:{path.name}"
        try:
            self._llm: Any = Llama(
                model_path=str(path),
                n_ctx=settings.n_ctx,
                n_threads=settings.threads,
                seed=settings.seed,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise GenerationError(f"llama.cpp could not load {path}: {exc}") from None

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """One greedy completion per prompt, each sent as a single user chat message."""
        if self._llm is None:
            raise GenerationError(f"{self.model_id} is closed")
        outputs: list[str] = []
        for prompt in prompts:
            try:
                response = self._llm.create_chat_completion(
                    messages=[{"role": "user", "content": prompt}],
                    max_tokens=max_new_tokens,
                    temperature=0.0,
                    seed=self.settings.seed,
                )
            except ValueError as exc:  # e.g. "Requested tokens (...) exceed context window of ..."
                raise GenerationError(f"{self.model_id}: {exc}") from None
            outputs.append((response["choices"][0]["message"].get("content") or "").strip())
        return outputs

    def _tokens(self, text: str) -> list[int]:
        """Token ids of text without BOS, with the model's own tokenizer."""
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def count_tokens(self, text: str) -> int:
        """Exact number of model tokens in text."""
        return len(self._tokens(text)) if text else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        """Cut text to its first max_tokens model tokens."""
        if max_tokens <= 0:
            return ""
        tokens = self._tokens(text)
        if len(tokens) <= max_tokens:
            return text
        return self._llm.detokenize(tokens[:max_tokens]).decode("utf-8", errors="ignore").strip()

    def close(self) -> None:
        """Free the llama.cpp model and context."""
        llm, self._llm = self._llm, None
        if llm is not None and hasattr(llm, "close"):
            llm.close()
