"""Save and load CFRAG models as safetensors weights plus a JSON config — never pickle (docs/methods.md §2).

A model folder holds ``config.json`` (``{"kind", "format_version", "config"}``) and ``model.safetensors`` (the full
state dict). A reranker folder also holds ``encoder/`` with the cross-encoder's HF config and tokenizer files, so it
loads without the original model folder. Loaded models are in eval mode and score identically to the saved ones.
A registered version holds this folder as artifact ``weights`` of its MLflow pyfunc model
(``prag_models/mlops/pyfunc.py``). A user encoder's folder also holds ``doc_rows.parquet``: the (user_id, doc_id) of
every row of its document table, the map serving checks before it encodes a history (``tables.encoder_histories``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from prag_models.methods.cfrag.reranker import PersonalizedReranker
from prag_models.methods.cfrag.retriever import PersonalizedRetriever
from prag_models.methods.cfrag.user_encoder import UserEncoder

FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
_LEARNT_SINCE = ("alpha_shift", "log_scale")  # retriever parameters a model saved before 2026-11-26 lacks
WEIGHTS_FILE = "model.safetensors"
#: A user encoder's document-row map: (user_id, doc_id) of each row of its document table, in row order.
DOC_ROWS_FILE = "doc_rows.parquet"
ENCODER_DIR = "encoder"
_KINDS: dict[str, type[nn.Module]] = {
    "user_encoder": UserEncoder,
    "retriever": PersonalizedRetriever,
    "reranker": PersonalizedReranker,
}


def _kind_of(model: nn.Module) -> str:
    """The kind name stored in config.json for a model instance."""
    for kind, cls in _KINDS.items():
        if isinstance(model, cls):
            return kind
    raise TypeError(f"not a CFRAG model: {type(model).__name__}")


def save_model(model: nn.Module, folder: str | Path) -> Path:
    """Write a CFRAG model (user encoder, retriever or reranker) to ``folder``; returns the folder."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    kind = _kind_of(model)
    state = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    save_file(state, str(out / WEIGHTS_FILE), metadata={"kind": kind, "format_version": str(FORMAT_VERSION)})
    if isinstance(model, PersonalizedReranker):
        model.encoder.config.save_pretrained(str(out / ENCODER_DIR))
        model.tokenizer.save_pretrained(str(out / ENCODER_DIR))
    meta = {"kind": kind, "format_version": FORMAT_VERSION, "config": model.config()}
    (out / CONFIG_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True), encoding="utf-8")
    rows = getattr(model, "doc_rows", None)
    if rows is not None:  # which document each row of the encoder's table is (serving checks it, issue 26)
        import pyarrow.parquet as pq

        pq.write_table(rows, str(out / DOC_ROWS_FILE))
    else:
        (out / DOC_ROWS_FILE).unlink(missing_ok=True)
    return out


def read_config(folder: str | Path) -> dict[str, Any]:
    """The JSON config of a saved model (kind, format version, constructor arguments)."""
    meta = json.loads((Path(folder) / CONFIG_FILE).read_text(encoding="utf-8"))
    if meta.get("format_version") != FORMAT_VERSION or meta.get("kind") not in _KINDS:
        raise ValueError(f"{folder}: unsupported CFRAG model config {meta.get('kind')!r} v{meta.get('format_version')}")
    return meta


def load_model(folder: str | Path) -> nn.Module:
    """Load any saved CFRAG model (its kind is read from config.json), in eval mode."""
    src = Path(folder)
    meta = read_config(src)
    cfg = meta["config"]
    model: nn.Module
    if meta["kind"] == "user_encoder":
        model = UserEncoder(**cfg)
    elif meta["kind"] == "retriever":
        model = PersonalizedRetriever(**cfg)
    else:
        model = PersonalizedReranker(str(src / ENCODER_DIR), pretrained=False, **cfg)
    state = load_file(str(src / WEIGHTS_FILE))
    if meta["kind"] == "retriever":  # saved before α and the student scale were learnable: they start at 0
        state = {name: t for name, t in model.state_dict().items() if name in _LEARNT_SINCE} | state
    model.load_state_dict(state, strict=True)
    model.eval()
    if (src / DOC_ROWS_FILE).is_file():
        import pyarrow.parquet as pq

        model.doc_rows = pq.read_table(str(src / DOC_ROWS_FILE))
    return model


def _load_as(folder: str | Path, cls: type[nn.Module]) -> Any:
    """Load a model and check that it has the expected class."""
    model = load_model(folder)
    if not isinstance(model, cls):
        raise TypeError(f"{folder} holds a {type(model).__name__}, expected {cls.__name__}")
    return model


def load_user_encoder(folder: str | Path) -> UserEncoder:
    """Load a saved :class:`UserEncoder`."""
    return _load_as(folder, UserEncoder)


def load_retriever(folder: str | Path) -> PersonalizedRetriever:
    """Load a saved :class:`PersonalizedRetriever`."""
    return _load_as(folder, PersonalizedRetriever)


def load_reranker(folder: str | Path) -> PersonalizedReranker:
    """Load a saved :class:`PersonalizedReranker`."""
    return _load_as(folder, PersonalizedReranker)


def state_dicts_equal(a: nn.Module, b: nn.Module) -> bool:
    """True when two models hold bit-identical parameters and buffers."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
