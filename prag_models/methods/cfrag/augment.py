"""Sequence augmentations for contrastive user-encoder training (docs/methods.md §2.2).

Histories are lists of document indices. Each view applies exactly one of crop, mask or reorder, chosen uniformly
with a seeded ``numpy.random.Generator``. Span lengths use ⌊ratio·N⌋; a crop keeps at least one document so that a
view is never empty, while a mask or reorder of length 0 leaves the sequence unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

AUGMENTATIONS: tuple[str, ...] = ("crop", "mask", "reorder")


def span_length(n: int, ratio: float) -> int:
    """⌊ratio·n⌋, robust to float rounding (0.7·10 must give 7, not 6)."""
    return max(0, math.floor(ratio * n + 1e-9))


def crop(seq: Sequence[int], ratio: float, rng: np.random.Generator) -> list[int]:
    """Keep a random contiguous span of ⌊ratio·N⌋ documents (at least one) (§2.2)."""
    n = len(seq)
    if n == 0:
        return []
    length = max(1, span_length(n, ratio))
    start = int(rng.integers(0, n - length + 1))
    return list(seq[start : start + length])


def mask(seq: Sequence[int], ratio: float, mask_id: int, rng: np.random.Generator) -> list[int]:
    """Replace ⌊ratio·N⌋ randomly chosen positions (without replacement) by ``mask_id`` (§2.2)."""
    out = list(seq)
    count = span_length(len(out), ratio)
    if count == 0:
        return out
    for pos in rng.choice(len(out), size=count, replace=False):
        out[int(pos)] = mask_id
    return out


def reorder(seq: Sequence[int], ratio: float, rng: np.random.Generator) -> list[int]:
    """Shuffle the documents inside a random contiguous span of ⌊ratio·N⌋ positions (§2.2)."""
    out = list(seq)
    n = len(out)
    length = span_length(n, ratio)
    if length < 2:
        return out
    start = int(rng.integers(0, n - length + 1))
    span = out[start : start + length]
    out[start : start + length] = [span[int(i)] for i in rng.permutation(length)]
    return out


def augment(
    seq: Sequence[int],
    rng: np.random.Generator,
    mask_id: int,
    crop_ratio: float = 0.7,
    mask_ratio: float = 0.3,
    reorder_ratio: float = 0.3,
) -> list[int]:
    """One augmented view: crop, mask or reorder picked uniformly at random (§2.2)."""
    kind = AUGMENTATIONS[int(rng.integers(0, len(AUGMENTATIONS)))]
    if kind == "crop":
        return crop(seq, crop_ratio, rng)
    if kind == "mask":
        return mask(seq, mask_ratio, mask_id, rng)
    return reorder(seq, reorder_ratio, rng)


def two_views(
    seq: Sequence[int], rng: np.random.Generator, mask_id: int, **ratios: float
) -> tuple[list[int], list[int]]:
    """The two independently augmented views of one history used as a positive pair (§2.2); ``ratios`` are
    :func:`augment`'s (crop_ratio, mask_ratio, reorder_ratio)."""
    first = augment(seq, rng, mask_id, **ratios)
    second = augment(seq, rng, mask_id, **ratios)
    return first, second
