"""transformers backend: any HF id or local folder, or a GGUF file (dequantised on load), greedy batched generation."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prag_models.config.settings import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator, answer_continuation
from prag_models.llm.packaged import resolve_generator_model, split_gguf
from prag_models.text.loading import quiet_loading


class TransformersGenerator(Generator):
    """Greedy chat generation with transformers: chat template, left padding, batches of settings.batch_size."""

    can_score_choices = True

    def __init__(self, settings: GeneratorSettings) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            import torch
            import transformers
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise GenerationError(f"transformers backend needs torch and transformers: {exc}") from None
        transformers.utils.logging.disable_progress_bar()
        self.settings = settings
        resolved = resolve_generator_model(settings.model, "transformers")
        source, gguf_file = split_gguf(resolved)
        name = gguf_file or (Path(source).name if Path(source).exists() else source)
        self.model_id = f"transformers:{name}"
        kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
        if settings.threads > 0:
            torch.set_num_threads(settings.threads)
        torch.manual_seed(settings.seed)
        self._device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            with quiet_loading():
                self._tokenizer: Any = AutoTokenizer.from_pretrained(source, **kwargs)
                self._model: Any = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        except (OSError, ValueError) as exc:
            raise GenerationError(
                f"transformers could not load {settings.model!r} (from {resolved!r}): {exc}"
            ) from None
        self._model.to(self._device).eval()
        self._tokenizer.padding_side = "left"
        if self._tokenizer.pad_token_id is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        if not getattr(self._tokenizer, "chat_template", None):
            raise GenerationError(f"{settings.model!r} has no chat template; use an instruction-tuned model")

    def _chat_text(self, prompt: str) -> str:
        """The prompt wrapped in the model's chat template, ready for the assistant's turn."""
        return self._tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """One greedy completion per prompt, generated in left-padded batches."""
        import torch

        if self._model is None:
            raise GenerationError(f"{self.model_id} is closed")
        batch_size = max(1, self.settings.batch_size)
        outputs: list[str] = []
        for start in range(0, len(prompts), batch_size):
            texts = [self._chat_text(p) for p in prompts[start : start + batch_size]]
            enc = self._tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(self._device) for k, v in enc.items()}
            length = enc["input_ids"].shape[1]
            if length + max_new_tokens > self.settings.n_ctx:
                raise GenerationError(
                    f"{self.model_id}: prompt of {length} tokens + {max_new_tokens} new tokens exceeds "
                    f"n_ctx={self.settings.n_ctx}"
                )
            with torch.inference_mode():
                out = self._model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=self._tokenizer.pad_token_id,
                )
            new_tokens = out[:, length:]
            outputs.extend(t.strip() for t in self._tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
        return outputs

    def score_choices(self, prompts: Sequence[str], choices: Sequence[str]) -> list[list[float]]:
        """Log-likelihood of each choice as the whole assistant answer; the prompt's KV cache is shared by choices."""
        import torch

        if self._model is None:
            raise GenerationError(f"{self.model_id} is closed")
        rows: list[list[float]] = []
        for prompt in prompts:
            prefix = self._chat_text(prompt)
            base = self._tokenizer(prefix, add_special_tokens=False)["input_ids"]
            answers = [self._tokens(self._answer_text(prompt, prefix, c)) for c in choices]
            if len(base) + max(len(a) for a in answers) > self.settings.n_ctx:
                raise GenerationError(f"{self.model_id}: prompt + choice exceed n_ctx={self.settings.n_ctx}")
            with torch.inference_mode():
                out = self._model(input_ids=torch.tensor([base], device=self._device), use_cache=True)
                cache, after_prompt = out.past_key_values, torch.log_softmax(out.logits[0, -1].double(), -1)
                row = []
                for answer in answers:
                    total = float(after_prompt[answer[0]])
                    if len(answer) > 1:
                        step = self._model(
                            input_ids=torch.tensor([answer[:-1]], device=self._device),
                            past_key_values=cache,
                            use_cache=True,
                        )
                        log_probs = torch.log_softmax(step.logits[0].double(), -1)
                        total += float(log_probs[torch.arange(len(answer) - 1), torch.tensor(answer[1:])].sum())
                        cache.crop(-(len(answer) - 1))  # negative: drop this choice, keep the prompt
                    row.append(total)
            rows.append(row)
        return rows

    def _answer_text(self, prompt: str, prefix: str, choice: str) -> str:
        """What the chat template appends when the assistant answers choice (answer + end-of-turn marker)."""
        full = self._tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": choice}], tokenize=False
        )
        return answer_continuation(prefix, full, choice)

    def _tokens(self, text: str) -> list[int]:
        """Token ids of text without special tokens."""
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def _detokenize(self, tokens: list) -> str:
        """Text of a prefix of the token ids."""
        return self._tokenizer.decode(tokens, skip_special_tokens=True)

    def close(self) -> None:
        """Drop the model so its memory can be freed."""
        self._model = None
