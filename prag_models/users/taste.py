"""User similarity from taste: how two users label similar items (docs/methods.md §3.8), blended with content.

Items are matched across users by embedding similarity: every profile document falls into one of K item clusters
(k-means over the document embeddings). A user's taste vector holds, per item cluster, the mean of its documents'
label vectors minus the cluster's mean label over all users (shrunk by n/(n+λ) for n documents), so the cosine of
two taste vectors is a centred, user-based-CF agreement over the items both have judged: positive when they label
the same kind of items alike, negative when they label them differently, 0 when they share no item cluster.

The label of a document is what the task asks users to produce: the LaMP-2 tag (one-hot), the LaMP-3 score (a soft
one-hot over 1–5, so 4 is nearer 5 than 1), and for LaMP-1/4/5 the embedding of the document's own title (LaMP-1's
chosen reference is a title) and for LaMP-7 the tweet's own embedding, both reduced by PCA.

``clustering.user_similarity`` chooses what ClusterRAG's clustering and neighbours, the community ranking and
CFRAG's user retrieval compare: ``content`` (z_u, the mean document embedding), ``taste`` (the taste vector; users
without any labelled document fall back to content) or ``blend`` (cos = (1−w)·content + w·taste with
w = ``clustering.taste_weight``).

Only documents that may shape other users' results enter (docs/privacy.md; ``privacy.rules.sharing_rule``: the owner
shares and the document is not private), as for z_u: the item clusters, the label centring and every taste vector,
the owner's own included — a user's taste vector decides other users' neighbour lists. A user without a shareable
labelled document has no taste vector and is compared by content.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from prag_models.users.embeddings import normalize_rows

#: (owners, doc ids) -> which documents may shape other users' results (``privacy.rules.sharing_rule``).
Shaping = Callable[[Any, Any], np.ndarray]

USER_SIMILARITIES: tuple[str, ...] = ("content", "taste", "blend")
#: Output embeddings (LaMP-1/4/5 titles, LaMP-7 tweets) are reduced to this many dimensions before the taste vector.
OUTPUT_DIMS = 16
#: Documents above which the item clusters come from MiniBatchKMeans instead of KMeans.
MINIBATCH_ABOVE = 20_000


@dataclass
class LabelledDocs:
    """The task's profile documents as (author row, unit item embedding, label vector)."""

    owner: np.ndarray  # int, row of the author in the user list
    items: np.ndarray  # (N, d) unit document embeddings
    labels: np.ndarray  # (N, m) label vectors


def rating_vectors(scores: list[str]) -> np.ndarray:
    """LaMP-3 scores as soft one-hot vectors over 1–5 (exp(−(r−j)²/2)): equal scores agree most, far ones least."""
    r = np.asarray([float(s) for s in scores], dtype=np.float64)[:, None]
    return np.exp(-((r - np.arange(1, 6)[None, :]) ** 2) / 2.0)


def tag_vectors(tags: list[str]) -> np.ndarray:
    """LaMP-2 tags (or any categorical label) as one-hot vectors over the tags present."""
    names = sorted(set(tags))
    out = np.zeros((len(tags), max(len(names), 1)))
    out[np.arange(len(tags)), [names.index(t) for t in tags]] = 1.0
    return out


def output_vectors(outputs: np.ndarray, dims: int = OUTPUT_DIMS, seed: int = 0) -> np.ndarray:
    """Output embeddings (titles, tweets) reduced by PCA to at most `dims` dimensions."""
    from prag_models.users.clustering import reduce

    reduced, _ = reduce(np.asarray(outputs, dtype=np.float64), dims, seed)
    return reduced


def item_clusters(items: np.ndarray, k: int = 0, seed: int = 0) -> np.ndarray:
    """Item cluster of every document: k-means (k = 0: round(√(N/2)) clipped to 2…64) on the unit embeddings."""
    n = len(items)
    k = min(n, k or int(np.clip(round(np.sqrt(n / 2)), 2, 64)))
    if k < 2:
        return np.zeros(n, dtype=np.int64)
    from sklearn.cluster import KMeans, MiniBatchKMeans

    model = MiniBatchKMeans if n > MINIBATCH_ABOVE else KMeans
    return model(n_clusters=k, n_init=3, random_state=seed).fit(items).labels_.astype(np.int64)


def taste_vectors(docs: LabelledDocs, n_users: int, k: int = 0, shrink: float = 1.0, seed: int = 0) -> np.ndarray:
    """Unit taste vectors (n_users, K·m): per item cluster the shrunk mean of the user's centred labels (zeros for a
    user without labelled documents)."""
    m = docs.labels.shape[1] if docs.labels.ndim == 2 else 1
    if len(docs.owner) == 0:
        return np.zeros((n_users, m), dtype=np.float32)
    cluster = item_clusters(docs.items, k, seed)
    n_k = int(cluster.max()) + 1
    labels = np.asarray(docs.labels, dtype=np.float64).reshape(len(cluster), m)
    sums = np.zeros((n_k, m))
    np.add.at(sums, cluster, labels)
    centred = labels - (sums / np.bincount(cluster, minlength=n_k)[:, None])[cluster]
    key = np.asarray(docs.owner, dtype=np.int64) * n_k + cluster
    acc = np.zeros((n_users * n_k, m))
    np.add.at(acc, key, centred)
    counts = np.bincount(key, minlength=n_users * n_k)
    return normalize_rows((acc / (counts + shrink)[:, None]).reshape(n_users, n_k * m))


