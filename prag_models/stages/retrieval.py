"""Stage 4 (retrieval): documents retrieved for each dev sample by the baselines, by ClusterRAG and by prag's
community-wide and item-based collaborative filtering (docs/methods.md §3.4–3.5, §5)."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.methods import baselines, clusterrag
from prag_models.methods.community import CommunityRetriever
from prag_models.methods.item_cf import ItemCfRetriever, item_cf_retriever
from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.methods.task_tables import clustered_users, read_profile_index
from prag_models.methods.vector_index import CorpusIndex, numpy_blas_threads
from prag_models.stages.consent_cost import consent_scenario, consent_space
from prag_models.stages.tuning import with_tuned_rows
from prag_models.storage.store import column_to_matrix, table_exists
from prag_models.users.embeddings import normalize_rows

RETRIEVAL_COLUMNS = ["task", "method", "sample_id", "user_id", "rank", "doc_id", "source_user_id", "score"]
#: clusterrag_retrievals also says how many users the asker may see wrote each text (item_cf counts; others 1).
CLUSTERRAG_COLUMNS = [*RETRIEVAL_COLUMNS, "writers"]
BASELINE_METHODS = ("random", "recency", "bm25", "dense", "dense_global", "oracle_community")
CLUSTERRAG_METHODS = (
    "clusterrag_user_only",
    "clusterrag_collaborative",
    "clusterrag_hybrid",
    "clusterrag_two_stage",
    "clusterrag_community",
    "item_cf",
)


def load_task_inputs(
    con, task: str, with_neighbours: bool = True, *, default_share: bool
) -> tuple[ProfileIndex, pd.DataFrame, dict[str, list[str]]]:
    """The task's profile index (with its sharing flags; texts read on demand), its dev samples with query vectors
    (rows of one float32 matrix), and each user's similar users."""
    index = read_profile_index(con, task, default_share=default_share)
    table = con.sql(
        "SELECT s.sample_id, s.user_id, s.query, q.embedding FROM lamp_samples s JOIN query_embeddings q "
        "USING (task, sample_id) WHERE task = ? AND s.split = 'dev' ORDER BY s.sample_id",
        params=[task],
    ).to_arrow_table()
    samples = table.drop(["embedding"]).to_pandas()
    samples["embedding"] = list(column_to_matrix(table["embedding"], index.vectors.shape[1]))
    neighbours: dict[str, list[str]] = {}
    if not with_neighbours:
        return index, samples, neighbours
    for user, nb in con.execute(
        "SELECT user_id, neighbour_id FROM similar_users WHERE task = ? ORDER BY user_id, rank", [task]
    ).fetchall():
        neighbours.setdefault(user, []).append(nb)
    return index, samples, neighbours


def query_matrix(samples: pd.DataFrame, dim: int) -> np.ndarray:
    """The samples' query vectors as one (n, d) float32 matrix."""
    return column_to_matrix(samples["embedding"].tolist(), dim)


def by_user(samples: pd.DataFrame) -> list[tuple[str, list[int]]]:
    """Sample positions grouped by user, users in id order (the order the index and its texts are stored in)."""
    groups: dict[str, list[int]] = {}
    for i, user in enumerate(samples["user_id"]):
        groups.setdefault(user, []).append(i)
    return sorted(groups.items())


def _rows(task: str, method: str, sample_id: str, user_id: str, found: list[Retrieved]) -> list[tuple]:
    return [
        (task, method, sample_id, user_id, rank, r.doc_id, r.source_user_id, r.score) for rank, r in enumerate(found, 1)
    ]


def counted_rows(task: str, method: str, sample_id: str, user_id: str, found: list[Retrieved]) -> list[tuple]:
    """Rows of clusterrag_retrievals (CLUSTERRAG_COLUMNS): the retrieval columns and each text's writers."""
    return [(task, method, sample_id, user_id, rank, r.doc_id, r.source_user_id, r.score, r.writers)
            for rank, r in enumerate(found, 1)]  # fmt: skip


def summary(frame: pd.DataFrame) -> dict:
    """Samples and documents per sample of each method in a retrieval table's rows."""
    return {
        m: {"samples": int(g["sample_id"].nunique()), "docs_per_sample": round(len(g) / g["sample_id"].nunique(), 2)}
        for m, g in frame.groupby("method")
    }


def _timed(seconds: dict[str, float] | None, name: str, t0: float) -> None:
    """Add the time since t0 to seconds[name] (when timing is asked for)."""
    if seconds is not None:
        seconds[name] = round(seconds.get(name, 0.0) + time.perf_counter() - t0, 2)


