"""The knobs of ClusterRAG and item_cf that decide what they can find, and the methods' inputs rebuilt for a choice of
them (docs/methods.md §3.9, §5.2): the user clusters for HDBSCAN's minimum cluster size, the neighbours of each user
for a neighbour count and user similarity, the community-wide retriever for a user weight, pool size and user
similarity, and item_cf for its vote sharpness and user similarity.

At the configured minimum cluster size the user clusters are those of the user_clusters table (a tuned user
similarity then changes who ranks as a neighbour inside a cluster and the community term cos(z_u, z_author), not the
clusters); another size re-clusters the users' vectors of the chosen user similarity as the user_clusters stage does.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import numpy as np

from prag_models.config.settings import Settings
from prag_models.methods.community import CommunityRetriever
from prag_models.methods.item_cf import ItemCfRetriever, item_cf_retriever
from prag_models.methods.profiles import ProfileIndex
from prag_models.methods.task_tables import clustered_users
from prag_models.storage.store import column_to_matrix
from prag_models.users.clustering import fit_clustering
from prag_models.users.embeddings import normalize_rows
from prag_models.users.similar import neighbour_arrays

#: HDBSCAN's minimum cluster sizes the search may choose (the configured one is always trial 0's).
MIN_CLUSTER_SIZES: tuple[int, ...] = (2, 4, 8, 16)

#: Per tunable method, each knob (``section.field`` of Settings) and the values the search may choose from.
KNOB_SPACE: dict[str, dict[str, tuple[Any, ...]]] = {
    "clusterrag_collaborative": {
        "clustering.similar_users": (1, 2, 3, 4, 6, 8, 12),
        "clustering.user_similarity": ("content", "taste", "blend"),
        "clustering.min_cluster_size": MIN_CLUSTER_SIZES,
    },
    "clusterrag_community": {
        "clustering.community_user_weight": (0.0, 0.25, 0.5, 1.0, 2.0),
        "clustering.community_top_n": (0, 4, 8, 16, 32),
        "clustering.user_similarity": ("content", "taste", "blend"),
        "clustering.min_cluster_size": MIN_CLUSTER_SIZES,
    },
    "item_cf": {
        "item_cf.sharpness": (0.0, 1.0, 2.0, 4.0, 8.0, 16.0),
        "clustering.user_similarity": ("content", "taste", "blend"),
    },
}

#: CFRAG's knobs (docs/methods.md §2.9), tuned before its training so that the feedback candidates, the trained
#: models, the registered versions and serving all use the chosen values: similar users m (2 and up: the feedback
#: needs candidates from more than one user), documents per similar user at inference, the retriever's starting α
#: and which user vectors rank the similar users.
CFRAG_KNOB_SPACE: dict[str, tuple[Any, ...]] = {
    "cfrag.top_m_users": (2, 3, 4, 6, 8, 12),
    "cfrag.inference_docs_per_user": (1, 2, 4, 8),
    "cfrag.alpha": (0.1, 0.3, 0.5, 0.7, 0.9),
    "cfrag.user_vectors": ("encoder", "mean"),
}


def read_tuned_table(con, table: str, task: str) -> dict[str, dict[str, Any]]:
    """A tuned-settings table's values of a task per method (empty when the table or its rows are missing)."""
    import json

    from prag_models.storage.store import table_exists

    if not table_exists(con, table):
        return {}
    out: dict[str, dict[str, Any]] = {}
    rows = con.execute(f"SELECT method, knob, value FROM {table} WHERE task = ? ORDER BY method, knob", [task])
    for method, knob, value in rows.fetchall():
        out.setdefault(method, {})[knob] = json.loads(value)
    return out


def knob_values(settings: Settings, knobs: Iterable[str]) -> dict[str, Any]:
    """The settings' value of every ``section.field`` knob."""
    return {knob: getattr(getattr(settings, knob.split(".")[0]), knob.split(".")[1]) for knob in knobs}


def method_space(settings: Settings, method: str) -> dict[str, tuple[Any, ...]]:
    """A method's knobs and values under these settings: HDBSCAN's minimum cluster size (with the configured one)
    only when the users are clustered by HDBSCAN (k-means has no such knob)."""
    space = dict(KNOB_SPACE[method])
    if settings.clustering.algorithm != "hdbscan":
        space.pop("clustering.min_cluster_size", None)
    elif "clustering.min_cluster_size" in space:  # the configured size is trial 0's even when outside the list
        space["clustering.min_cluster_size"] = tuple(sorted({*MIN_CLUSTER_SIZES, settings.clustering.min_cluster_size}))
    return space


def default_values(settings: Settings, method: str) -> dict[str, Any]:
    """The configured (untuned) value of every knob of a method."""
    return knob_values(settings, method_space(settings, method))


def with_knobs(settings: Settings, values: Mapping[str, Any]) -> Settings:
    """Settings with the given ``section.field`` values replaced (Settings is frozen: copies)."""
    updates: dict[str, dict[str, Any]] = {}
    for knob, value in values.items():
        section, name = knob.split(".")
        updates.setdefault(section, {})[name] = value
    return settings.model_copy(
        update={s: getattr(settings, s).model_copy(update=fields) for s, fields in updates.items()}
    )


