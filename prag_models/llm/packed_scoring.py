"""Log-likelihoods of prompt + answer token sequences in one llama.cpp decode each, or a few sequences per decode.

The LLM utility's hot path (``LlamaCppGenerator.score_answers``). A sequence is a chat-templated prompt followed by
the answer to score; it is evaluated in one decode from an empty KV cache, with logits only at the positions that
predict an answer token, each row's log-softmax taken at its target token only (no float64 copy of the vocabulary
per position). Before, the prompt was one decode and the answer another: llama.cpp ran the answer's few tokens on
its kernels for short steps, which round differently, and the cached prefix of the previous prompt was reused, so a
score moved by up to 0.2 nats with the prompts around it. Now a sequence's score is the same bits alone, in any
batch, in any order, and equals one pass over the sequence.

With ``pack_tokens`` > 0, consecutive sequences share decodes of up to that many tokens, each its own llama.cpp
sequence id in a unified KV cache, a prefix they share in whole 64-token tiles evaluated once; padding keeps every
score what it is alone (``ALIGN``). On the packaged 135M model this was no faster (benchmarks/llm_throughput.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prag_models.llm.base import GenerationError


@dataclass(frozen=True)
class ScoredSequence:
    """Token ids of a prompt followed by its answer; ``tokens[start:]`` (the answer) are scored."""

    tokens: list[int]
    start: int

    def __post_init__(self) -> None:
        if not 1 <= self.start < len(self.tokens):
            raise ValueError(f"a scored sequence needs >= 1 prompt and >= 1 answer token (start {self.start})")


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """Length of the longest common prefix of a and b, at most limit."""
    n = min(limit, len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


#: llama.cpp's CPU flash attention works through the KV cache in tiles of 64 cells and takes another kernel for a
#: step of fewer than 64 tokens; both change the rounding (by up to ~0.1 nats a sequence with bf16 weights). So that a
#: sequence scores the same whatever else is in its pack, each sequence's own tokens start at a cell congruent, modulo
#: 64, to where they would start alone, and every compute step holds at least 64 tokens (unused padding tokens).
ALIGN = 64


def layout_tokens(lengths: Sequence[int], shared: int, n_ubatch: int) -> int:
    """Tokens one decode of sequences of these lengths takes: the shared prefix once, alignment padding included."""
    n = shared
    for length in lengths:
        n += (shared - n) % ALIGN + length - shared
    return n + tail_padding(n, n_ubatch)


def tail_padding(n: int, n_ubatch: int) -> int:
    """Padding tokens that give the decode's last compute step (of n_ubatch tokens) at least ALIGN tokens."""
    tail = n % n_ubatch
    return ALIGN - tail if 0 < tail < ALIGN else 0


def packs(
    sequences: Sequence[ScoredSequence], pack_tokens: int, max_sequences: int, n_ubatch: int
) -> list[tuple[list[int], int]]:
    """(indices, shared prefix length) of consecutive sequences that fit one decode of pack_tokens tokens."""
    out: list[tuple[list[int], int]] = []
    members: list[int] = []
    shared = 0
    for i, seq in enumerate(sequences):
        if members and len(members) < max_sequences:
            # whole tiles only: a tile that mixed shared and own tokens would round differently than alone
            new_shared = common_prefix(sequences[members[0]].tokens, seq.tokens, shared) // ALIGN * ALIGN
            lengths = [len(sequences[m].tokens) for m in members] + [len(seq.tokens)]
            if layout_tokens(lengths, new_shared, n_ubatch) <= pack_tokens:
                members.append(i)
                shared = new_shared
                continue
        if members:
            out.append((members, shared))
        members, shared = [i], len(seq.tokens)
    if members:
        out.append((members, shared))
    return out


