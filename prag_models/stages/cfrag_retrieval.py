"""CFRAG stage 3 (docs/methods.md §2.3–2.8): retrieval for the dev samples with given models — full CFRAG and the
ablations — into rows shaped like the other retrieval tables, with agreement statistics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.methods.cfrag import inference
from prag_models.methods.cfrag.tables import (
    ConsentUsers,
    mean_embedding_neighbours,
    neighbour_lists,
    similar_user_lists,
)
from prag_models.methods.cfrag.tuning import read_cfrag_tuned, tuned_cfrag_settings
from prag_models.methods.cfrag.variants import CFRAG_METHODS, VARIANTS, Variant
from prag_models.methods.profiles import ProfileIndex
from prag_models.stages.consent_cost import consent_scenario
from prag_models.stages.retrieval import RETRIEVAL_COLUMNS, load_task_inputs
from prag_models.storage.store import column_to_matrix, read_rows


def retrieve_variants(
    settings: Settings,
    task: str,
    index: ProfileIndex,
    samples: pd.DataFrame,
    user_emb: dict[str, np.ndarray],
    neighbours: dict[str, dict[str, list[str]]],
    models: dict,
    variants: Sequence[Variant] = VARIANTS,
    suffix: str = "",
) -> list[tuple]:
    """Rows of every CFRAG variant (or the given ones, method names + ``suffix``) for every dev sample
    (prag_models.methods.cfrag.inference)."""
    queries = [
        inference.CfragQuery(
            s.sample_id,
            s.user_id,
            s.query,
            np.asarray(s.embedding, dtype=np.float32),
            np.asarray(user_emb[s.user_id], dtype=np.float32),
        )  # fmt: skip
        for s in samples.itertuples(index=False)
    ]
    found = inference.retrieve(index, queries, neighbours, models, settings, variants)
    return [
        (task, v.method + suffix, q.sample_id, q.user_id, rank, r.doc_id, r.source_user_id, r.score)
        for q in queries
        for v in variants
        for rank, r in enumerate(found[(q.sample_id, v.method)], 1)
    ]


def agreement(frame: pd.DataFrame, a: str, b: str) -> float | None:
    """Share of samples whose doc lists are identical under methods a and b."""
    lists = {m: g.sort_values("rank").groupby("sample_id")["doc_id"].apply(tuple) for m, g in frame.groupby("method")}
    if a not in lists or b not in lists:
        return None
    joined = pd.concat([lists[a], lists[b]], axis=1, keys=[a, b]).dropna()
    return round(float((joined[a] == joined[b]).mean()), 3) if len(joined) else None


def foreign_share(frame: pd.DataFrame, method: str) -> float | None:
    """Share of a method's retrieved documents that come from other users."""
    rows = frame[frame["method"] == method]
    return round(float((rows["source_user_id"] != rows["user_id"]).mean()), 3) if len(rows) else None


def coincidences(models: dict) -> dict[tuple[str, str], str]:
    """Pairs of CFRAG rows that coincide by construction with these models, and why."""
    found = dict(inference.COINCIDENCES)
    rerankers = [models.get(k) for k in ("reranker", "reranker_no_eu")]
    kept = [m for m in rerankers if hasattr(m, "kept_initialisation") and m.kept_initialisation()]
    if rerankers[0] is not None and rerankers[0] in kept:
        found[("cfrag", "cfrag_no_reranker_tuning")] = (
            "the reranker kept its untrained initialisation (no epoch's validation gain was shown), so full CFRAG "
            "ranks by the retriever's score exactly as the untuned reranker does"
        )
    if len(kept) == 2:
        found[("cfrag", "cfrag_no_reranker_eu")] = (
            "both rerankers kept their untrained initialisation (no training epoch beat it on the validation "
            "samples), so both keep the retriever's score and e_u has nothing to act on"
        )
    return found


