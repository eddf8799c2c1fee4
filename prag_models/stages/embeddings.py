"""Stage 2 (embeddings): unit-norm document and query embeddings from the frozen encoder, cached by content hash."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from prag_models.store import read_rows
from prag_models.text.embedding_cache import embed_with_cache

if TYPE_CHECKING:
    from prag_models.text.embedder import Embedder

Progress = Callable[[int, int], None] | None


def document_embedding_rows(
    con, task: str, embedder: Embedder, progress: Progress = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One embedding per profile document of a task (only texts not in embedding_cache are embedded)."""
    docs = read_rows(con, "profile_documents", {"task": task}, order_by="user_id, position")
    matrix, _, new = embed_with_cache(con, embedder.embed, embedder.model_id, docs["text"].tolist(), progress=progress)
    frame = pd.DataFrame(
        {
            "task": task,
            "user_id": docs["user_id"],
            "doc_id": docs["doc_id"],
            "position": docs["position"],
            "model_id": embedder.model_id,
            "content_hash": docs["content_hash"],
            "embedding": list(matrix),
        }
    )
    return frame, {"documents": len(frame), "newly_embedded": new, "dim": int(matrix.shape[1])}


def query_embedding_rows(
    con, task: str, embedder: Embedder, progress: Progress = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One embedding per sample query of a task (docs/methods.md §1 query side), cached."""
    samples = read_rows(con, "lamp_samples", {"task": task}, order_by="split, sample_id")
    matrix, hashes, new = embed_with_cache(
        con, embedder.embed, embedder.model_id, samples["query"].tolist(), progress=progress
    )
    frame = pd.DataFrame(
        {
            "task": task,
            "sample_id": samples["sample_id"],
            "user_id": samples["user_id"],
            "model_id": embedder.model_id,
            "content_hash": hashes,
            "embedding": list(matrix),
        }
    )
    return frame, {"queries": len(frame), "newly_embedded": new}
