"""The promotion gate's evidence (docs/methods.md §6): the champion bundle retrieves for the same dev samples as the
challenger (method ``cfrag@champion`` of cfrag_retrievals, with its own user encoder's e_u and the similar users they
give, on the same documents and tuned knobs), and table ``cfrag_promotion_evidence`` pairs both bundles' per-sample
values: the retrieval evaluation's primary metric on every dev sample (the primary leg), the LLM's utility of each
bundle's documents on the samples the llm_utility stage planned for this comparison (deciding from
``utility.min_samples`` samples on, docs/methods.md §6.7), and the LLM evaluation's primary metric where generations
exist for both (deciding from ``data.verdict_min_llm_samples`` samples on; generation runs the configured
``retrieval.methods``, so that leg needs ``cfrag@champion`` there)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.methods.cfrag.variants import CHAMPION_METHOD
from prag_models.mlops.gate import PairedEvidence
from prag_models.storage.store import column_to_matrix, read_rows, replace_rows, table_exists

EVIDENCE_TABLE = "cfrag_promotion_evidence"
#: The champion bundle cfrag_retrievals retrieved with (kind, registered_name, version), per task.
CHAMPION_TABLE = "cfrag_champion_models"
#: Paired samples a retrieval leg needs to decide (an interval needs two; every dev sample is used).
MIN_RETRIEVAL_SAMPLES = 2
EVIDENCE_COLUMNS = ["task", "challenger_bundle", "champion_bundle", "evidence", "metric", "higher_is_better",
                    "min_n", "sample_id", "challenger_value", "champion_value", "recorded_at"]  # fmt: skip


def champion_neighbours(con, task: str, settings: Settings, users: list[str], vectors: np.ndarray) -> dict:
    """Each user's top-m similar users by the given e_u (the champion encoder's), as cfrag_similar_users ranks them
    (cfrag.user_vectors, clustering.user_similarity, the task's tuned knobs)."""
    from prag_models.methods.cfrag.tables import mean_vectors
    from prag_models.methods.cfrag.user_encoder import top_m_similar_users
    from prag_models.users.taste import similarity_vectors

    if settings.cfrag.user_vectors == "mean":
        vectors = mean_vectors(con, task, users)
    ranked, _ = similarity_vectors(con, task, settings, users, vectors)
    found, _ = top_m_similar_users(ranked, settings.cfrag.top_m_users, settings.cfrag.include_self)
    return {users[i]: [users[int(j)] for j in found[i]] for i in range(len(users))}


def champion_embeddings(con, task: str, encoder: Any, default_share: bool) -> pd.DataFrame:
    """e_u of every user of the task by the champion's user encoder, from the documents it knows: an encoder's
    document table is fixed when it is trained, so documents added since (the lifecycle's second week) are invisible
    to it, and a user it never saw starts from an empty history — as it would serve them."""
    from prag_models.methods.cfrag.probes import single_thread
    from prag_models.methods.cfrag.tables import encoder_histories
    from prag_models.methods.cfrag.user_encoder import encode_users

    users, histories = encoder_histories(con, task, encoder, default_share, "the champion user encoder", True)
    with single_thread():
        vectors = encode_users(encoder, [histories.get(u, []) for u in users])
    return pd.DataFrame({"user_id": users, "embedding": list(vectors)}).sort_values("user_id")


def champion_retrieval_rows(con, task: str, settings: Settings, models: Mapping[str, Any],
                            same_encoder: bool) -> list[tuple]:  # fmt: skip
    """The ``cfrag@champion`` rows: full CFRAG with the champion bundle's models on the task's dev samples (the
    challenger's e_u and similar users when both bundles share the user encoder)."""
    from prag_models.methods.cfrag.tables import neighbour_lists
    from prag_models.methods.cfrag.tuning import tuned_cfrag_settings
    from prag_models.methods.cfrag.variants import VARIANTS
    from prag_models.stages.cfrag_retrieval import retrieve_variants
    from prag_models.stages.retrieval import load_task_inputs

    settings = tuned_cfrag_settings(con, task, settings)
    index, samples, _ = load_task_inputs(con, task, False, default_share=settings.privacy.default_share)
    if same_encoder:
        frame = read_rows(con, "cfrag_user_embeddings", {"task": task}, order_by="user_id")
        neighbours = neighbour_lists(con, task)
    else:
        frame = champion_embeddings(con, task, models["user_encoder"], settings.privacy.default_share)
        users = frame["user_id"].tolist()
        neighbours = champion_neighbours(con, task, settings, users, column_to_matrix(frame["embedding"].tolist()))
    user_emb = dict(zip(frame["user_id"], frame["embedding"], strict=True))
    return retrieve_variants(settings, task, index, samples, user_emb, {"encoder": neighbours}, dict(models),
                             VARIANTS[:1], "@champion")  # fmt: skip


def _paired(scores: pd.DataFrame, challenger: str, champion: str) -> pd.DataFrame:
    """sample_id, challenger_value, champion_value over the samples both methods have (sorted by sample)."""
    wide = scores[scores["method"].isin([challenger, champion])].pivot_table(
        index="sample_id", columns="method", values="value", aggfunc="first"
    )
    if challenger not in wide or champion not in wide:
        return pd.DataFrame(columns=["sample_id", "challenger_value", "champion_value"])
    both = wide[[challenger, champion]].dropna().sort_index()
    return pd.DataFrame({"sample_id": both.index.astype(str), "challenger_value": both[challenger].to_numpy(float),
                         "champion_value": both[champion].to_numpy(float)})  # fmt: skip


def evidence_rows(con, task: str, challenger_bundle: str, champion_bundle: str, settings: Settings) -> pd.DataFrame:
    """The paired per-sample rows of both legs for ``cfrag`` (the challenger) and ``cfrag@champion``."""
    from prag_models.evaluation.claims import llm_scores
    from prag_models.evaluation.utility import LABEL_HIT_SEES, UTILITY_METRIC, utility_scores

    legs = []
    if table_exists(con, "lamp_retrieval_evaluation"):
        primary = con.execute("SELECT DISTINCT metric FROM lamp_retrieval_evaluation WHERE task = ? AND is_primary",
                              [task]).fetchall()  # fmt: skip
        if primary and (primary[0][0].startswith("ndcg") or task in LABEL_HIT_SEES):  # as the verdict: a label-hit
            metric = primary[0][0]  # that cannot see the task (LaMP-1's titles, no relevance labels) decides nothing
            scores = con.execute("SELECT method, sample_id, value FROM lamp_retrieval_sample_scores WHERE task = ? "
                                 "AND metric = ?", [task, metric]).df()  # fmt: skip
            legs.append(("retrieval", metric, True, MIN_RETRIEVAL_SAMPLES, scores))
    utility = utility_scores(con, task, "promotion")
    if len(utility):  # the LLM's utility of each bundle's documents, on samples planned for the comparison (§6.7)
        legs.append(("llm utility", UTILITY_METRIC, True, settings.utility.min_samples, utility))
    if table_exists(con, "generations"):
        scores, metric, higher = llm_scores(con, task)
        legs.append(("llm", metric, higher, settings.data.verdict_min_llm_samples, scores))
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    frames = [
        _paired(scores, "cfrag", CHAMPION_METHOD).assign(
            task=task, challenger_bundle=challenger_bundle, champion_bundle=champion_bundle, evidence=name,
            metric=metric, higher_is_better=higher, min_n=min_n, recorded_at=now)
        for name, metric, higher, min_n, scores in legs
    ]  # fmt: skip
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True)[EVIDENCE_COLUMNS] if frames else pd.DataFrame(columns=EVIDENCE_COLUMNS)