def withheld_similarity_vectors(
    con, task: str, settings: Settings, ids: list[str], content: np.ndarray, withheld: Collection[str] = ()
) -> tuple[np.ndarray, dict[str, Any]]:
    """``users.taste.similarity_vectors`` (rows of ids, what was used), except that the documents of the ``withheld``
    users (the consent-cost scenario's opted-out users) shape no taste vector: they are left out of the item clusters
    and labels, and a withheld user is compared by its ``content`` row alone, like a user without labelled documents."""
    from prag_models.users.taste import combine, similarity_vectors

    c = settings.clustering
    kept = np.asarray([u not in withheld for u in ids], dtype=bool)
    if kept.all() or c.user_similarity == "content":
        return similarity_vectors(con, task, settings, ids, content)
    shaped, info = similarity_vectors(con, task, settings, [u for u, k in zip(ids, kept, strict=True) if k],
                                      content[kept])  # fmt: skip
    out = np.zeros((len(ids), shaped.shape[1]), dtype=np.float32)
    out[kept] = shaped
    no_taste = np.zeros((int((~kept).sum()), shaped.shape[1] - content.shape[1]), dtype=np.float32)
    out[~kept] = combine(content[~kept], no_taste, c.user_similarity, c.taste_weight)
    return out, {**info, "withheld_users": int((~kept).sum())}


class UserSpace:
    """A task's clustered users, with their similarity vectors per user-similarity mode computed once.

    By default the users of the user_clusters table with their stored z_u and clusters. The consent-cost scenario
    (docs/privacy.md) passes ``users`` (user_id, embedding: its z_u, no cluster column) and ``withheld`` (the users it
    opts out): their documents then shape no taste vector and the users are clustered afresh, as the user_clusters
    stage clusters them (``fit_clustering`` of the configured similarity's vectors)."""

    def __init__(self, con, task: str, settings: Settings, dim: int | None = None, *, users: Any = None,
                 withheld: Collection[str] = ()) -> None:  # fmt: skip
        users = clustered_users(con, task) if users is None else users
        self.con, self.task, self.settings = con, task, settings
        self.withheld = frozenset(withheld)
        self.ids: list[str] = users["user_id"].to_pylist()
        self.content = normalize_rows(column_to_matrix(users["embedding"], dim))
        self._vectors: dict[tuple[str, float], np.ndarray] = {}
        self._clusterings: dict[tuple, np.ndarray] = {}
        if "cluster" in users.column_names:
            self.clusters = users["cluster"].to_numpy().astype(int)
        else:
            fit, _ = fit_clustering(self.vectors(settings), settings.clustering, measure_reduction=False)
            self.clusters = fit.labels

    def vectors(self, settings: Settings) -> np.ndarray:
        """Unit user vectors of the settings' user similarity (rows of ids); a withheld user's documents shape no taste
        vector (:func:`withheld_similarity_vectors`)."""
        c = settings.clustering
        key = (c.user_similarity, c.taste_weight if c.user_similarity == "blend" else 0.0)
        if key not in self._vectors:
            self._vectors[key] = withheld_similarity_vectors(self.con, self.task, settings, self.ids, self.content,
                                                             self.withheld)[0]  # fmt: skip
        return self._vectors[key]

    def prepare(self, settings: Settings, similarities: Iterable[str]) -> None:
        """Compute the user vectors of each user similarity a search may try, before its time budget starts: a
        one-time cost (taste reads every user's labelled items) that must not decide how many trials run."""
        for mode in similarities:
            self.vectors(with_knobs(settings, {"clustering.user_similarity": mode}))

    def cluster_labels(self, settings: Settings) -> np.ndarray:
        """Each user's cluster (rows of ids): the user_clusters table's at the configured minimum cluster size, else a
        fit of the settings' user-similarity vectors with the settings' size (cached per vectors and size)."""
        c = settings.clustering
        if c.algorithm != "hdbscan" or c.min_cluster_size == self.settings.clustering.min_cluster_size:
            return self.clusters
        key = (c.user_similarity, c.taste_weight if c.user_similarity == "blend" else 0.0, c.min_cluster_size)
        if key not in self._clusterings:
            self._clusterings[key] = fit_clustering(self.vectors(settings), c, measure_reduction=False)[0].labels
        return self._clusterings[key]

    def neighbours(self, settings: Settings) -> dict[str, list[str]]:
        """Each user's top clustering.similar_users most similar members of its own cluster (self excluded)."""
        clusters = self.cluster_labels(settings)
        rows, nbs, _, _ = neighbour_arrays(self.vectors(settings), clusters, settings.clustering.similar_users)
        found: dict[str, list[str]] = {}
        for u, v in zip(rows.tolist(), nbs.tolist(), strict=True):  # in rank order per user
            found.setdefault(self.ids[u], []).append(self.ids[v])
        return found

    def cluster_summary(self, settings: Settings, planted: Mapping[str, int] | None) -> dict[str, Any]:
        """How many user clusters the settings give and, with planted communities, their adjusted Rand index."""
        from prag_models.users.pool_quality import adjusted_rand

        labels = self.cluster_labels(settings)
        out: dict[str, Any] = {"clusters": int(len(set(labels.tolist())))}
        if planted:
            out["cluster_ari_vs_planted"] = adjusted_rand(self.ids, labels, planted)
        return out

    def groups(self, settings: Settings) -> dict[str, int]:
        """user → cluster under the settings (``cluster_labels``)."""
        return dict(zip(self.ids, self.cluster_labels(settings).tolist(), strict=True))

    def item_cf(self, index: ProfileIndex, settings: Settings) -> ItemCfRetriever:
        """item_cf with the settings' knobs, its votes weighed by the settings' user similarity."""
        return item_cf_retriever(index, self.ids, self.vectors(settings), settings)

    def community(self, index: ProfileIndex, settings: Settings) -> CommunityRetriever:
        """The community-wide retriever with the settings' user weight, pool size and user similarity."""
        c = settings.clustering
        vectors = self.vectors(settings)
        return CommunityRetriever(
            index,
            self.groups(settings),
            dict(zip(self.ids, vectors, strict=True)),
            c.community_user_weight,
            c.community_top_n,
        )