def combine(content: np.ndarray, taste: np.ndarray, mode: str, weight: float) -> np.ndarray:
    """The vectors whose cosine is the configured user similarity (content rows unit; taste rows unit or zero).

    blend: [√(1−w)·c, √w·t], so cos = (1−w)·cos_content + w·cos_taste; taste: w = 1. A user without a taste vector
    keeps its content part alone (w = 0 for that row), so it is compared by content rather than not at all.
    """
    c = normalize_rows(np.asarray(content, dtype=np.float32))
    if mode == "content":
        return c
    if mode not in USER_SIMILARITIES:
        raise ValueError(f"unknown user similarity {mode!r}; known: {list(USER_SIMILARITIES)}")
    w = np.full(len(c), 1.0 if mode == "taste" else float(weight))
    w[np.linalg.norm(taste, axis=1) == 0] = 0.0
    return np.hstack([np.sqrt(1 - w)[:, None] * c, np.sqrt(w)[:, None] * taste]).astype(np.float32)


def _labels(con, task: str, fields: list[dict[str, Any]], items: np.ndarray, settings) -> np.ndarray:
    """The label vector of every document of the task (see the module docstring)."""
    if task == "LaMP-2":
        return tag_vectors([str(f.get("tag", "")) for f in fields])
    if task == "LaMP-3":
        return rating_vectors([str(f.get("score", "3")) for f in fields])
    if task == "LaMP-7" or not fields or "title" not in fields[0]:
        return output_vectors(items, seed=settings.clustering.seed)
    from prag_models.text.embedder import load_embedder
    from prag_models.text.embedding_cache import embed_with_cache

    embedder = load_embedder(settings.embedder)
    titles, _, _ = embed_with_cache(con, embedder.embed, embedder.model_id, [str(f["title"]) for f in fields])
    return output_vectors(titles, seed=settings.clustering.seed)


def labelled_documents(
    con, task: str, user_ids: list[str], settings, shaping: Shaping | None = None
) -> LabelledDocs:
    """The task's documents of user_ids that may shape other users' results, with their item embeddings and label
    vectors (profile order). ``shaping``: that rule (default: the task's sharing rule under
    ``privacy.default_share``); a caller may pass a stricter one (e.g. a consent scenario), never a looser one."""
    from prag_models.privacy.rules import sharing_rule
    from prag_models.storage.store import column_to_matrix

    table = con.sql(
        "SELECT p.user_id, p.doc_id, p.fields_json, e.embedding FROM profile_documents p JOIN document_embeddings e "
        "USING (task, user_id, doc_id) WHERE task = ? ORDER BY p.user_id, p.position, p.doc_id",
        params=[task],
    ).to_arrow_table()
    row = {u: i for i, u in enumerate(user_ids)}
    authors = table["user_id"].to_pylist()
    rule = shaping or sharing_rule(con, task, settings.privacy.default_share)
    keep = np.asarray([a in row for a in authors], dtype=bool) & rule(table["user_id"], table["doc_id"])
    items = column_to_matrix(table["embedding"])[keep] if table.num_rows else np.zeros((0, 1), np.float32)
    fields = [json.loads(f) for f, k in zip(table["fields_json"].to_pylist(), keep, strict=True) if k]
    owner = np.asarray([row[a] for a, k in zip(authors, keep, strict=True) if k], dtype=np.int64)
    labels = _labels(con, task, fields, items, settings) if len(owner) else np.zeros((0, 1))
    return LabelledDocs(owner, normalize_rows(items), labels)


def similarity_vectors(
    con, task: str, settings, user_ids: list[str], content: np.ndarray, shaping: Shaping | None = None
) -> tuple[np.ndarray, dict]:
    """The user vectors the configured clustering.user_similarity compares (rows of user_ids) and what was used;
    taste from the documents that may shape other users' results only (``labelled_documents``)."""
    c = settings.clustering
    if c.user_similarity == "content":
        return normalize_rows(np.asarray(content, dtype=np.float32)), {"user_similarity": "content"}
    docs = labelled_documents(con, task, user_ids, settings, shaping)
    taste = taste_vectors(docs, len(user_ids), c.taste_item_clusters, c.taste_shrinkage, c.seed)
    info = {
        "user_similarity": c.user_similarity,
        "taste_weight": 1.0 if c.user_similarity == "taste" else c.taste_weight,
        "users_with_taste": int((np.linalg.norm(taste, axis=1) > 0).sum()),
        "taste_dims": int(taste.shape[1]),
    }
    return combine(content, taste, c.user_similarity, c.taste_weight), info