def record_evidence(con, task: str, frame: pd.DataFrame) -> None:
    """Replace the task's rows of cfrag_promotion_evidence (an empty frame clears them)."""
    if len(frame):
        replace_rows(con, EVIDENCE_TABLE, frame, {"task": task})
    elif table_exists(con, EVIDENCE_TABLE):
        con.execute(f"DELETE FROM {EVIDENCE_TABLE} WHERE task = ?", [task])


def read_evidence(con, task: str, challenger_bundle: str, champion_bundle: str) -> list[PairedEvidence]:
    """The legs recorded for exactly this challenger and champion bundle (retrieval first); [] when none."""
    if not table_exists(con, EVIDENCE_TABLE):
        return []
    rows = con.execute(
        f"SELECT * FROM {EVIDENCE_TABLE} WHERE task = ? AND challenger_bundle = ? AND champion_bundle = ? "
        "ORDER BY evidence <> 'retrieval', evidence, sample_id", [task, challenger_bundle, champion_bundle]
    ).df()
    return [
        PairedEvidence(name, str(g["metric"].iloc[0]), bool(g["higher_is_better"].iloc[0]),
                       g["challenger_value"].to_numpy(float), g["champion_value"].to_numpy(float),
                       int(g["min_n"].iloc[0]))
        for name, g in rows.groupby("evidence", sort=False)
    ]  # fmt: skip


def evidence_summary(legs: list[PairedEvidence]) -> dict[str, str]:
    """One line per leg for the asset's metadata (the gate's own text)."""
    from prag_models.mlops.gate import leg_result

    return {leg.name: leg_result(leg).text() for leg in legs}