def consent_rows(
    con, task: str, settings: Settings, restricted: ProfileIndex, samples: pd.DataFrame,
    user_emb: dict[str, np.ndarray], models: dict, opted_out: list[str], suffix: str,
) -> list[tuple]:  # fmt: skip
    """Full CFRAG's consent-cost rows (``cfrag<suffix>``, docs/privacy.md): the tuned knobs and the trained models of
    the full-consent row, the opted-out users' documents shown to nobody else, and the similar users ranked as the
    graph ranks them for users who share nothing (``ConsentUsers``: e_u of an empty history by the user encoder in
    ``models["user_encoder"]``, z_u without their documents, no taste of theirs)."""
    from prag_models.methods.cfrag.user_encoder import encode_users
    from prag_models.stages.users import user_embedding_rows

    encoder = models.get("user_encoder")
    if encoder is None:
        raise ValueError(f"{task}: CFRAG's consent-cost row needs the user encoder (models['user_encoder']) to give "
                         "the opted-out users the e_u of an empty history")  # fmt: skip
    means: dict[str, np.ndarray] = {}
    if settings.cfrag.user_vectors == "mean":
        table, _ = user_embedding_rows(con, task, settings.privacy.default_share, withheld=opted_out)
        means = dict(zip(table["user_id"].to_pylist(), column_to_matrix(table["embedding"]), strict=True))
    consent = ConsentUsers(frozenset(opted_out), encode_users(encoder, [[]])[0], means)
    neighbours = {"encoder": similar_user_lists(con, task, settings, consent)}
    return retrieve_variants(settings, task, restricted, samples, user_emb, neighbours, models, VARIANTS[:1], suffix)


def cfrag_retrieval_rows(con, task: str, settings: Settings, models: dict) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The cfrag_retrievals rows of one task with the given retriever / rerankers (CFRAG's knobs as tuned for the
    task; ``cfrag@default`` with the configured ones), and their statistics."""
    untuned, settings = settings, tuned_cfrag_settings(con, task, settings)
    index, samples, _ = load_task_inputs(con, task, False, default_share=settings.privacy.default_share)
    users = read_rows(con, "cfrag_user_embeddings", {"task": task})
    user_emb = dict(zip(users["user_id"], users["embedding"], strict=True))
    neighbours = {"encoder": neighbour_lists(con, task), "mean": mean_embedding_neighbours(con, task, settings)}
    rows = retrieve_variants(settings, task, index, samples, user_emb, neighbours, models)
    if settings is not untuned:  # what tuning bought: full CFRAG with the configured knobs, the same models
        default = {"encoder": similar_user_lists(con, task, untuned)}
        rows += retrieve_variants(untuned, task, index, samples, user_emb, default, models, VARIANTS[:1], "@default")
    scenario = consent_scenario(index, settings)
    if scenario and "cfrag" in settings.privacy.consent_cost_methods:  # what consent costs CFRAG (docs/privacy.md)
        restricted, suffix, out = scenario
        rows += consent_rows(con, task, settings, restricted, samples, user_emb, models, out, suffix)
    frame = pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS)
    queries = [inference.CfragQuery(s.sample_id, s.user_id, s.query, np.asarray(s.embedding, dtype=np.float32),
                                    np.asarray(user_emb[s.user_id], dtype=np.float32))
               for s in samples.itertuples(index=False)]  # fmt: skip
    changed = inference.retriever_pool_changes(index, queries, neighbours["encoder"], models, settings)
    retriever = models.get("retriever")
    alpha = retriever.effective_alpha() if hasattr(retriever, "effective_alpha") else settings.cfrag.alpha
    why = inference.retriever_reason(changed, agreement(frame, "cfrag", "cfrag_no_retriever_tuning"), alpha,
                                     inference.docs_per_user(settings))  # fmt: skip
    stats = {
        "samples": int(frame["sample_id"].nunique()),
        "docs_per_sample": round(len(frame) / max(frame["sample_id"].nunique() * frame["method"].nunique(), 1), 2),
        "foreign_doc_share": foreign_share(frame, "cfrag"),
        "same_as_cfrag": {m: agreement(frame, "cfrag", m) for m in CFRAG_METHODS[1:]},
        "coinciding_by_construction": {
            f"{a} = {b}": {"same_lists": agreement(frame, a, b), "why": why}
            for (a, b), why in coincidences(models).items()
        },
        "inference_docs_per_user": inference.docs_per_user(settings),
        "tuned_knobs": read_cfrag_tuned(con, task) if settings is not untuned else {},
        # whether the trained retriever's personalized term changes any similar user's top-k pool (vs cos(q, d))
        "retriever_pool_changed_share": None if changed is None else round(changed, 3),
        **({"why_cfrag_equals_no_retriever_tuning": why} if why else {}),
    }
    return frame, stats
