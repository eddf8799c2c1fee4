"""llama.cpp backend (llama-cpp-python): GGUF models in process, the default for the packaged SmolLM2."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prag_models.config import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator, answer_continuation, log_softmax
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
        self._formatters = self._chat_formatters()
        self.can_score_choices = self._formatters is not None

    def _chat_formatters(self) -> tuple[Any, Any] | None:
        """(prompt-up-to-assistant, whole-conversation) renderers of the GGUF's chat template, if it has one."""
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            return None
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        def token_text(token_id: int) -> str:
            return self._llm._model.token_get_text(token_id) if token_id != -1 else ""

        eos, bos = token_text(self._llm.token_eos()), token_text(self._llm.token_bos())
        return (
            Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=True),
            Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=False),
        )

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

    def score_choices(self, prompts: Sequence[str], choices: Sequence[str]) -> list[list[float]]:
        """Log-likelihood of each choice as the whole assistant answer (its end-of-turn marker included).

        The prompt is evaluated once; each choice then reuses that KV-cache prefix and costs one decode step per
        token of the choice.
        """
        import numpy as np

        if self._llm is None or self._formatters is None:
            raise GenerationError(f"{self.model_id} cannot score choices (closed, or the GGUF has no chat template)")
        with_prompt, whole = self._formatters
        n_vocab = self._llm.n_vocab()
        rows: list[list[float]] = []
        for prompt in prompts:
            user = [{"role": "user", "content": prompt}]
            prefix = with_prompt(messages=user).prompt
            base = self._special_tokens(prefix)
            answers = [
                self._special_tokens(
                    answer_continuation(prefix, whole(messages=[*user, {"role": "assistant", "content": c}]).prompt, c)
                )
                for c in choices
            ]
            needed = len(base) + max(len(a) for a in answers)
            if needed > self.settings.n_ctx:
                raise GenerationError(f"{self.model_id}: {needed} tokens to score exceed n_ctx={self.settings.n_ctx}")
            self._llm.reset()
            self._llm.eval(base)
            after_prompt = self._last_log_probs(np, n_vocab)
            row = []
            for answer in answers:
                self._llm.n_tokens = len(base)  # drop the previous choice, keep the prompt's KV cache
                log_probs, total = after_prompt, 0.0
                for i, token in enumerate(answer):
                    total += float(log_probs[token])
                    if i + 1 < len(answer):
                        self._llm.eval([token])
                        log_probs = self._last_log_probs(np, n_vocab)
                row.append(total)
            rows.append(row)
        return rows

    def _last_log_probs(self, np: Any, n_vocab: int) -> Any:
        """Log-probabilities of the next token after the last evaluated one."""
        logits = np.ctypeslib.as_array(self._llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
        return log_softmax(logits.astype(np.float64))

    def _special_tokens(self, text: str) -> list[int]:
        """Token ids of rendered chat text, its special markers parsed as control tokens."""
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

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
