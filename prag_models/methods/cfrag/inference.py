"""CFRAG inference, the one implementation used by the evaluation retrieval and by serving (``prag answer``)
(docs/methods.md §2.3–2.8): whose documents (the user's m similar users), the retriever's k per user, the reranker's
final top-k; and every ablation variant of paper Table 3.

At inference the LLM-feedback budget does not limit the pool: the retriever passes ``cfrag.inference_docs_per_user``
documents per user (default 4, training uses ``docs_per_user``) to the reranker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from prag_models.config.settings import Settings
from prag_models.methods.cfrag.candidates import cosine_scorer, per_user_top_k
from prag_models.methods.cfrag.variants import VARIANTS, Variant, final_k, top_final
from prag_models.methods.profiles import ProfileIndex, Retrieved

#: Why two ablation rows can coincide by construction (reported in the cfrag_retrievals metadata).
COINCIDENCES: dict[tuple[str, str], str] = {
    ("cfrag_no_retriever_tuning", "cfrag_no_sud"): "with frozen text encoders, α = 0 leaves S = cos(q, d), which is "
    "exactly the untuned retriever's ranking",
}


@dataclass(frozen=True)
class CfragQuery:
    """One query to answer: the sample, the asking user, the query text and vector, and the user's e_u."""

    sample_id: str
    user_id: str
    text: str
    vector: np.ndarray
    e_u: np.ndarray


def docs_per_user(settings: Settings) -> int:
    """Documents the retriever keeps per similar user at inference."""
    c = settings.cfrag
    return c.inference_docs_per_user or c.docs_per_user


def _scorer(index: ProfileIndex, kind: str, q: np.ndarray, e_u: np.ndarray, models: Mapping) -> Callable:
    """Row scorer of a query: the trained S, or cos(q, d) for base and α = 0 (equal with the frozen encoders)."""
    if kind in ("base", "no_sud"):
        return cosine_scorer(index, q)
    from prag_models.methods.cfrag.retriever import retriever_scores

    def scores(rows: np.ndarray) -> np.ndarray:
        """S(q, d, u) of the rows' documents."""
        return retriever_scores(models["retriever"], q[None], index.vectors[rows][None], e_u[None])[0]

    return scores


def candidates(
    index: ProfileIndex, variant: Variant, query: CfragQuery, users: Sequence[str], settings: Settings, models: Mapping
) -> list[Retrieved]:
    """The retriever's candidates of one variant: k per similar user (or m·k of the user's own, w/o user retrieval)."""
    per_user = docs_per_user(settings)
    if variant.users == "own":
        users, per_user = [query.user_id], per_user * settings.cfrag.top_m_users
    scorer = _scorer(index, variant.retriever, query.vector, query.e_u, models)
    return per_user_top_k(index, query.user_id, users, per_user, scorer)


def retrieve(
    index: ProfileIndex,
    queries: Sequence[CfragQuery],
    neighbours: Mapping[str, Mapping[str, list[str]]],
    models: Mapping,
    settings: Settings,
    variants: Sequence[Variant] = VARIANTS,
) -> dict[tuple[str, str], list[Retrieved]]:
    """(sample_id, method) → final documents for every query and variant. ``neighbours[v.users][user]`` lists the
    similar users of each user selection ("encoder", "mean"); each reranker scores every distinct (query, doc) pair
    it needs in one batched pass."""
    from prag_models.methods.cfrag.reranker import rerank_scores

    plans = []
    needed: dict[str, dict[tuple[str, int], CfragQuery]] = {}
    for q in queries:
        for v in variants:
            users = [] if v.users == "own" else neighbours.get(v.users, {}).get(q.user_id, [q.user_id])
            found = candidates(index, v, q, users, settings, models)
            plans.append((q, v, found))
            if v.reranker not in ("none", "initial"):
                needed.setdefault(v.reranker, {}).update({(q.sample_id, x.row): q for x in found})
    # A residual reranker's score is its base plus a correction that does not depend on the base: the correction is
    # computed once per pair (base 0) and added to each variant's first-stage score (the trained S, or cosine).
    reranked: dict[tuple[str, str, int], float] = {}
    residual: dict[str, bool] = {}
    for kind, pairs in needed.items():
        keys = list(pairs)
        residual[kind] = bool(getattr(models[kind], "residual", False))
        scores = rerank_scores(
            models[kind],
            [pairs[k].text for k in keys],
            [index.texts[row] for _, row in keys],
            np.stack([pairs[k].e_u for k in keys]),
            np.zeros(len(keys), dtype=np.float32) if residual[kind] else None,
            batch_size=64,
            doc_vectors=index.vectors[[row for _, row in keys]] if getattr(models[kind], "personal_dim", 0) else None,
        )
        reranked.update({(kind, sid, row): float(s) for (sid, row), s in zip(keys, scores, strict=True)})
    out: dict[tuple[str, str], list[Retrieved]] = {}
    k = final_k(settings)
    for q, v, found in plans:
        first = np.asarray([x.score for x in found], dtype=np.float32)
        if v.reranker in ("none", "initial"):  # initial: the untrained residual reranker adds zero to its base
            scores = first
        else:
            correction = np.asarray([reranked[(v.reranker, q.sample_id, x.row)] for x in found], dtype=np.float32)
            scores = first + correction if residual[v.reranker] else correction
        out[(q.sample_id, v.method)] = top_final(found, scores, k, index)
    return out


def retriever_pool_changes(
    index: ProfileIndex, queries: Sequence[CfragQuery], users_of: Mapping[str, list[str]], models: Mapping,
    settings: Settings,
) -> float | None:
    """Share of queries whose retriever pool (k per similar user) under the trained S differs from cosine's: whether
    the personalized term α·cos(W·e_u, d) can change a top-k list at all (None without a retriever or queries)."""
    if models.get("retriever") is None or not queries:
        return None
    trained, base = VARIANTS[0], next(v for v in VARIANTS if v.retriever == "base")
    changed = 0
    for q in queries:
        users = users_of.get(q.user_id, [q.user_id])
        a = {x.row for x in candidates(index, trained, q, users, settings, models)}
        changed += a != {x.row for x in candidates(index, base, q, users, settings, models)}
    return changed / len(queries)


def retriever_reason(pool_changed: float | None, same_lists: float | None, alpha: float, k: int) -> str | None:
    """Why ``cfrag`` retrieves what ``cfrag_no_retriever_tuning`` does on every sample (None when they differ)."""
    if same_lists is None or same_lists < 1.0 or pool_changed is None:
        return None
    if pool_changed == 0:
        return (f"the trained retriever's personalized term (α = {alpha:.3g}) reorders no similar user's top-{k} "
                "documents: within one user's documents it is too small against (1 − α)·cos(q, d), so the reranker "
                "sees cosine's pool")  # fmt: skip
    return (f"the trained retriever changed the pool of {pool_changed:.0%} of the samples, but the reranker never put "
            "a changed document into the final list")  # fmt: skip
