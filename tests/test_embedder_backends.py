"""The embedder's backends: cache keys that keep their vectors apart, "auto", and vectors close to torch fp32's."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

import duckdb
import numpy as np
import pytest

from prag_models.config.settings import EmbedderSettings
from prag_models.text import embedder as embedder_module
from prag_models.text.embedder import Embedder, embedder_key, query_embedder, resolve_backend
from prag_models.text.embedding_cache import embed_with_cache, lookup_embeddings

TEXTS = [
    "'title': Graph neural networks for traffic forecasting",
    "believe me, the best part was armor and monastery, we spent hours on knight and jousting.",
    "A short one.",
    "the first chapter covers cathedral and feudal, an honest account of manuscript and crusade; pure magic.",
]


def _constant(value: float):
    """An embed function returning rows of one value (a stand-in for a backend), counting the texts it saw."""
    seen: list[str] = []

    def embed(texts: Sequence[str]) -> np.ndarray:
        """Rows of the value, one per text."""
        seen.extend(texts)
        return np.full((len(texts), 4), value, dtype=np.float32)

    return embed, seen


def test_keys_name_the_backend_and_fp32_keeps_the_bare_model_name():
    """torch fp32 caches under the model name (the cache before backends existed); every other backend apart."""
    keys = {b: embedder_key(EmbedderSettings(backend=b)) for b in ("torch", "torch_int8", "onnx", "onnx_int8")}
    assert keys["torch"] == EmbedderSettings().model
    assert len(set(keys.values())) == 4
    assert keys["onnx"] == f"{EmbedderSettings().model}#onnx/v2"
    assert keys["onnx_int8"] == f"{EmbedderSettings().model}#onnx_int8/v2"  # not the batched vectors of v1


def test_two_backends_do_not_share_cache_entries():
    """Vectors cached by one backend are not returned for another: the second embeds the texts itself."""
    con = duckdb.connect()
    fp32, int8 = EmbedderSettings(backend="torch"), EmbedderSettings(backend="onnx_int8")
    embed_a, seen_a = _constant(1.0)
    embed_b, seen_b = _constant(2.0)
    first, _, new_a = embed_with_cache(con, embed_a, embedder_key(fp32), TEXTS)
    second, hashes, new_b = embed_with_cache(con, embed_b, embedder_key(int8), TEXTS)
    assert new_a == new_b == len(TEXTS) and len(seen_b) == len(TEXTS)
    assert (first == 1.0).all() and (second == 2.0).all()
    assert (lookup_embeddings(con, embedder_key(fp32), hashes) == 1.0).all()
    again, _, new = embed_with_cache(con, _constant(3.0)[0], embedder_key(int8), TEXTS)
    assert new == 0 and (again == 2.0).all()  # the same backend reuses its own entries


def test_auto_falls_back_to_torch(monkeypatch):
    """Backend "auto" with onnxruntime and onnx installed: onnx_int8 on AVX2 without usable AVX-512, onnx (fp32) on
    AVX-512 (the int8 vectors moved a verdict gain there) and other CPUs; torch without them or on a GPU."""
    monkeypatch.setattr(embedder_module, "_cpu_flags", lambda: {"sse4_2", "avx2"})
    monkeypatch.setattr(embedder_module, "_installed", lambda *modules: True)
    assert resolve_backend(EmbedderSettings()) == "onnx_int8"
    monkeypatch.setattr(embedder_module, "_cpu_flags", lambda: {"sse4_2", "avx2", "avx512f"})
    assert resolve_backend(EmbedderSettings()) == "onnx"
    assert embedder_key(EmbedderSettings()) == f"{EmbedderSettings().model}#onnx/v2"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # AVX-512 switched off: the slow machine's proxy
    assert resolve_backend(EmbedderSettings()) == "onnx_int8"
    monkeypatch.setattr(embedder_module, "_cpu_flags", lambda: {"sse4_2", "avx2"})
    assert resolve_backend(EmbedderSettings(device="cuda")) == "torch"
    assert resolve_backend(EmbedderSettings(backend="torch")) == "torch"
    monkeypatch.setattr(embedder_module, "_installed", lambda *modules: False)
    assert resolve_backend(EmbedderSettings()) == "torch"
    assert embedder_key(EmbedderSettings()) == EmbedderSettings().model
    monkeypatch.setattr(embedder_module, "_installed", lambda *modules: True)
    monkeypatch.setattr(embedder_module, "_cpu_flags", lambda: {"neon"})
    assert resolve_backend(EmbedderSettings()) == "onnx"


@pytest.mark.models
@pytest.mark.parametrize("backend", ["auto", "onnx", "onnx_int8"])
def test_backend_vectors_are_close_to_fp32(backend, tmp_path, monkeypatch):
    """The packaged model's vectors on a backend (the one "auto" picks on this machine too) are unit vectors within
    cosine 0.99 of torch fp32's, and the embedder names its backend in its key."""
    if backend.startswith("onnx") and not all(importlib.util.find_spec(m) for m in ("onnxruntime", "onnx")):
        pytest.skip("onnxruntime / onnx not installed")
    monkeypatch.setenv("PRAG_MODEL_CACHE", str(tmp_path))
    reference = Embedder(EmbedderSettings(backend="torch")).embed(TEXTS)
    settings = EmbedderSettings(backend=backend)
    embedder = Embedder(settings)
    vectors = embedder.embed(TEXTS)
    assert embedder.backend == resolve_backend(settings) and embedder.model_id == embedder_key(settings)
    assert vectors.shape == reference.shape and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert (vectors * reference).sum(1).min() > 0.99


@pytest.mark.models
@pytest.mark.parametrize("backend", ["torch_int8", "onnx", "onnx_int8"])
def test_a_texts_vector_does_not_depend_on_the_texts_embedded_with_it(backend, tmp_path, monkeypatch):
    """A text's vector is a function of the text alone, to the bit: embedded alone, or beside a long text and others,
    it is the same (batched, padding moves an fp32 vector by ~1e-7 and int8's batch-wide scales by up to 0.02: another
    user's hidden document would move it, docs/privacy.md). torch fp32, batched for GPUs, is left out."""
    if backend.startswith("onnx") and not all(importlib.util.find_spec(m) for m in ("onnxruntime", "onnx")):
        pytest.skip("onnxruntime / onnx not installed")
    monkeypatch.setenv("PRAG_MODEL_CACHE", str(tmp_path))
    embedder = Embedder(EmbedderSettings(backend=backend))
    alone = embedder.embed(TEXTS[:1])[0]
    beside = embedder.embed([*TEXTS, "an unusually long document about knights and jousting " * 20])[0]
    assert np.array_equal(alone, beside), np.abs(alone - beside).max()


def test_queries_are_embedded_as_the_stored_documents_were():
    """`prag answer` and the pyfunc embed a query on the backend the task's documents carry in their key (a home
    embedded on another CPU class, or before "auto" changed), and refuse keys they cannot reproduce."""
    mine = EmbedderSettings()
    model = mine.model
    assert query_embedder(mine, {embedder_key(mine)}, "LaMP-2") is mine
    assert query_embedder(mine, {model}, "LaMP-2").backend == "torch"  # the bare name: torch fp32
    assert query_embedder(mine, {f"{model}#onnx_int8/v2"}, "LaMP-2").backend == "onnx_int8"
    for keys in ({f"{model}#onnx_int8"}, {"another-model"}, {model, f"{model}#onnx/v2"}):
        with pytest.raises(LookupError, match="LaMP-2 documents were embedded with"):
            query_embedder(mine, keys, "LaMP-2")  # an older int8 version, another model, mixed keys
