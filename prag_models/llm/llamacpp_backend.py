"""llama.cpp backend (llama-cpp-python): GGUF models in process, the default for the packaged SmolLM2."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prag_models.config.settings import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator, answer_continuation, log_softmax, usable_cores
from prag_models.llm.gguf_weights import AS_IS, converted_gguf, resolve_weight_type
from prag_models.llm.packaged import resolve_generator_model

#: llama.cpp's CPU flash attention takes another kernel for a compute step of fewer than 64 tokens (and its tiles
#: group the KV cache by 64 cells); the kernels round differently, by up to ~0.2 nats a scored answer with bf16
#: weights. score_answers gives every step at least this many tokens (padding after the sequence, which no scored
#: position sees), so that its scores are one pass over the sequence whatever was cached before.
MIN_STEP_TOKENS = 64


class LlamaCppGenerator(Generator):
    """Greedy chat completions from a local GGUF file with llama.cpp; prompts run one after another."""

    def __init__(self, settings: GeneratorSettings) -> None:
        path = Path(resolve_generator_model(settings.model, "llama_cpp"))
        if not path.is_file():
            raise GenerationError(
                f"llama_cpp backend needs a local .gguf file; {settings.model!r} resolved to {str(path)!r}, "
                "which does not exist"
            )
        # OMP_WAIT_POLICY=PASSIVE would make OpenMP threads sleep between the many tiny matmuls of a 135M model:
        # about 1.5-1.6x slower on an idle machine (benchmarks/llama_cpp_weights.py), so the default policy is kept.
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise GenerationError(f"llama_cpp backend needs llama-cpp-python: {exc}") from None
        self.settings = settings
        self.weight_type = resolve_weight_type(settings.llama_cpp_weights)
        self.model_path = converted_gguf(path, self.weight_type)
        self.model_id = f"llama_cpp:{path.name}" + ("" if self.weight_type == AS_IS else f"@{self.weight_type}")
        try:
            self._llm: Any = Llama(
                model_path=str(self.model_path),
                n_ctx=settings.n_ctx,
                n_threads=usable_cores(settings.threads),
                # llama-cpp-python's default is every core, whatever threads says
                n_threads_batch=usable_cores(settings.threads),
                seed=settings.seed,
                flash_attn=settings.flash_attention,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise GenerationError(f"llama.cpp could not load {path}: {exc}") from None
        self._formatters = self._chat_formatters()
        self._scored: list[int] = []  # the sequence score_answers left in the KV cache (cells = positions)
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
        self._scored = []  # generation rewrites the KV cache
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

    def forget(self) -> None:
        """With generator.fresh_batches, forget the evaluated tokens: the next prompt reuses no cached prefix.

        score_answers keeps its prefix: what it reuses is the same bits as a fresh evaluation (tests/
        test_answer_scoring.py), so reusing it changes no score."""
        if self._llm is not None and self.settings.fresh_batches:
            self._llm.reset()

    def score_choices(self, prompts: Sequence[str], choices: Sequence[str]) -> list[list[float]]:
        """Log-likelihood of each choice as the whole assistant answer (its end-of-turn marker included).

        The prompt is evaluated once; each choice then reuses that KV-cache prefix and costs one decode of its
        tokens (all positions' logits at once).
        """
        return [[total for total, _ in self._score(prompt, choices)] for prompt in prompts]

    def score_answers(self, prompts: Sequence[str], answers: Sequence[str]) -> list[tuple[float, int]]:
        """(log-likelihood, tokens scored) of each answer as the whole assistant reply to its prompt.

        Prompt and answer are one sequence, evaluated in one pass with logits only where an answer token is
        predicted; the prefix it shares with the sequence scored before is reused from the KV cache. A score is the
        same bits in any batch and any order, and equals one pass over the sequence from an empty cache.
        """
        if len(prompts) != len(answers):
            raise ValueError(f"{len(prompts)} prompts for {len(answers)} answers")
        out = []
        for prompt, answer in zip(prompts, answers, strict=True):
            base, (tokens,) = self._chat_tokens(prompt, [answer])
            out.append((self._one_pass_log_prob(base + tokens, len(base)), len(tokens)))
        return out

    def _one_pass_log_prob(self, sequence: list[int], start: int) -> float:
        """Sum of log P(sequence[p] | sequence[:p]) over p >= start, as one pass over the sequence.

        The KV cells of the prefix shared with the previously scored sequence are kept (cell = position, so the
        attention groups cells as a fresh pass does); the rest is decoded in steps of n_ubatch tokens, the last
        padded to at least MIN_STEP_TOKENS, so that every token runs on the kernels of a fresh pass.
        """
        import numpy as np

        llm = self._llm
        step = llm.context_params.n_ubatch
        reuse = 0
        limit = min(start - 1, len(self._scored))  # the position before the answer must be evaluated for its logits
        while reuse < limit and self._scored[reuse] == sequence[reuse]:
            reuse += 1
        todo = sequence[reuse:]
        tail = len(todo) % step
        todo += [llm.token_eos()] * (MIN_STEP_TOKENS - tail if 0 < tail < MIN_STEP_TOKENS else 0)
        if reuse + len(todo) > self.settings.n_ctx:
            raise GenerationError(f"{self.model_id}: {len(sequence)} tokens to score (+ padding to a full compute "
                                  f"step) exceed n_ctx={self.settings.n_ctx}")  # fmt: skip
        self._scored = []
        llm._ctx.kv_cache_seq_rm(-1, reuse, -1)
        batch, n_vocab, total = llm._batch.batch, llm.n_vocab(), 0.0
        for first in range(reuse, reuse + len(todo), step):
            positions = range(first, min(first + step, reuse + len(todo)))
            targets = []
            for i, pos in enumerate(positions):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = todo[pos - reuse], pos, 1, 0
                batch.logits[i] = start - 1 <= pos < len(sequence) - 1
                if batch.logits[i]:
                    targets.append(sequence[pos + 1])
            batch.n_tokens = len(positions)
            if llama_decode_failed(llm, batch):
                raise GenerationError(f"{self.model_id}: llama_decode failed on {len(positions)} tokens")
            if targets:
                logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(len(targets), n_vocab))
                total += float(target_log_probs(np, logits, targets).sum())
        llm.input_ids[: len(sequence)] = sequence  # the generation context's bookkeeping: these cells are valid
        llm.n_tokens = len(sequence)
        self._scored = sequence
        return total

    def _score(self, prompt: str, choices: Sequence[str]) -> list[tuple[float, int]]:
        """(log-likelihood, token count) of each choice after one evaluation of the prompt."""
        import numpy as np

        self._scored = []  # the prefix reuse below may rewrite the KV cache from a few tokens on
        base, answers = self._chat_tokens(prompt, choices)
        needed = len(base) + max(len(a) for a in answers)
        if needed > self.settings.n_ctx:
            raise GenerationError(f"{self.model_id}: {needed} tokens to score exceed n_ctx={self.settings.n_ctx}")
        self._eval_reusing_prefix(base)
        after_prompt = log_softmax(self._logits(np, 1)[0])
        return [(float(after_prompt[a[0]]) + self._continuation_log_prob(np, len(base), a), len(a)) for a in answers]

    def _chat_tokens(self, prompt: str, answers: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """Token ids of the chat-templated prompt (up to the assistant's turn) and of each answer's continuation
        (the answer and the template's end-of-turn marker)."""
        if self._llm is None or self._formatters is None:
            raise GenerationError(f"{self.model_id} cannot score choices (closed, or the GGUF has no chat template)")
        with_prompt, whole = self._formatters
        user = [{"role": "user", "content": prompt}]
        prefix = with_prompt(messages=user).prompt
        continuations = [
            answer_continuation(prefix, whole(messages=[*user, {"role": "assistant", "content": a}]).prompt, a)
            for a in answers
        ]
        return self._special_tokens(prefix), [self._special_tokens(c) for c in continuations]

    def _eval_reusing_prefix(self, tokens: list[int]) -> None:
        """Evaluate tokens, keeping the KV cache of the longest prefix they share with the last evaluated tokens.

        Chat prompts share the template's system turn and often their first retrieved documents.
        """
        llm = self._llm
        # Re-evaluate at least 2 tokens: llama.cpp computes a 1-token batch on another kernel path, whose logits
        # differ from a full evaluation's with bf16/f16 weights (tests/test_gguf_weights.py)
        limit = min(llm.n_tokens, len(tokens) - 2)
        same = 0
        while same < limit and llm.input_ids[same] == tokens[same]:
            same += 1
        llm.n_tokens = same  # eval() drops the KV cache from here on
        llm.eval(tokens[same:])

    def _continuation_log_prob(self, np: Any, n_prompt: int, answer: list[int]) -> float:
        """Sum of log P(answer[i+1] | prompt, answer[..i]) from one decode of the answer after the cached prompt.

        The whole answer is decoded (its last position's logits unused) so that every choice, even one of two
        tokens, takes the same multi-token kernel path as the prompt.
        """
        if len(answer) < 2:
            return 0.0
        self._llm._ctx.kv_cache_seq_rm(-1, n_prompt, -1)  # drop the previous choice, keep the prompt's KV cache
        batch = self._llm._batch
        batch.set_batch(batch=answer, n_past=n_prompt, logits_all=True)
        self._llm._ctx.decode(batch)
        logits = self._logits(np, len(answer))[:-1]
        return float(sum(log_softmax(row)[token] for row, token in zip(logits, answer[1:], strict=True)))

    def _logits(self, np: Any, rows: int) -> Any:
        """The logits of the last decode's output positions (rows x vocabulary), as float64."""
        n_vocab = self._llm.n_vocab()
        pointer = self._llm._ctx.get_logits_ith(-1) if rows == 1 else self._llm._ctx.get_logits()
        return np.ctypeslib.as_array(pointer, shape=(rows, n_vocab)).astype(np.float64)

    def _special_tokens(self, text: str) -> list[int]:
        """Token ids of rendered chat text, its special markers parsed as control tokens."""
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _tokens(self, text: str) -> list[int]:
        """Token ids of text without BOS, with the model's own tokenizer."""
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def _detokenize(self, tokens: list) -> str:
        """Text of a prefix of the token ids."""
        return self._llm.detokenize(tokens).decode("utf-8", errors="ignore")

    def close(self) -> None:
        """Free the llama.cpp model and context."""
        llm, self._llm = self._llm, None
        if llm is not None and hasattr(llm, "close"):
            llm.close()


def llama_decode_failed(llm: Any, batch: Any) -> bool:
    """One llama_decode of a low-level batch on the Llama's context; True when llama.cpp reports a failure."""
    import llama_cpp

    return llama_cpp.llama_decode(llm._ctx.ctx, batch) != 0


def target_log_probs(np: Any, logits: Any, targets: list[int]) -> Any:
    """log softmax(logits[i])[targets[i]] for each row i (float32 rows, float64 sums), no log-softmax matrix."""
    peak = logits.max(axis=1)
    norm = np.log(np.exp(logits - peak[:, None]).sum(axis=1, dtype=np.float64))
    picked = logits[np.arange(len(targets)), np.asarray(targets)]
    return picked.astype(np.float64) - peak.astype(np.float64) - norm
