"""A CFRAG teacher of known quality (``cfrag.feedback_signal = "oracle"``, docs/methods.md §2.5): the feedback label
of a (sample, candidate) pair is the task's truth (the demo's planted relevance, else the document's label against
the gold), with a share ``cfrag.teacher_noise`` of the labels replaced by a uniform random score. No LLM is called;
the labels go into the same feedback_labels table and train through the same code as LLM labels, so whether the
training loop learns can be measured apart from the LLM's quality (benchmarks/cfrag_teacher.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from prag_models.config.settings import Settings
from prag_models.data.truth import load_truth

#: The output column of an oracle label (there is no generated text).
ORACLE_OUTPUT = "oracle"


def _uniforms(seed: int, task: str, sample_id: str, doc_id: str) -> tuple[float, float]:
    """Two uniform draws in [0, 1) fixed by the pair and the seed (a label never depends on batch order)."""
    digest = hashlib.sha256(f"{seed}|{task}|{sample_id}|{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64, int.from_bytes(digest[8:16], "big") / 2**64


def oracle_scores(con: Any, task: str, pairs: Sequence[tuple[Any, Any]], settings: Settings) -> list[float]:
    """The oracle label of each (sample, candidate) pair: its truth gain (1 right, 0 not), or with probability
    ``cfrag.teacher_noise`` (and wherever the truth is unknown) a uniform random score in [0, 1]."""
    truth = load_truth(con, task, "train", {c.doc_id for _, c in pairs})
    noise, seed = settings.cfrag.teacher_noise, settings.cfrag.seed
    out = []
    for sample, candidate in pairs:
        gain = truth.gain(str(sample.sample_id), str(candidate.doc_id))
        coin, draw = _uniforms(seed, task, str(sample.sample_id), str(candidate.doc_id))
        out.append(draw if gain is None or coin < noise else float(gain))
    return out
