"""Stage 4 (retrieval): documents retrieved for each dev sample by the baselines and by ClusterRAG (docs/methods.md
§3.4–3.5, §5)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from prag_models.config import Settings
from prag_models.methods import baselines, clusterrag
from prag_models.methods.community import CommunityRetriever
from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.methods.task_tables import clustered_users, profile_index
from prag_models.privacy import opted_out_users
from prag_models.store import column_to_matrix, table_exists
from prag_models.users.embeddings import normalize_rows

RETRIEVAL_COLUMNS = ["task", "method", "sample_id", "user_id", "rank", "doc_id", "source_user_id", "score"]
BASELINE_METHODS = ("random", "recency", "bm25", "dense", "dense_global", "oracle_community")
CLUSTERRAG_METHODS = (
    "clusterrag_user_only",
    "clusterrag_collaborative",
    "clusterrag_hybrid",
    "clusterrag_two_stage",
    "clusterrag_community",
)


def load_task_inputs(
    con, task: str, with_neighbours: bool = True, *, default_share: bool
) -> tuple[ProfileIndex, pd.DataFrame, dict[str, list[str]]]:
    """The task's profile index (with its sharing flags), its dev samples with query vectors, and each user's
    similar users."""
    index, _ = profile_index(con, task, default_share=default_share)
    samples = con.execute(
        "SELECT s.sample_id, s.user_id, s.query, q.embedding FROM lamp_samples s JOIN query_embeddings q "
        "USING (task, sample_id) WHERE task = ? AND s.split = 'dev' ORDER BY s.sample_id",
        [task],
    ).df()
    neighbours: dict[str, list[str]] = {}
    if not with_neighbours:
        return index, samples, neighbours
    for user, nb in con.execute(
        "SELECT user_id, neighbour_id FROM similar_users WHERE task = ? ORDER BY user_id, rank", [task]
    ).fetchall():
        neighbours.setdefault(user, []).append(nb)
    return index, samples, neighbours


def _rows(task: str, method: str, sample_id: str, user_id: str, found: list[Retrieved]) -> list[tuple]:
    return [
        (task, method, sample_id, user_id, rank, r.doc_id, r.source_user_id, r.score) for rank, r in enumerate(found, 1)
    ]


def summary(frame: pd.DataFrame) -> dict:
    """Samples and documents per sample of each method in a retrieval table's rows."""
    return {
        m: {"samples": int(g["sample_id"].nunique()), "docs_per_sample": round(len(g) / g["sample_id"].nunique(), 2)}
        for m, g in frame.groupby("method")
    }


def run_baselines(
    settings: Settings, task: str, index: ProfileIndex, samples: pd.DataFrame, planted: dict[str, int] | None = None
) -> list[tuple]:
    """Random, recency, BM25 and dense retrieval over each sample's own profile; dense over all users' documents
    (not personalized); and, where the planted communities are known (demo), dense over the true community."""
    k = settings.retrieval.k
    rng = np.random.default_rng(settings.retrieval.seed)
    rows: list[tuple] = []
    queries = column_to_matrix(samples["embedding"].tolist(), index.vectors.shape[1])
    found_global = baselines.retrieve_dense_global(index, samples["user_id"].tolist(), queries, k)
    for s, found in zip(samples.itertuples(), found_global, strict=True):
        rows += _rows(task, "dense_global", s.sample_id, s.user_id, found)
    members: dict[int, list[str]] = {}
    for user, community in (planted or {}).items():
        members.setdefault(community, []).append(user)
    for s in samples.itertuples():
        if planted and s.user_id in planted:
            q = np.asarray(s.embedding, dtype=np.float32)
            found = baselines.retrieve_oracle_community(index, s.user_id, members[planted[s.user_id]], q, k)
            rows += _rows(task, "oracle_community", s.sample_id, s.user_id, found)
    for s in samples.itertuples():
        q = np.asarray(s.embedding, dtype=np.float32)
        rows += _rows(task, "random", s.sample_id, s.user_id, baselines.retrieve_random(index, s.user_id, k, rng))
        rows += _rows(task, "recency", s.sample_id, s.user_id, baselines.retrieve_recency(index, s.user_id, k))
        rows += _rows(task, "bm25", s.sample_id, s.user_id, baselines.retrieve_bm25(index, s.user_id, s.query, k))
        rows += _rows(task, "dense", s.sample_id, s.user_id, baselines.retrieve_dense(index, s.user_id, q, k))
    return rows


