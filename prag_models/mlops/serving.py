"""Serve one personalized LaMP answer for a user: the users to draw on, retrieval, the prompt and the generation.

Everything here takes already-loaded models and DataFrames (the caller reads DuckDB and MLflow: ``prag answer`` in
``prag_assets/cli/commands.py``) and uses the same functions the graph's retrieval assets use: ClusterRAG profile modes
(``methods.clusterrag``) and the full CFRAG variant (``candidates.per_user_top_k`` with the trained retriever, the
personalized reranker, ``pipeline.top_final``). A user unknown to the tables gets the graph's cold-start rules:
ClusterRAG z_u = the query embedding (docs/methods.md §3.6, ``mean_user_embeddings``), placed in the current
clustering like
an incrementally added user (``assign_to_reference``) and given its intra-cluster top-k neighbours; CFRAG e_u = the
user encoder on an empty history (as ``cfrag_user_embeddings`` encodes users without documents) and its top-m users
by cosine, the user itself first with ``cfrag.include_self``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.tasks import ITEM_FIELDS, extract_query
from prag_models.generation.answers import answer_cached, lamp_prompt
from prag_models.generation.prompts import agreement, parse_output, prompt_document
from prag_models.methods import clusterrag
from prag_models.methods.profiles import ProfileIndex, Retrieved, text_keys_of
from prag_models.storage.store import column_to_matrix
from prag_models.users.embeddings import mean_user_embeddings, normalize_rows

if TYPE_CHECKING:
    import duckdb

    from prag_models.llm.base import Generator

#: Methods ``prag answer`` serves.
SERVING_METHODS: tuple[str, ...] = ("cfrag", "clusterrag_collaborative", "clusterrag_hybrid", "item_cf")


@dataclass
class TaskDocuments:
    """A task's profile index and the prompt text of each of its rows."""

    index: ProfileIndex
    prompt_docs: list[str]


@dataclass
class ServedUser:
    """Whose documents a user's retrieval may use, and how that was decided."""

    user_id: str
    cold_start: bool
    neighbours: list[str]
    how: str
    embedding: np.ndarray | None = None  # CFRAG e_u (None for ClusterRAG)


@dataclass
class ServedAnswer:
    """One answer: the retrieved documents (with the user each came from), the prompt and the generation."""

    task: str
    method: str
    user: ServedUser
    query: str
    retrieved: list[Retrieved]
    documents: list[str]
    prompt: str
    output: str
    prediction: str
    models: dict[str, str] = field(default_factory=dict)


def task_documents(task: str, docs: pd.DataFrame) -> TaskDocuments:
    """Index a task's documents (doc_id, user_id, text, fields_json, embedding, shareable; in user/profile order),
    with each document's item (``data.tasks.ITEM_FIELDS``); without a ``shareable`` column no document leaves its
    owner (docs/privacy.md)."""
    if docs.empty:
        raise LookupError(f"no profile documents for {task}: materialize the graph for this task first")
    fields = [json.loads(f or "{}") for f in docs["fields_json"]]
    item = ITEM_FIELDS.get(task)
    items = [str(f.get(item, t)) if item else t for t, f in zip(docs["text"], fields, strict=True)]
    index = ProfileIndex(
        docs["doc_id"].tolist(),
        docs["user_id"].tolist(),
        docs["text"].tolist(),
        column_to_matrix(docs["embedding"].tolist()),
        docs["shareable"].to_numpy(dtype=bool) if "shareable" in docs else None,
        text_keys_of(docs["text"].tolist()),
        text_keys_of(items),
    )
    shown = [prompt_document(task, t, f) for t, f in zip(docs["text"], fields, strict=True)]
    return TaskDocuments(index, shown)


_DOCS_SQL = (
    "SELECT p.doc_id, p.user_id, p.text, p.fields_json, e.embedding, e.model_id FROM profile_documents p "
    "JOIN document_embeddings e USING (task, user_id, doc_id) WHERE task = ? ORDER BY p.user_id, p.position"
)


def read_task_documents(con: duckdb.DuckDBPyConnection, task: str, default_share: bool) -> pd.DataFrame:
    """A task's documents with their embeddings, embedder id and sharing flag (``privacy.default_share`` for users
    without a stated consent), in user/profile order (``task_documents``' input)."""
    from prag_models.privacy.rules import shareable_flags

    docs = con.execute(_DOCS_SQL, [task]).df()
    return docs.assign(shareable=shareable_flags(con, task, docs["user_id"].tolist(), docs["doc_id"].tolist(),
                                                 default_share))


#: DuckDB's memory while the served model sorts a task's documents at load (beyond it the sort spills to disk): the
#: vectors are held once, in the model's own matrix, not a second time in DuckDB's buffers.
LOAD_MEMORY_LIMIT = "2GB"


