"""What CFRAG reads from and writes to DuckDB: user histories, the load-back probe, neighbour lists, CFRAG user
embeddings and similar users, and the ``cfrag_models`` rows of registered models (docs/methods.md §2.1–2.3)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from prag_models.config.settings import Settings
from prag_models.methods.cfrag.probes import PROBE_DOCS, PROBE_ROWS, Probe, loss_trend
from prag_models.methods.profiles import OwnerColumn
from prag_models.methods.task_tables import vectors_by_rowid
from prag_models.storage.store import column_to_matrix, read_rows, table_exists

MODELS_TABLE = "cfrag_models"


def model_dir(settings: Settings, task: str, kind: str) -> Path:
    """Local folder of a trained model: ``<home>/models/<task>/<kind>/``."""
    return settings.home_path / "models" / task / kind


_HISTORY_COLUMNS = ["user_id", "doc_id", "position", "model_id", "content_hash"]


def _history_keys(con, task: str, default_share: bool) -> pa.Table:
    """(rid, user_id, doc_id, position, model_id, content_hash) of the task's documents that may shape other users'
    results (``privacy.rules.shaping_mask``: private documents and non-sharing users' documents left out), sorted."""
    from prag_models.privacy.rules import shaping_mask

    keys = con.sql(
        f"SELECT rowid AS rid, {', '.join(_HISTORY_COLUMNS)} FROM document_embeddings WHERE task = ? "
        "ORDER BY user_id, position, doc_id",
        params=[task],
    ).to_arrow_table()
    return keys.filter(pa.array(shaping_mask(con, task, keys["user_id"], keys["doc_id"], default_share)))


def task_histories(con, task: str, default_share: bool) -> tuple[list[str], dict[str, range], np.ndarray, pa.Table]:
    """Users of the task (with documents or samples), their histories (rows in profile order, a range each), the doc
    matrix and the rows' keys (user_id, doc_id, position, model_id, content_hash) — the keys sorted in DuckDB, the
    vectors streamed into one float32 matrix (no Python object per document). Only the documents that may shape
    other users' results (docs/privacy.md): a user who shares nothing has an empty history."""
    keys = _history_keys(con, task, default_share)
    matrix = vectors_by_rowid(con, task, keys["rid"].to_numpy())
    owners = OwnerColumn.of(keys["user_id"])
    starts = np.searchsorted(owners.codes, np.arange(len(owners.names) + 1))
    histories = {u: range(int(starts[i]), int(starts[i + 1])) for i, u in enumerate(owners.names)}
    users = sorted(set(histories) | _sample_users(con, task))
    return users, histories, matrix, keys.select(_HISTORY_COLUMNS)


def _sample_users(con, task: str) -> set[str]:
    """Users with samples in the task."""
    return {u for (u,) in con.execute("SELECT DISTINCT user_id FROM lamp_samples WHERE task = ?", [task]).fetchall()}


class EncoderMismatchError(LookupError):
    """The user encoder's document table is not the task's documents now: its histories would point at others."""


def encoder_histories(
    con, task: str, encoder: Any, default_share: bool, described: str = "the user encoder", known_only: bool = False,
    allow_new: bool = False,
) -> tuple[list[str], dict[str, list[int]]]:  # fmt: skip
    """Users of the task and each user's history as rows of ``encoder``'s document table, by the (user_id, doc_id)
    map stored with it; EncoderMismatchError (which model, what to retrain) unless the task's documents that may
    shape others' results are exactly the ones it was trained on. ``known_only``: each history keeps the documents
    the encoder knows (what an older encoder, e.g. the champion's, can read of histories that grew since);
    ``allow_new``: documents added since it was trained are left out of the histories (a served version after
    `prag ingest`), while a row of its table that is gone (erased, made private, withdrawn) still refuses."""
    stored = getattr(encoder, "doc_rows", None)
    retrain = ("retrain the user encoder (materialize cfrag_user_encoder, then cfrag_user_embeddings and "
               "cfrag_similar_users) and promote it, or serve the version that made the stored tables")  # fmt: skip
    if stored is None:
        raise EncoderMismatchError(f"{task}: {described} stores no document-row map (logged before issue 26): its "
                                   f"histories cannot be checked; {retrain}")  # fmt: skip
    keys = _history_keys(con, task, default_share).select(["user_id", "doc_id"]).to_pandas()
    trained = stored.select(["user_id", "doc_id"]).to_pandas().assign(row=np.arange(stored.num_rows))
    if len(trained) != encoder.num_docs:
        raise EncoderMismatchError(f"{task}: {described} has {encoder.num_docs} document rows but a map of "
                                   f"{len(trained)}; {retrain}")  # fmt: skip
    rows = keys.merge(trained, on=["user_id", "doc_id"], how="left", sort=False)  # keeps the keys' order
    new = rows["row"].isna().to_numpy()
    gone = len(trained) - int(rows.loc[~new, "row"].nunique())
    if known_only or allow_new:
        rows, new = rows.loc[~new].reset_index(drop=True), np.zeros((~new).sum(), dtype=bool)
        gone = 0 if known_only else gone
    if new.any() or gone:
        eg = [f"{u}/{d}" for u, d in rows.loc[new, ["user_id", "doc_id"]].head(3).itertuples(index=False)]
        if gone and len(eg) < 3:
            left = trained.merge(keys, on=["user_id", "doc_id"], how="left", indicator=True)
            eg += [f"{u}/{d}" for u, d in left.loc[left["_merge"] == "left_only", ["user_id", "doc_id"]]
                   .head(3 - len(eg)).itertuples(index=False)]  # fmt: skip
        raise EncoderMismatchError(
            f"{task}: {described} was trained on {len(trained)} documents; of the task's {len(keys)} documents that "
            f"may shape other users' results now, {int(new.sum())} are not in its table and {gone} of its rows are "
            f"gone (erased, made private or withdrawn), e.g. {eg}; {retrain}"
        )
    owners, row_of = rows["user_id"].to_numpy(dtype=object), rows["row"].to_numpy(dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]]) if len(owners) else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], len(owners)]
    histories = {str(owners[i]): row_of[i:j].tolist() for i, j in zip(starts, ends, strict=True)}
    users = sorted(set(histories) | _sample_users(con, task))
    return users, histories


