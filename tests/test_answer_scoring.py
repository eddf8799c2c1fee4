"""score_answers with the real packaged model: each answer scored as one pass over prompt + answer, any batch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from prag_models.config.settings import GeneratorSettings
from prag_models.evaluation.utility import gold_answer
from prag_models.generation.prompts import build_prompt
from prag_models.llm.base import GenerationError, log_softmax
from prag_models.llm.llamacpp_backend import MIN_STEP_TOKENS, LlamaCppGenerator

DOCS = [
    "Ten ways the city council plans to fix the potholes on Main Street before winter",
    "Local bakery wins the regional prize for its sourdough, third year in a row",
    "Why the new bridge opening was delayed again, and what commuters can do meanwhile",
]
OTHER_DOCS = ["A quiet guide to birdwatching in the marshes at dawn", "The best hiking trails within an hour of town"]
INPUTS = [
    "Generate a headline for the following article: the council approved a budget for road repairs.",
    "Generate a headline for the following article: the bakery opens a second shop downtown next month.",
]
GOLDS = ["Council approves road repair budget", "Prize-winning bakery expands downtown"]


def lamp_pairs() -> list[tuple[str, str]]:
    """LaMP-4 prompts and gold answers: two share a long prefix (the same documents), one prompt has two answers."""
    return [
        (build_prompt("LaMP-4", INPUTS[0], DOCS), gold_answer("LaMP-4", GOLDS[0])),
        (build_prompt("LaMP-4", INPUTS[1], DOCS), gold_answer("LaMP-4", GOLDS[1])),
        (build_prompt("LaMP-4", INPUTS[1], OTHER_DOCS), gold_answer("LaMP-4", GOLDS[1])),
        (build_prompt("LaMP-4", INPUTS[1], OTHER_DOCS), gold_answer("LaMP-4", "Bakery news")),
        (build_prompt("LaMP-4", INPUTS[0], []), gold_answer("LaMP-4", GOLDS[0])),
    ]


@pytest.fixture(scope="module", params=[True, False], ids=["flash", "no_flash"])
def gen(request) -> Iterator[LlamaCppGenerator]:
    """The packaged model as prag runs it (bf16 where the build has AVX512_BF16), with and without flash attention."""
    generator = LlamaCppGenerator(GeneratorSettings(flash_attention=request.param))
    yield generator
    generator.close()


def one_pass_reference(gen: LlamaCppGenerator, prompt: str, answer: str) -> tuple[float, int]:
    """The slow path: the sequence alone in one decode from an empty KV cache, every position's logits, float64
    log-softmax over the whole vocabulary."""
    base, (tokens,) = gen._chat_tokens(prompt, [answer])
    sequence = base + tokens
    assert MIN_STEP_TOKENS <= len(sequence) <= gen._llm.n_batch  # one compute step, on the kernels of long steps
    llm = gen._llm
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm._batch.set_batch(batch=sequence, n_past=0, logits_all=True)
    llm._ctx.decode(llm._batch)
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(len(sequence), llm.n_vocab())).astype(np.float64)
    total = sum(float(log_softmax(logits[p - 1])[sequence[p]]) for p in range(len(base), len(sequence)))
    llm.reset()
    gen._scored = []  # the KV cache now holds this sequence without padding: nothing score_answers may reuse
    return total, len(tokens)


def test_score_answers_equals_the_one_pass_reference(gen: LlamaCppGenerator) -> None:
    """Failed first (flash): the answer decoded apart from its prompt took llama.cpp's kernel for fewer than 64
    tokens, up to 0.19 nats away from the same sequence evaluated in one pass."""
    pairs = lamp_pairs()
    scored = gen.score_answers([p for p, _ in pairs], [a for _, a in pairs])
    for (prompt, answer), (loglik, n) in zip(pairs, scored, strict=True):
        ref, ref_n = one_pass_reference(gen, prompt, answer)
        assert n == ref_n >= 2  # the answer's tokens and the end-of-turn marker
        assert loglik == pytest.approx(ref, abs=1e-4)
        assert loglik < 0


def test_a_score_does_not_depend_on_its_batch(gen: LlamaCppGenerator) -> None:
    """Failed first (flash): the KV cache of the prompt scored before was reused from 2 tokens before its end, and a
    score moved by up to 0.16 nats with it. Now the same bits alone, in any batch, in any order, after anything."""
    pairs = lamp_pairs()
    alone = []
    for prompt, answer in pairs:
        gen.generate(["Name a colour."], 4)  # another use of the KV cache: nothing to reuse
        alone.append(gen.score_answers([prompt], [answer])[0])
    # all five (prompts 0, 1 share their documents); all five reversed; a prompt twice; the same prompt just before
    for group in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [1, 1], [0, 1], [2, 3]):
        scored = gen.score_answers([pairs[i][0] for i in group], [pairs[i][1] for i in group])
        assert scored == [alone[i] for i in group]
    gen.forget()
    assert gen.score_answers([pairs[4][0]], [pairs[4][1]]) == [alone[4]]


def test_bad_input_is_refused(gen: LlamaCppGenerator) -> None:
    assert gen.score_answers([], []) == []
    with pytest.raises(ValueError, match="2 prompts for 1 answers"):
        gen.score_answers(["a", "b"], ["x"])
    with pytest.raises(GenerationError, match="n_ctx"):
        gen.score_answers(["word " * 3000], ["x"])
