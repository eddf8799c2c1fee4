"""score_answers with the real packaged model: packed decodes score exactly as one sequence evaluated alone."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from prag_models.config.settings import GeneratorSettings
from prag_models.evaluation.utility import gold_answer
from prag_models.generation.prompts import build_prompt
from prag_models.llm.base import GenerationError, log_softmax
from prag_models.llm.llamacpp_backend import LlamaCppGenerator
from prag_models.llm.packed_scoring import ALIGN, ScoredSequence, layout_tokens, packs

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


VARIANTS = {
    "one_per_decode": {},  # the default
    "packed": {"score_pack_tokens": 4096},
    "packed_no_flash": {"score_pack_tokens": 4096, "flash_attention": False},
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def gen(request) -> Iterator[LlamaCppGenerator]:
    """The packaged model as prag runs it (bf16 where the build has AVX512_BF16): one sequence per decode, packed,
    packed without flash attention."""
    generator = LlamaCppGenerator(GeneratorSettings(**VARIANTS[request.param]))
    yield generator
    generator.close()


def one_pass_reference(gen: LlamaCppGenerator, prompt: str, answer: str) -> tuple[float, int]:
    """The slow path: the sequence alone in one decode from an empty KV cache, every position's logits, float64
    log-softmax over the whole vocabulary."""
    base, (tokens,) = gen._chat_tokens(prompt, [answer])
    sequence = base + tokens
    assert ALIGN <= len(sequence) <= gen._llm.n_batch  # one compute step of the tiled kernels, as packed scoring
    llm = gen._llm
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm._batch.set_batch(batch=sequence, n_past=0, logits_all=True)
    llm._ctx.decode(llm._batch)
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(len(sequence), llm.n_vocab())).astype(np.float64)
    total = sum(float(log_softmax(logits[p - 1])[sequence[p]]) for p in range(len(base), len(sequence)))
    llm.reset()
    return total, len(tokens)


def test_score_answers_equals_the_one_pass_reference(gen: LlamaCppGenerator) -> None:
    """Failed first (one_per_decode): the answer decoded apart from its prompt took llama.cpp's kernel for fewer than 64
    tokens, 0.02-0.19 nats away from the same sequence evaluated in one pass."""
    pairs = lamp_pairs()
    scored = gen.score_answers([p for p, _ in pairs], [a for _, a in pairs])
    for (prompt, answer), (loglik, n) in zip(pairs, scored, strict=True):
        ref, ref_n = one_pass_reference(gen, prompt, answer)
        assert n == ref_n >= 2  # the answer's tokens and the end-of-turn marker
        assert loglik == pytest.approx(ref, abs=1e-4)
        assert loglik < 0


def test_a_score_does_not_depend_on_its_batch(gen: LlamaCppGenerator) -> None:
    """Failed first (one_per_decode): the KV cache of the prompt scored before was reused, and a score moved by up to
    0.16 nats with it. Now alone, in any batch, in any order: the same bits (packed: in whole 64-token tiles)."""
    pairs = lamp_pairs()
    alone = [gen.score_answers([p], [a])[0] for p, a in pairs]
    # all five; two prompts with the same documents; one prompt with two answers; all five reversed
    for group in ([0, 1, 2, 3, 4], [0, 1], [2, 3], [4, 3, 2, 1, 0]):
        assert gen.score_answers([pairs[i][0] for i in group], [pairs[i][1] for i in group]) == [
            alone[i] for i in group
        ]
    if gen.settings.score_pack_tokens:  # packed, both pairs share their first two 64-token tiles
        for group in ([0, 1], [2, 3]):
            tokens = [gen._chat_tokens(pairs[i][0], [pairs[i][1]]) for i in group]
            sequences = [ScoredSequence(base + answer, len(base)) for base, (answer,) in tokens]
            assert packs(sequences, 4096, 8, 512) == [([0, 1], 2 * ALIGN)]


def test_packs_fit_the_token_budget_and_share_whole_tiles() -> None:
    prefix = list(range(100))
    seqs = [ScoredSequence(prefix + [1000 + i] * (20 + i), 100) for i in range(6)]
    grouped = packs(seqs, 400, 8, 512)
    assert [i for members, _ in grouped for i in members] == list(range(6))  # every sequence once, in order
    for members, shared in grouped:
        if len(members) > 1:
            assert shared % ALIGN == 0 and shared <= 100
            assert layout_tokens([len(seqs[i].tokens) for i in members], shared, 512) <= 400
    assert all(len(members) == 1 for members, _ in packs(seqs, 0, 8, 512))  # 0: one sequence per decode
    assert len(packs(seqs, 10_000, 2, 512)) == 3  # at most max_sequences a pack
    # a sequence longer than the budget gets a decode of its own
    long = ScoredSequence(list(range(900)), 800)
    assert packs([seqs[0], long, seqs[1]], 400, 8, 512) == [([0], 120), ([1], 900), ([2], 121)]
    # padding: each sequence starts at a tile boundary, the last compute step holds at least a tile
    assert layout_tokens([100, 70], 0, 512) == 128 + 70
    assert layout_tokens([530], 0, 512) == 512 + ALIGN
    with pytest.raises(ValueError, match="answer token"):
        ScoredSequence([1, 2, 3], 3)


def test_bad_input_is_refused(gen: LlamaCppGenerator) -> None:
    assert gen.score_answers([], []) == []
    with pytest.raises(ValueError, match="2 prompts for 1 answers"):
        gen.score_answers(["a", "b"], ["x"])
    with pytest.raises(GenerationError, match="n_ctx"):
        gen.score_answers(["word " * 3000], ["x"])