def run_baselines(
    settings: Settings,
    task: str,
    index: ProfileIndex,
    samples: pd.DataFrame,
    planted: dict[str, int] | None = None,
    corpus: CorpusIndex | None = None,
    seconds: dict[str, float] | None = None,
) -> list[tuple]:
    """Random, recency, BM25 and dense retrieval over each sample's own profile; dense over all users' documents
    (not personalized; ``corpus``: exact when None); and, where the planted communities are known (demo), dense over
    the true community."""
    k = settings.retrieval.k
    rng = np.random.default_rng(settings.retrieval.seed)
    rows: list[tuple] = []
    t0 = time.perf_counter()
    queries = query_matrix(samples, index.vectors.shape[1])
    found_global = baselines.retrieve_dense_global(index, samples["user_id"].tolist(), queries, k, corpus)
    for s, found in zip(samples.itertuples(), found_global, strict=True):
        rows += _rows(task, "dense_global", s.sample_id, s.user_id, found)
    _timed(seconds, "dense_global", t0)
    with numpy_blas_threads(1):  # the rest: per-sample loops of small products
        rows += _own_profile_rows(task, index, samples, planted, k, rng, seconds)
    return rows


def _own_profile_rows(
    task: str,
    index: ProfileIndex,
    samples: pd.DataFrame,
    planted: dict[str, int] | None,
    k: int,
    rng: np.random.Generator,
    seconds: dict[str, float] | None,
) -> list[tuple]:
    """oracle_community (where planted communities are known), then random, recency, BM25 and dense per sample."""
    rows: list[tuple] = []
    members: dict[int, list[str]] = {}
    for user, community in (planted or {}).items():
        members.setdefault(community, []).append(user)
    for s in samples.itertuples():
        if planted and s.user_id in planted:
            q = np.asarray(s.embedding, dtype=np.float32)
            found = baselines.retrieve_oracle_community(index, s.user_id, members[planted[s.user_id]], q, k)
            rows += _rows(task, "oracle_community", s.sample_id, s.user_id, found)
    t0 = time.perf_counter()
    texts = samples["query"].tolist()
    bm25 = {i: baselines.retrieve_bm25(index, user, texts[i], k) for user, pos in by_user(samples) for i in pos}
    _timed(seconds, "bm25", t0)
    t0 = time.perf_counter()
    for i, s in enumerate(samples.itertuples()):
        q = np.asarray(s.embedding, dtype=np.float32)
        rows += _rows(task, "random", s.sample_id, s.user_id, baselines.retrieve_random(index, s.user_id, k, rng))
        rows += _rows(task, "recency", s.sample_id, s.user_id, baselines.retrieve_recency(index, s.user_id, k))
        rows += _rows(task, "bm25", s.sample_id, s.user_id, bm25[i])
        rows += _rows(task, "dense", s.sample_id, s.user_id, baselines.retrieve_dense(index, s.user_id, q, k))
    _timed(seconds, "random_recency_dense", t0)
    return rows


def run_clusterrag(
    settings: Settings,
    task: str,
    index: ProfileIndex,
    samples: pd.DataFrame,
    neighbours: dict[str, list[str]],
    community: CommunityRetriever | None = None,
    methods: Collection[str] = CLUSTERRAG_METHODS,
    seconds: dict[str, float] | None = None,
    item_cf: ItemCfRetriever | None = None,
) -> tuple[list[tuple], dict]:
    """The three ClusterRAG profile modes, the two-stage retrieval over the hybrid pool (clustered once per user,
    users one after the other: one pool in memory), the community-wide mode and item_cf (with its retriever);
    ``methods`` limits which run. Rows of CLUSTERRAG_COLUMNS."""
    with numpy_blas_threads(1):  # per-user loops of small products (FAISS keeps its threads)
        rows, cost = _clusterrag(settings, task, index, samples, neighbours, community, methods, seconds)
        if item_cf is not None and "item_cf" in methods:
            t0 = time.perf_counter()
            queries = query_matrix(samples, index.vectors.shape[1])
            found_all = item_cf.retrieve_many(samples["user_id"].tolist(), queries, settings.retrieval.k)
            rows += [r for s, found in zip(samples.itertuples(), found_all, strict=True)
                     for r in counted_rows(task, "item_cf", s.sample_id, s.user_id, found)]  # fmt: skip
            _timed(seconds, "item_cf", t0)
    return [(*r, 1) if len(r) == len(RETRIEVAL_COLUMNS) else r for r in rows], cost