def read_task_index(con: duckdb.DuckDBPyConnection, task: str, default_share: bool) -> tuple[ProfileIndex, set[str]]:
    """A task's profile index for serving and the embedder ids of its documents, in (user, position) order, with each
    document's item key (``task_tables.item_key_sql``: item_cf gathers an item's documents by it). The rows stream in
    record batches straight into one float32 matrix (no DataFrame of per-row arrays, no second copy of the vectors, no
    prompt text per document: at 3.7 M documents the matrix is most of the memory)."""
    from prag_models.methods.task_tables import item_key_sql
    from prag_models.privacy.rules import shareable_mask

    docs = "FROM profile_documents p JOIN document_embeddings e USING (task, user_id, doc_id) WHERE task = ?"
    n = con.execute(f"SELECT count(*) {docs}", [task]).fetchone()[0]
    if n == 0:
        raise LookupError(f"no profile documents for {task}: materialize the graph for this task first")
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    con.execute(f"SET memory_limit = '{LOAD_MEMORY_LIMIT}'")
    try:
        sql = (f"SELECT p.doc_id, p.user_id, p.text, e.embedding, e.model_id, {item_key_sql(task)} AS item_key {docs} "
               "ORDER BY p.user_id, p.position")  # fmt: skip
        vectors, doc_ids, user_ids, texts, items, models, at = None, [], [], [], [], set(), 0
        for batch in con.sql(sql, params=[task]).to_arrow_reader(65_536):
            part = column_to_matrix(batch.column("embedding"))
            if vectors is None:
                vectors = np.empty((n, part.shape[1]), dtype=np.float32)
            vectors[at : at + len(part)], at = part, at + len(part)
            doc_ids += batch.column("doc_id").to_pylist()
            user_ids += batch.column("user_id").to_pylist()
            texts += batch.column("text").to_pylist()
            items.append(batch.column("item_key").to_numpy(zero_copy_only=False))
            models |= set(batch.column("model_id").unique().to_pylist())
    finally:
        con.execute(f"SET memory_limit = '{limit}'")
    shareable = shareable_mask(con, task, user_ids, doc_ids, default_share)
    item_keys = np.concatenate(items).astype(np.uint64)
    return ProfileIndex(doc_ids, user_ids, texts, vectors, shareable, text_keys_of(texts), item_keys), models