class PackedScorer:
    """A llama.cpp context of its own (several sequences, unified KV cache) that scores sequences in packs."""

    def __init__(self, llm: Any, n_ctx: int, pack_tokens: int, max_sequences: int = 64) -> None:
        import llama_cpp
        from llama_cpp._internals import LlamaContext

        self._llama_cpp = llama_cpp
        self.pack_tokens = pack_tokens
        self.max_tokens = n_ctx  # the longest sequence scored (generator.n_ctx)
        self.n_ctx = max(n_ctx, pack_tokens) + ALIGN  # room for the padding
        # the last sequence id is the padding's
        self.max_sequences = min(max_sequences, llama_cpp.llama_max_parallel_sequences()) - 1
        self.n_ubatch = llm.context_params.n_ubatch  # llama.cpp's compute step, 512 as llama-bench's
        self.pad_token = llm.token_eos()
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_ctx = self.n_ctx
        params.n_batch = self.n_ctx  # one decode takes a whole pack (or one sequence up to n_ctx)
        params.n_ubatch = self.n_ubatch
        params.n_seq_max = self.max_sequences + 1
        params.kv_unified = True  # a shared prefix is one set of KV cells for all its sequences
        params.embeddings = False
        self.n_vocab = llm.n_vocab()
        try:
            self._ctx = LlamaContext(model=llm._model, params=params, verbose=False)
        except ValueError as exc:
            raise GenerationError(f"llama.cpp could not create a scoring context: {exc}") from None
        self._batch = llama_cpp.llama_batch_init(self.n_ctx, 0, self.max_sequences + 1)
        self._n = self._padding = 0

    def score(self, sequences: Sequence[ScoredSequence]) -> list[tuple[float, int]]:
        """(log-likelihood of tokens[start:] given tokens[:start], number of those tokens) of every sequence."""
        for seq in sequences:
            if len(seq.tokens) > self.max_tokens:
                raise GenerationError(f"{len(seq.tokens)} tokens to score exceed n_ctx={self.max_tokens}")
        out: list[tuple[float, int]] = [(0.0, 0)] * len(sequences)
        for members, shared in packs(sequences, self.pack_tokens, self.max_sequences, self.n_ubatch):
            for i, value in zip(members, self._score_pack([sequences[i] for i in members], shared), strict=True):
                out[i] = value
        return out

    def _score_pack(self, pack: list[ScoredSequence], shared: int) -> list[tuple[float, int]]:
        """One decode of the pack from an empty KV cache; the scored log-probabilities read from its output rows."""
        # output row of (owner, position): owner -1 for a shared token, else the member's index in the pack
        wanted: dict[tuple[int, int], int] = {}
        first_scored = min(seq.start for seq in pack) - 1
        all_members = list(range(len(pack)))
        self._n = self._padding = 0
        for pos in range(shared):
            self._add(pack[0].tokens[pos], pos, all_members, pos >= first_scored, wanted, -1)
        for j, seq in enumerate(pack):
            self._pad((shared - self._n) % ALIGN)
            for pos in range(shared, len(seq.tokens)):
                self._add(seq.tokens[pos], pos, [j], seq.start - 1 <= pos < len(seq.tokens) - 1, wanted, j)
        self._pad(tail_padding(self._n, self.n_ubatch))
        self._batch.n_tokens = self._n
        self._ctx.kv_cache_clear()
        status = self._llama_cpp.llama_decode(self._ctx.ctx, self._batch)
        if status != 0:
            raise GenerationError(f"llama_decode failed with status {status} on {self._n} tokens")
        logits = np.ctypeslib.as_array(
            self._llama_cpp.llama_get_logits(self._ctx.ctx), shape=(len(wanted), self.n_vocab)
        )
        rows, targets, owners = [], [], []
        for j, seq in enumerate(pack):
            for pos in range(seq.start - 1, len(seq.tokens) - 1):
                rows.append(wanted[(-1 if pos < shared else j, pos)])
                targets.append(seq.tokens[pos + 1])
                owners.append(j)
        log_probs = target_log_probs(logits, np.asarray(rows), np.asarray(targets))
        totals = np.bincount(np.asarray(owners), weights=log_probs, minlength=len(pack))
        return [(float(totals[j]), len(seq.tokens) - seq.start) for j, seq in enumerate(pack)]

    def _pad(self, count: int) -> None:
        """count padding tokens: a sequence of their own that no scored token sees."""
        for _ in range(count):
            self._add(self.pad_token, self._padding, [self.max_sequences], False, {}, 0)
            self._padding += 1

    def _add(self, token: int, pos: int, seq_ids: list[int], logits: bool, wanted: dict, owner: int) -> None:
        """Append one token to the batch; a token whose logits are wanted gets the next output row."""
        batch, n = self._batch, self._n
        batch.token[n] = token
        batch.pos[n] = pos
        batch.n_seq_id[n] = len(seq_ids)
        for k, seq_id in enumerate(seq_ids):
            batch.seq_id[n][k] = seq_id
        batch.logits[n] = logits
        if logits:
            wanted[(owner, pos)] = len(wanted)
        self._n = n + 1

    def close(self) -> None:
        """Free the batch and the context."""
        if self._batch is not None:
            self._llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        self._ctx.close()


def target_log_probs(logits: np.ndarray, rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log softmax(logits[rows[i]])[targets[i]] for every i, without materialising a log-softmax matrix."""
    selected = logits if len(rows) == len(logits) and (rows == np.arange(len(rows))).all() else logits[rows]
    peak = selected.max(axis=1)
    norm = np.log(np.exp(selected - peak[:, None]).sum(axis=1, dtype=np.float64))
    return selected[np.arange(len(rows)), targets].astype(np.float64) - peak.astype(np.float64) - norm