def _clusterrag(
    settings: Settings,
    task: str,
    index: ProfileIndex,
    samples: pd.DataFrame,
    neighbours: dict[str, list[str]],
    community: CommunityRetriever | None,
    methods: Collection[str],
    seconds: dict[str, float] | None,
) -> tuple[list[tuple], dict]:
    """run_clusterrag's work."""
    k, c = settings.retrieval.k, settings.clustering
    rows: list[tuple] = []
    queries = query_matrix(samples, index.vectors.shape[1])
    t0 = time.perf_counter()
    if community is not None and "clusterrag_community" in methods:
        found_all = community.retrieve_many(samples["user_id"].tolist(), queries, k)
        for s, found in zip(samples.itertuples(), found_all, strict=True):
            rows += _rows(task, "clusterrag_community", s.sample_id, s.user_id, found)
    _timed(seconds, "clusterrag_community", t0)
    t0 = time.perf_counter()
    two_stage: dict[int, list[Retrieved]] = {}
    scored, pool_sizes = [], []
    for user, positions in by_user(samples) if "clusterrag_two_stage" in methods else []:
        pool = index.visible_rows(user, clusterrag.profile_users("hybrid", user, neighbours.get(user, [])))
        clusters = clusterrag.cluster_documents(index, pool, c.two_stage_min_cluster_size)
        for i in positions:
            two_stage[i], n_scored = clusterrag.retrieve_two_stage(index, clusters, queries[i], k,
                                                                   c.two_stage_top_clusters)  # fmt: skip
            scored.append(n_scored)
            pool_sizes.append(len(pool))
    _timed(seconds, "clusterrag_two_stage", t0)
    t0 = time.perf_counter()
    modes = [m for m in clusterrag.PROFILE_MODES if f"clusterrag_{m}" in methods]
    for i, s in enumerate(samples.itertuples()):
        nb = neighbours.get(s.user_id, [])
        for mode in modes:
            found = clusterrag.retrieve_profile_mode(index, mode, s.user_id, nb, queries[i], k)
            rows += _rows(task, f"clusterrag_{mode}", s.sample_id, s.user_id, found)
        if i in two_stage:
            rows += _rows(task, "clusterrag_two_stage", s.sample_id, s.user_id, two_stage[i])
    _timed(seconds, "clusterrag_profile_modes", t0)
    cost = {
        "two_stage_docs_scored_mean": float(np.mean(scored)) if scored else 0.0,
        "hybrid_pool_mean": float(np.mean(pool_sizes)) if pool_sizes else 0.0,
    }
    return rows, cost


def planted_communities(con, task: str) -> dict[str, int] | None:
    """The demo's planted community of each user (table planted_communities), None where the truth is unknown."""
    if not table_exists(con, "planted_communities"):
        return None
    rows = con.execute("SELECT user_id, community FROM planted_communities WHERE task = ?", [task]).fetchall()
    return {u: int(c) for u, c in rows} or None


def community_retriever(con, task: str, index: ProfileIndex, settings: Settings) -> CommunityRetriever:
    """The community-wide retriever of a task over its user clusters and the unit vectors of the configured user
    similarity (z_u for content; users/taste.py)."""
    users, ids, vectors = _user_vectors(con, task, index, settings)
    c = settings.clustering
    return CommunityRetriever(
        index,
        dict(zip(ids, users["cluster"].to_numpy().astype(int).tolist(), strict=True)),
        dict(zip(ids, vectors, strict=True)),
        c.community_user_weight,
        c.community_top_n,
    )


def _user_vectors(con, task: str, index: ProfileIndex, settings: Settings) -> tuple[Any, list[str], np.ndarray]:
    """The task's clustered users (table), their ids and their unit vectors of the configured user similarity."""
    from prag_models.users.taste import similarity_vectors

    users = clustered_users(con, task)
    ids = users["user_id"].to_pylist()
    content = normalize_rows(column_to_matrix(users["embedding"], index.vectors.shape[1]))
    vectors, _ = similarity_vectors(con, task, settings, ids, content)
    return users, ids, vectors


def item_cf_for(con, task: str, index: ProfileIndex, settings: Settings) -> ItemCfRetriever:
    """item_cf of a task with the configured knobs, its votes weighed by the configured user similarity."""
    _, ids, vectors = _user_vectors(con, task, index, settings)
    return item_cf_retriever(index, ids, vectors, settings)