def encode_task_users(
    con: duckdb.DuckDBPyConnection, task: str, encoder: Any, settings: Settings, described: str = "the user encoder"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """e_u of every user of the task by ``encoder`` and their top-m similar users, computed as the graph's
    ``cfrag_user_embeddings`` and ``cfrag_similar_users`` do (docs/methods.md §2.1, §2.3). The histories come from the
    encoder's stored document-row map: documents added since it was trained are left out (a served champion after
    `prag ingest` reads the histories it knows; a new user starts empty), a row of its table that is gone (erased,
    private, withdrawn) refuses (``EncoderMismatchError``)."""
    from prag_models.methods.cfrag.probes import single_thread
    from prag_models.methods.cfrag.tables import encoder_histories, mean_vectors
    from prag_models.methods.cfrag.user_encoder import encode_users, top_m_similar_users
    from prag_models.users.taste import similarity_vectors

    users, histories = encoder_histories(con, task, encoder, settings.privacy.default_share, described,
                                         allow_new=True)  # fmt: skip
    with single_thread():
        vectors = encode_users(encoder, [histories.get(u, []) for u in users])
    c = settings.cfrag
    ranking = mean_vectors(con, task, users) if c.user_vectors == "mean" else vectors  # as the version was tuned
    # blended with taste as clustering.user_similarity says, like cfrag_similar_users (methods/cfrag/tables.py)
    ranking, _ = similarity_vectors(con, task, settings, users, ranking)
    found, scores = top_m_similar_users(ranking, c.top_m_users, c.include_self)
    similar = pd.DataFrame(
        [(users[i], users[int(j)], rank, float(s)) for i in range(len(users))
         for rank, (j, s) in enumerate(zip(found[i], scores[i], strict=True), 1)],
        columns=["user_id", "neighbour_id", "rank", "similarity"],
    )  # fmt: skip
    return pd.DataFrame({"user_id": users, "embedding": list(vectors)}), similar


def _ranked(frame: pd.DataFrame, user_id: str) -> list[str]:
    """A user's neighbours from a similar-users table (user_id, neighbour_id, rank) in rank order."""
    rows = frame[frame["user_id"] == user_id].sort_values("rank")
    return rows["neighbour_id"].tolist()


def clusterrag_user(
    user_id: str,
    query_vector: np.ndarray,
    similar: pd.DataFrame,
    clusters: pd.DataFrame,
    user_vectors: pd.DataFrame,
    reference: pd.DataFrame | None,
    settings: Settings,
) -> ServedUser:
    """A known user's stored similar users; an unknown user's cold start (z_u = query, assigned, intra-cluster top-k).

    ``clusters``: user_clusters rows (user_id, cluster); ``user_vectors``: user_embeddings rows (user_id, embedding);
    ``reference``: the clustering reference (``users.incremental.reference_clustering``), needed for a cold start.
    """
    from prag_models.users.incremental import assign_to_reference
    from prag_models.users.similar import intra_cluster_neighbours

    if user_id in set(clusters["user_id"]):
        return ServedUser(user_id, False, _ranked(similar, user_id), "similar_users (current clustering)")
    if reference is None or reference.empty or clusters.empty:
        raise LookupError("no user clustering to place a new user in: materialize user_clusters first")
    q = np.asarray(query_vector, dtype=np.float32)
    z, _, _ = mean_user_embeddings([user_id], [], np.zeros((0, len(q)), dtype=np.float32), {user_id: q})
    fit = reference[reference["embedding"].notna()]
    next_id = int(clusters["cluster"].max()) + 1
    labels, _ = assign_to_reference(
        column_to_matrix(fit["embedding"].tolist()), fit["fit_cluster"].to_numpy(), z, settings.clustering, next_id
    )
    cluster = int(labels[0])
    members = clusters.loc[clusters["cluster"] == cluster, "user_id"].tolist()
    vectors = user_vectors.set_index("user_id").loc[members, "embedding"].tolist() if members else []
    matrix = np.vstack([column_to_matrix(vectors, dim=len(q)), z])
    labels = np.full(len(members) + 1, cluster)
    rows = intra_cluster_neighbours([*members, user_id], matrix, labels, settings.clustering.similar_users)
    found = [nb for u, nb, _, _ in sorted(rows, key=lambda r: r[2]) if u == user_id]
    return ServedUser(user_id, True, found, f"cold start: z_u = query embedding, assigned to cluster {cluster}")


def cfrag_user(
    user_id: str,
    user_vectors: pd.DataFrame,
    similar: pd.DataFrame,
    settings: Settings,
    encoder: Any = None,
) -> ServedUser:
    """A known user's stored e_u and CFRAG similar users; an unknown user's e_u from the encoder on an empty history.

    ``user_vectors``: cfrag_user_embeddings rows (user_id, embedding); ``similar``: cfrag_similar_users rows;
    ``encoder``: the user encoder that produced ``user_vectors`` (needed for a cold start only).
    """
    known = user_vectors[user_vectors["user_id"] == user_id]
    if len(known):
        e_u = np.asarray(known["embedding"].iloc[0], dtype=np.float32)
        return ServedUser(user_id, False, _ranked(similar, user_id) or [user_id], "cfrag_similar_users", e_u)
    if encoder is None:
        raise ValueError(f"user {user_id!r} has no CFRAG embedding: a cold start needs the user encoder")
    from prag_models.methods.cfrag.user_encoder import encode_users

    e_u = encode_users(encoder, [[]])[0]
    ids = user_vectors["user_id"].tolist()
    stored = normalize_rows(column_to_matrix(user_vectors["embedding"].tolist(), dim=len(e_u)))
    scores = stored @ normalize_rows(e_u[None])[0]
    c = settings.cfrag
    others = [ids[int(i)] for i in np.argsort(-scores, kind="stable")]
    found = [user_id, *others[: c.top_m_users - 1]] if c.include_self else others[: c.top_m_users]
    return ServedUser(user_id, True, found, "cold start: e_u = user encoder on an empty history, top-m by cosine", e_u)


def retrieve(
    method: str,
    documents: TaskDocuments,
    user: ServedUser,
    query: str,
    query_vector: np.ndarray,
    settings: Settings,
    models: Mapping[str, Any] | None = None,
) -> list[Retrieved]:
    """The method's final documents for one query, as the retrieval assets compute them."""
    index, q = documents.index, np.asarray(query_vector, dtype=np.float32)
    if method.startswith("clusterrag_") and method.removeprefix("clusterrag_") in clusterrag.PROFILE_MODES:
        mode = method.removeprefix("clusterrag_")
        return clusterrag.retrieve_profile_mode(index, mode, user.user_id, user.neighbours, q, settings.retrieval.k)
    if method == "item_cf":  # models["user_vectors"]: every user's vector of the method's user similarity
        from prag_models.methods.item_cf import ItemCfRetriever

        if not models or "user_vectors" not in models:
            raise ValueError("item_cf needs the users' vectors (models['user_vectors'])")
        c = settings.item_cf
        found = ItemCfRetriever(index, models["user_vectors"], c.sharpness, c.shortlist)
        return found.retrieve(user.user_id, q, settings.retrieval.k)
    if method != "cfrag":
        raise ValueError(f"unknown serving method {method!r}; known: {', '.join(SERVING_METHODS)}")
    if not models or not {"retriever", "reranker"} <= set(models) or user.embedding is None:
        raise ValueError("CFRAG needs the retriever, the reranker and the user's e_u")
    from prag_models.methods.cfrag import inference
    from prag_models.methods.cfrag.variants import VARIANTS

    query_ = inference.CfragQuery("served", user.user_id, query, q, np.asarray(user.embedding, dtype=np.float32))
    full = [v for v in VARIANTS if v.method == "cfrag"]
    found = inference.retrieve(index, [query_], {"encoder": {user.user_id: user.neighbours}}, models, settings, full)
    return found[("served", "cfrag")]


def answer(
    task: str,
    method: str,
    user_input: str,
    user: ServedUser,
    documents: TaskDocuments,
    query_vector: np.ndarray,
    settings: Settings,
    generator: Generator,
    con: duckdb.DuckDBPyConnection,
    models: Mapping[str, Any] | None = None,
    model_uris: Mapping[str, str] | None = None,
) -> ServedAnswer:
    """Retrieve, build the budgeted LaMP prompt and answer it through the generation cache."""
    query = extract_query(task, user_input)
    found = retrieve(method, documents, user, query, query_vector, settings, models)
    shown = [agreement(documents.prompt_docs[r.row], r.writers) for r in found]  # "(3 users) …" where counted
    prompt = lamp_prompt(task, user_input, shown, generator, settings.prompt)
    users = [[user.user_id, *shown_users(documents.index, user.user_id, found)]]  # the cache's provenance
    outputs, _ = answer_cached(task, generator, [prompt], settings.generator, con, users=users)
    return ServedAnswer(
        task, method, user, query, found, shown, prompt, outputs[0], parse_output(task, outputs[0]),
        dict(model_uris or {}),
    )  # fmt: skip


def shown_users(index: ProfileIndex, user_id: str, found: list[Retrieved]) -> list[str]:
    """Whose data a prompt shows: each document's source user and, for a text counted as written by several users,
    every one of them (the count is their data too: what `prag forget` deletes a cached answer by)."""
    names = index.owners.names
    who = [r.source_user_id for r in found]
    who += [names[c] for r in found if r.writers > 1 for c in index.writers(user_id, r.row)]
    return list(dict.fromkeys(who))


def item_cf_user(user_id: str, user_vectors: Mapping[str, np.ndarray], similarity: str) -> ServedUser:
    """item_cf's view of the asker: every user it may see votes, weighed by ``similarity`` to the asker's vector (a
    user without one, e.g. new, weighs every author alike: the crowd's majority)."""
    known = user_id in user_vectors
    how = f"item_cf: every user it may see votes, weighed by {similarity} similarity" + (
        "" if known else " (new user: no vector, every author weighs the same)")  # fmt: skip
    return ServedUser(user_id, not known, [], how, user_vectors.get(user_id))


def format_answer(result: ServedAnswer, width: int = 160) -> str:
    """The answer as printable lines: models, the users drawn on, each document with its source user, the output."""
    u = result.user
    lines = [f"task {result.task}, user {u.user_id} ({'new user' if u.cold_start else 'known user'}), "
             f"method {result.method}"]  # fmt: skip
    lines += [f"model {kind}: {uri}" for kind, uri in result.models.items()]
    lines.append(f"similar users ({u.how}): {', '.join(u.neighbours) or 'none'}")
    lines.append(f"query: {_short(result.query, width)}")
    if not result.retrieved:
        lines.append("retrieved documents: none (the prompt has no profile)")
    else:
        lines.append(f"retrieved documents ({len(result.retrieved)}):")
    for rank, (r, text) in enumerate(zip(result.retrieved, result.documents, strict=True), 1):
        own = " (own)" if r.source_user_id == u.user_id else ""
        also = f", written by {r.writers} users" if r.writers > 1 else ""
        lines.append(f"  {rank}. from user {r.source_user_id}{own}{also}, doc {r.doc_id}, score {r.score:.4f}: "
                     f"{_short(text, width)}")  # fmt: skip
    lines.append(f"generation: {result.output.strip()}")
    lines.append(f"answer: {result.prediction}")
    return "\n".join(lines)


def _short(text: str, width: int) -> str:
    """One line of at most ``width`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."
