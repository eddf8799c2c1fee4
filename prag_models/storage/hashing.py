"""Stable hashes of what prag stores: a text's ``content_hash`` and the ``data_version`` of a model's input.

Below every other prag_models module (it imports none of them), so ``data`` can key rows by text hash without
depending on the text encoders, and ``methods`` can version their inputs without depending on the registry.
"""

from __future__ import annotations

import hashlib
from typing import Any

#: content_hash of a SQL text expression, equal to :func:`content_hash` (sha256 hex, first 32 characters).
SQL_HASH = "substr(sha256({}), 1, 32)"


def content_hash(text: str) -> str:
    """Stable hash of a text (sha256 hex, first 32 characters): the key of the embedding cache."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def data_version(*parts: Any) -> str:
    """A short sha256 over DataFrames (their rows), arrays, strings or numbers: the version of a model's input."""
    import numpy as np
    import pandas as pd

    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, pd.DataFrame):
            digest.update(",".join(map(str, part.columns)).encode())
            digest.update(pd.util.hash_pandas_object(part, index=False).to_numpy().tobytes())
        elif isinstance(part, np.ndarray):
            digest.update(str(part.shape).encode() + np.ascontiguousarray(part).tobytes())
        else:
            digest.update(repr(part).encode())
        digest.update(b"|")
    return digest.hexdigest()[:16]