def run_clusterrag(
    settings: Settings,
    task: str,
    index: ProfileIndex,
    samples: pd.DataFrame,
    neighbours: dict[str, list[str]],
    community: CommunityRetriever | None = None,
) -> tuple[list[tuple], dict]:
    """The three ClusterRAG profile modes, the two-stage retrieval over the hybrid pool and the community-wide mode."""
    k, c = settings.retrieval.k, settings.clustering
    rows: list[tuple] = []
    if community is not None:
        for s in samples.itertuples():
            found = community.retrieve(s.user_id, np.asarray(s.embedding, dtype=np.float32), k)
            rows += _rows(task, "clusterrag_community", s.sample_id, s.user_id, found)
    pools: dict[str, clusterrag.DocumentClusters] = {}
    scored, pool_sizes = [], []
    for s in samples.itertuples():
        q = np.asarray(s.embedding, dtype=np.float32)
        nb = neighbours.get(s.user_id, [])
        for mode in clusterrag.PROFILE_MODES:
            found = clusterrag.retrieve_profile_mode(index, mode, s.user_id, nb, q, k)
            rows += _rows(task, f"clusterrag_{mode}", s.sample_id, s.user_id, found)
        if s.user_id not in pools:
            pool = index.visible_rows(s.user_id, clusterrag.profile_users("hybrid", s.user_id, nb))
            pools[s.user_id] = clusterrag.cluster_documents(index, pool, c.two_stage_min_cluster_size)
        found, n_scored = clusterrag.retrieve_two_stage(index, pools[s.user_id], q, k, c.two_stage_top_clusters)
        scored.append(n_scored)
        pool_sizes.append(len(pools[s.user_id].rows))
        rows += _rows(task, "clusterrag_two_stage", s.sample_id, s.user_id, found)
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
    """The community-wide retriever of a task over its user clusters and unit user embeddings z_u."""
    users = clustered_users(con, task)
    vectors = normalize_rows(column_to_matrix(users["embedding"].tolist(), index.vectors.shape[1]))
    c = settings.clustering
    return CommunityRetriever(
        index,
        dict(zip(users["user_id"], users["cluster"].astype(int), strict=True)),
        dict(zip(users["user_id"], vectors, strict=True)),
        c.community_user_weight,
        c.community_top_n,
    )


def consent_scenario(index: ProfileIndex, settings: Settings) -> tuple[ProfileIndex, str, int] | None:
    """The consent-cost scenario (docs/privacy.md): the index with a seeded ``privacy.consent_cost_share`` of the
    users opted out, the method-name suffix (``@consent<percent still sharing>``) and how many opted out; None when
    the share is 0."""
    p = settings.privacy
    if p.consent_cost_share <= 0:
        return None
    out = opted_out_users(index.user_ids, p.consent_cost_share, p.consent_cost_seed)
    flags = np.asarray(index.shareable) & ~np.isin(np.asarray(index.user_ids), sorted(out))
    return index.with_shareable(flags), f"@consent{round(100 * (1 - p.consent_cost_share))}", len(out)


def _consent_only(rows: list[tuple], suffix: str, settings: Settings) -> list[tuple]:
    """The rows of the configured consent-cost methods, renamed ``<method><suffix>``."""
    keep = set(settings.privacy.consent_cost_methods)
    return [(r[0], r[1] + suffix, *r[2:]) for r in rows if r[1] in keep]


def baseline_rows(con, task: str, settings: Settings) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The rows of baseline_retrievals for one task (with the consent-cost rows of dense_global) and their summary."""
    index, samples, _ = load_task_inputs(con, task, False, default_share=settings.privacy.default_share)
    rows = run_baselines(settings, task, index, samples, planted_communities(con, task))
    scenario = consent_scenario(index, settings)
    if scenario and "dense_global" in settings.privacy.consent_cost_methods:
        k, queries = settings.retrieval.k, column_to_matrix(samples["embedding"].tolist(), index.vectors.shape[1])
        found = baselines.retrieve_dense_global(scenario[0], samples["user_id"].tolist(), queries, k)
        rows += [r for s, f in zip(samples.itertuples(), found, strict=True)
                 for r in _rows(task, "dense_global" + scenario[1], s.sample_id, s.user_id, f)]  # fmt: skip
    frame = pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS)
    return frame, summary(frame)


def clusterrag_rows(con, task: str, settings: Settings) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The rows of clusterrag_retrievals for one task (with the consent-cost rows), their summary and the two-stage
    cost."""
    index, samples, neighbours = load_task_inputs(con, task, default_share=settings.privacy.default_share)
    community = community_retriever(con, task, index, settings)
    rows, cost = run_clusterrag(settings, task, index, samples, neighbours, community)
    scenario = consent_scenario(index, settings)
    if scenario and set(settings.privacy.consent_cost_methods) & set(CLUSTERRAG_METHODS):
        restricted, suffix, n_out = scenario
        more, _ = run_clusterrag(settings, task, restricted, samples, neighbours,
                                 community_retriever(con, task, restricted, settings))  # fmt: skip
        rows += _consent_only(more, suffix, settings)
        cost["consent_cost"] = {"opted_out_users": n_out, "users": len(set(index.user_ids)), "suffix": suffix}
    frame = pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS)
    return frame, {**summary(frame), **cost}