def history_version(keys: pa.Table) -> str:
    """``hashing.data_version`` of the keys as one DataFrame, computed a record batch at a time."""
    digest = hashlib.sha256(",".join(keys.column_names).encode())
    for batch in keys.to_batches(max_chunksize=65_536):
        digest.update(pd.util.hash_pandas_object(batch.to_pandas(), index=False).to_numpy().tobytes())
    digest.update(b"|")
    return digest.hexdigest()[:16]


def load_probe(con, task: str, default_share: bool = True) -> Probe:
    """The load-back probe of a task: first users' histories, first dev queries, first documents of the encoder's
    table (shareable ones: the probe's scores are a table row every user's models are judged by), CFRAG e_u."""
    users, histories, matrix, keys = task_histories(con, task, default_share)
    dev = con.execute(
        "SELECT s.sample_id, s.user_id, s.query, q.embedding FROM lamp_samples s JOIN query_embeddings q "
        "USING (task, sample_id) WHERE task = ? AND s.split = 'dev' ORDER BY s.sample_id LIMIT ?",
        [task, PROBE_ROWS],
    ).df()
    first = keys.slice(0, PROBE_DOCS).select(["user_id", "doc_id"])
    con.register("_probe_docs", first.append_column("i", pa.array(np.arange(first.num_rows))))
    try:
        texts = [t for (t,) in con.execute(
            "SELECT p.text FROM _probe_docs k JOIN profile_documents p USING (user_id, doc_id) WHERE p.task = ? "
            "ORDER BY k.i", [task]).fetchall()]  # fmt: skip
    finally:
        con.unregister("_probe_docs")
    emb = {}
    if table_exists(con, "cfrag_user_embeddings"):
        frame = read_rows(con, "cfrag_user_embeddings", {"task": task})
        emb = dict(zip(frame["user_id"], frame["embedding"], strict=True))
    user_emb = (
        np.stack([np.asarray(emb[u], dtype=np.float32) for u in dev["user_id"]])
        if emb and all(u in emb for u in dev["user_id"])
        else np.zeros((0, 0), dtype=np.float32)
    )
    return Probe(
        histories=[histories.get(u, []) for u in users[:PROBE_ROWS]],
        queries=column_to_matrix(dev["embedding"].tolist()),
        query_texts=dev["query"].tolist(),
        user_emb=user_emb,
        doc_vectors=matrix[:PROBE_DOCS],
        doc_texts=texts,
    )