def baseline_rows(con, task: str, settings: Settings) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The rows of baseline_retrievals for one task (with the consent-cost rows of dense_global), their summary and
    how dense_global searched (exact, or IVF with its recall@k against exact search on a sample of the queries)."""
    index, samples, _ = load_task_inputs(con, task, False, default_share=settings.privacy.default_share)
    rs, seconds = settings.retrieval, {}
    t0 = time.perf_counter()
    hidden = np.zeros(len(index.vectors), dtype=bool)  # an index without flags shows nothing beyond its owner
    shareable = index.shareable if index.shareable is not None else hidden  # only these rows shape the index
    corpus = CorpusIndex.build(index.vectors, rs.ann_above, rs.ann_nprobe, rs.seed, shareable=shareable)
    queries = query_matrix(samples, index.vectors.shape[1])
    search = {"index": corpus.kind, "documents": len(index.doc_ids), "build_seconds": round(corpus.build_seconds, 2),
              "recall_at_k_vs_exact": corpus.recall_at_k(queries, rs.k, index.visible_mask(None), rs.ann_recall_sample),
              "recall_sample": min(rs.ann_recall_sample, len(samples)) if corpus.ivf is not None else 0}  # fmt: skip
    _timed(seconds, "dense_global_index", t0)
    rows = run_baselines(settings, task, index, samples, planted_communities(con, task), corpus, seconds)
    scenario = consent_scenario(index, settings)
    if scenario and "dense_global" in settings.privacy.consent_cost_methods:
        t0 = time.perf_counter()
        found = baselines.retrieve_dense_global(scenario[0], samples["user_id"].tolist(), queries, rs.k, corpus)
        rows += [r for s, f in zip(samples.itertuples(), found, strict=True)
                 for r in _rows(task, "dense_global" + scenario[1], s.sample_id, s.user_id, f)]  # fmt: skip
        _timed(seconds, "dense_global" + scenario[1], t0)
    frame = pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS)
    return frame, {**summary(frame), "dense_global_search": search, "seconds": seconds}


def consent_clusterrag_rows(
    con, task: str, settings: Settings, index: ProfileIndex, samples: pd.DataFrame, opted_out: list[str],
    suffix: str, tuned: dict[str, dict[str, Any]],
) -> tuple[list[tuple], dict[str, float]]:  # fmt: skip
    """The consent-cost rows of the ClusterRAG methods in ``privacy.consent_cost_methods`` (``<method><suffix>``):
    the opted-out users' documents shown to nobody else and shaping no z_u, cluster or neighbour (stages/consent_cost),
    each method with the knobs its full-consent row has (``tuned``: the task's tuned values; untuned methods keep the
    configured ones); and the seconds each took."""
    from prag_models.evaluation.tuning import retrieve
    from prag_models.methods.knobs import with_knobs

    wanted = [m for m in CLUSTERRAG_METHODS if m in settings.privacy.consent_cost_methods]
    restricted = index.with_opted_out(opted_out)
    space = consent_space(con, task, settings, opted_out, index.vectors.shape[1])
    seconds: dict[str, float] = {}
    plain = [m for m in wanted if m not in tuned]
    community = space.community(restricted, settings) if "clusterrag_community" in plain else None
    item_cf = space.item_cf(restricted, settings) if "item_cf" in plain else None
    rows, _ = run_clusterrag(settings, task, restricted, samples, space.neighbours(settings), community, plain, seconds,
                             item_cf)  # fmt: skip
    for method in (m for m in wanted if m in tuned):
        t0 = time.perf_counter()
        found = retrieve(method, with_knobs(settings, tuned[method]), space, restricted, samples)
        rows += [r for s, f in zip(samples.itertuples(), found, strict=True)
                 for r in counted_rows(task, method, s.sample_id, s.user_id, f)]  # fmt: skip
        _timed(seconds, method, t0)
    return [(r[0], r[1] + suffix, *r[2:]) for r in rows], {m + suffix: v for m, v in seconds.items()}


def clusterrag_rows(con, task: str, settings: Settings) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The rows of clusterrag_retrievals for one task (with the consent-cost rows), their summary and the two-stage
    cost."""
    index, samples, neighbours = load_task_inputs(con, task, default_share=settings.privacy.default_share)
    seconds: dict[str, float] = {}
    community = community_retriever(con, task, index, settings)
    item_cf = item_cf_for(con, task, index, settings)
    rows, cost = run_clusterrag(settings, task, index, samples, neighbours, community, seconds=seconds,
                                item_cf=item_cf)  # fmt: skip
    rows, tuned = with_tuned_rows(con, task, settings, index, samples, rows)  # <method>@default keeps the untuned
    scenario = consent_scenario(index, settings)
    if scenario and any(m in settings.privacy.consent_cost_methods for m in CLUSTERRAG_METHODS):
        _, suffix, out = scenario
        more, more_seconds = consent_clusterrag_rows(con, task, settings, index, samples, out, suffix,
                                                     tuned.get("tuned", {}))  # fmt: skip
        rows += more
        seconds |= more_seconds
        cost["consent_cost"] = {"opted_out_users": len(out), "users": len(index.users), "suffix": suffix,
                                "knobs": "as the full-consent rows (tuned)",
                                "z_u, clusters, neighbours": "without the opted-out users' documents"}  # fmt: skip
    frame = pd.DataFrame(rows, columns=CLUSTERRAG_COLUMNS)
    return frame, {**summary(frame), **cost, **tuned, "seconds": seconds}