def model_row(con, task: str, kind: str) -> dict[str, Any]:
    """The ``cfrag_models`` row of the model a training asset registered last for the task."""
    if not table_exists(con, MODELS_TABLE):
        raise LookupError(f"table {MODELS_TABLE} does not exist: materialize the CFRAG training assets first")
    frame = read_rows(con, MODELS_TABLE, {"task": task, "kind": kind})
    if frame.empty:
        raise LookupError(f"no {kind} registered for {task}: materialize its training asset first")
    return frame.iloc[0].to_dict()


def models_row(
    task: str,
    kind: str,
    entry: Any,
    version_of_data: str,
    curve: Sequence[float],
    probe: Sequence[float],
    seconds: float,
    folder: Path,
) -> pd.DataFrame:
    """The ``cfrag_models`` row of a registered version (entry: prag_models.mlops.registry.RegisteredVersion)."""
    start, end = loss_trend(curve)
    return pd.DataFrame(
        [
            {
                "task": task,
                "kind": kind,
                "registered_name": entry.name,
                "version": entry.version,
                "run_id": entry.run_id,
                "aliases": ",".join(entry.aliases),
                "data_version": version_of_data,
                "steps": len(curve),
                "loss_start": start,
                "loss_end": end,
                "loss_curve": [float(v) for v in curve],
                "probe_scores": [float(v) for v in probe],
                "train_seconds": round(seconds, 3),
                "local_path": str(folder),
                "trained_at": pd.Timestamp.now(tz="UTC").tz_localize(None),
            }
        ]
    )


def neighbour_lists(con, task: str) -> dict[str, list[str]]:
    """Each user's CFRAG similar users in rank order (the user itself first with include_self)."""
    out: dict[str, list[str]] = {}
    for user, nb in con.execute(
        "SELECT user_id, neighbour_id FROM cfrag_similar_users WHERE task = ? ORDER BY user_id, rank", [task]
    ).fetchall():
        out.setdefault(user, []).append(nb)
    return out


def mean_embedding_neighbours(con, task: str, settings: Settings) -> dict[str, list[str]]:
    """Top-m users by the MEAN-of-documents user embeddings (table user_embeddings): ablation §2.8."""
    from prag_models.methods.cfrag.user_encoder import top_m_similar_users

    users = read_rows(con, "user_embeddings", {"task": task}, order_by="user_id")
    ids = users["user_id"].tolist()
    found, _ = top_m_similar_users(
        column_to_matrix(users["embedding"].tolist()), settings.cfrag.top_m_users, settings.cfrag.include_self
    )
    return {ids[i]: [ids[int(j)] for j in found[i]] for i in range(len(ids))}


def cfrag_user_embedding_rows(
    con, task: str, model: Any, default_share: bool, described: str = "the user encoder"
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """e_u of every user of the task from a (registered) user encoder, its histories by the encoder's own
    document-row map (``encoder_histories``: any mismatch is an error, never a shifted history)."""
    from prag_models.methods.cfrag.probes import single_thread
    from prag_models.methods.cfrag.user_encoder import encode_users

    users, histories = encoder_histories(con, task, model, default_share, described)
    with single_thread():
        vectors = encode_users(model, [histories.get(u, []) for u in users])
    frame = pd.DataFrame({"task": task, "user_id": users, "embedding": list(vectors)})
    return frame, {"users": len(users), "without_history": sum(1 for u in users if u not in histories)}


def mean_vectors(con, task: str, ids: Sequence[str]) -> np.ndarray:
    """The mean document embedding of each of the given users (table user_embeddings; zero without one)."""
    means = read_rows(con, "user_embeddings", {"task": task})
    if means.empty:
        raise LookupError(f"cfrag.user_vectors = 'mean' needs the user_embeddings of {task}: materialize them first")
    return _vectors_of(dict(zip(means["user_id"], means["embedding"], strict=True)), ids)


@dataclass(frozen=True)
class ConsentUsers:
    """The consent-cost scenario's users (docs/privacy.md): who is opted out, the e_u the user encoder gives an empty
    history (a user who shares nothing gets it in the graph) and every user's z_u without the opted-out users'
    documents (``stages.users.user_embedding_rows`` with them withheld; for cfrag.user_vectors = "mean")."""

    opted_out: frozenset[str]
    empty_history: np.ndarray
    means: Mapping[str, np.ndarray]


def ranking_vectors(
    con, task: str, settings: Settings, consent: ConsentUsers | None = None
) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """The task's CFRAG users (cfrag_user_embeddings order) and the vectors that rank their similar users:
    cfrag.user_vectors picks e_u ("encoder") or the mean document embedding ("mean", zero for a user without one),
    blended with taste when clustering.user_similarity = taste | blend (users/taste.py). ``consent``: as in its
    scenario (the opted-out users' e_u that of an empty history, z_u without their documents, no taste of theirs)."""
    from prag_models.methods.knobs import withheld_similarity_vectors

    users = read_rows(con, "cfrag_user_embeddings", {"task": task}, order_by="user_id")
    ids = users["user_id"].tolist()
    vectors = column_to_matrix(users["embedding"].tolist())
    withheld: frozenset[str] = frozenset()
    if consent is not None and consent.opted_out:
        withheld = consent.opted_out
        vectors[np.isin(ids, sorted(withheld))] = consent.empty_history
    if settings.cfrag.user_vectors == "mean":
        vectors = mean_vectors(con, task, ids) if consent is None else _vectors_of(consent.means, ids)
    ranked, similarity = withheld_similarity_vectors(con, task, settings, ids, vectors, withheld)
    return ids, ranked, {"user_vectors": settings.cfrag.user_vectors, **similarity}


def _vectors_of(by_user: Mapping[str, np.ndarray], ids: Sequence[str]) -> np.ndarray:
    """One row per id (zeros for an id without a vector)."""
    dim = len(next(iter(by_user.values())))
    return column_to_matrix([by_user.get(u, np.zeros(dim, dtype=np.float32)) for u in ids], dim)


def similar_user_lists(
    con, task: str, settings: Settings, consent: ConsentUsers | None = None
) -> dict[str, list[str]]:
    """Each user's top-m similar users under the settings (what cfrag_similar_users would hold; ``consent``: in the
    consent-cost scenario), in memory."""
    from prag_models.methods.cfrag.user_encoder import top_m_similar_users

    ids, vectors, _ = ranking_vectors(con, task, settings, consent)
    found, _ = top_m_similar_users(vectors, settings.cfrag.top_m_users, settings.cfrag.include_self)
    return {ids[i]: [ids[int(j)] for j in found[i]] for i in range(len(ids))}


def cfrag_similar_user_rows(con, task: str, settings: Settings) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Top-m users by cosine (FAISS) of the vectors of ``ranking_vectors`` with the task's tuned CFRAG knobs, the user
    itself first with include_self (§2.3). On the demo, the pool precision of the m users' documents against the
    planted communities."""
    from prag_models.methods.cfrag.tuning import tuned_cfrag_settings
    from prag_models.methods.cfrag.user_encoder import top_m_similar_users
    from prag_models.users.pool_quality import documents_per_user, neighbour_pool_precision, planted_from_table

    settings = tuned_cfrag_settings(con, task, settings)
    c = settings.cfrag
    ids, vectors, similarity = ranking_vectors(con, task, settings)
    found, scores = top_m_similar_users(vectors, c.top_m_users, c.include_self)
    rows = [
        (task, ids[i], ids[int(j)], rank, float(s))
        for i in range(len(ids))
        for rank, (j, s) in enumerate(zip(found[i], scores[i], strict=True), 1)
    ]
    frame = pd.DataFrame(rows, columns=["task", "user_id", "neighbour_id", "rank", "similarity"])
    entry = {"users": len(ids), "pairs": len(frame), "m": int(found.shape[1]), **similarity}
    planted = planted_from_table(con, task)
    if planted:
        pools = {ids[i]: [ids[int(j)] for j in found[i]] for i in range(len(ids))}
        entry["pool_precision"] = neighbour_pool_precision(pools, documents_per_user(con, task), planted)
    return frame, entry
