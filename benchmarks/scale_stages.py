"""The child side of benchmarks/scale.py: the synthetic task, the random embedder and one function per measured stage.

Every stage calls the prag_models function its asset calls and writes the table(s) the asset writes (no Dagster, no
MLflow: the CFRAG user encoder is trained and used in memory, as cfrag_user_embeddings would load it back).
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

TASK, COMMUNITIES, DIM, MODEL = "LaMP-2", 40, 384, "random-unit-vectors"
TAGS = ("comedy", "action", "drama", "sci-fi", "romance")
#: The stages of a full measurement in graph order (the non-LLM ones).
STAGES = (
    "document_embeddings", "query_embeddings", "user_embeddings", "user_clusters", "similar_users",
    "baseline_retrievals", "clusterrag_retrievals", "pbr_anchor_only", "cfrag_user_encoder",
    "cfrag_similar_users", "retrieval_evaluation",
)  # fmt: skip
#: What an incremental update replaces, run in full for the incremental / full ratio.
FULL = ("document_embeddings", "user_embeddings", "user_clusters", "similar_users")


class RandomEmbedder:
    """Unit vectors around the centre of the community named in the text (``c<k> …``), seeded by the text."""

    model_id = MODEL
    dim = DIM

    def __init__(self) -> None:
        self.centres = np.random.default_rng(0).standard_normal((COMMUNITIES, DIM)).astype(np.float32)

    def embed(self, texts, progress=None) -> np.ndarray:  # noqa: ANN001 - the embedder interface
        """(n, DIM) float32 unit vectors."""
        comm = np.array([int(m.group(1)) % COMMUNITIES if (m := re.search(r"\bc(\d+) ", t)) else 0 for t in texts])
        seed = zlib.crc32(texts[0].encode()) if len(texts) else 0
        noise = np.random.default_rng(seed).standard_normal((len(texts), DIM)).astype(np.float32)
        x = self.centres[comm] / math.sqrt(DIM) * 1.2 + noise / math.sqrt(DIM)
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def embedder(random_vectors: bool):  # noqa: ANN201 - RandomEmbedder or the configured encoder
    """The random embedder, or the configured encoder."""
    if random_vectors:
        return RandomEmbedder()
    from prag_models.config.settings import load_settings
    from prag_models.text.embedder import load_embedder

    return load_embedder(load_settings().embedder)


def build(db: Path, users: int, docs: int) -> None:
    """Write the synthetic task (profile_documents, lamp_samples: one dev sample per user) with DuckDB alone; a
    document's tag is its community's for 2 in 3 documents (another for the rest), a sample's gold its user's
    community's tag, so label-hit@k varies from sample to sample as on real data."""
    from prag_models.storage.store import connect

    comm = f"CASE WHEN j % 5 = 0 THEN (u * 7 + j) % {COMMUNITIES} ELSE u % {COMMUNITIES} END"
    text = f"printf('c%d doc %d of user %d about things', {comm}, j, u)"
    tags = "[" + ", ".join(f"'{t}'" for t in TAGS) + "]"
    tag = f"{tags}[1 + CASE WHEN (u * 31 + j * 17) % 3 = 0 THEN (u * 13 + j * 7) % {len(TAGS)} ELSE ({comm}) % " \
          f"{len(TAGS)} END]"  # fmt: skip
    with connect(db) as con:
        con.execute(
            f"CREATE OR REPLACE TABLE profile_documents AS SELECT '{TASK}' AS task, printf('u%07d', u) AS user_id, "
            f"printf('d%010d', u * {docs} + j) AS doc_id, printf('2020-01-%02d', 1 + j % 28) AS date, "
            f"j::BIGINT AS position, {text} AS text, json_object('description', {text}, 'tag', {tag}) AS fields_json, "
            f"substr(sha256({text}), 1, 32) AS content_hash "
            f"FROM range({users}) a(u), range({docs}) b(j)"
        )
        con.execute(
            f"CREATE OR REPLACE TABLE lamp_samples AS SELECT '{TASK}' AS task, 'dev' AS split, printf('s%07d', u) "
            f"AS sample_id, printf('u%07d', u) AS user_id, 'input' AS input, printf('c%d query of user %d', "
            f"u % {COMMUNITIES}, u) AS query, {tags}[1 + (u % {COMMUNITIES}) % {len(TAGS)}] AS gold "
            f"FROM range({users}) a(u)"
        )


def settings_for(home: Path):  # noqa: ANN201 - prag_models.config.settings.Settings
    """Settings of the benchmark (LaMP source; the defaults, or PRAG__ environment overrides such as
    PRAG__CFRAG__EPOCHS=1 to time one user-encoder epoch at full scale)."""
    from prag_models.config.settings import load_settings

    environ = {k: v for k, v in os.environ.items() if k.startswith("PRAG__")}
    return load_settings(None, environ=environ, home=str(home), data={"source": "lamp", "lamp_dir": str(home)})


def _write(con, table: str, frame) -> None:  # noqa: ANN001
    from prag_models.storage.store import replace_rows

    replace_rows(con, table, frame, {"task": TASK})


def _pbr_anchor_only(con, settings) -> dict:  # noqa: ANN001
    import pandas as pd

    from prag_models.stages.pbr_lamp import TABLE, lamp_pbr_settings, pbr_lamp_rows
    from prag_models.stages.retrieval import RETRIEVAL_COLUMNS, load_task_inputs

    index, samples, _ = load_task_inputs(con, TASK, False, default_share=settings.privacy.default_share)
    pbr = lamp_pbr_settings(settings.pbr)
    rows = pbr_lamp_rows(TASK, index, samples, ["pbr_anchor_only"], pbr, settings.retrieval.k, {},
                         lambda t: np.zeros((len(t), DIM), dtype=np.float32))
    _write(con, TABLE, pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS))
    return {"rows": len(rows)}


def _user_encoder(con, settings) -> dict:  # noqa: ANN001
    """Train the CFRAG user encoder, encode every user and write cfrag_user_embeddings (what the encoder and
    cfrag_user_embeddings assets compute; the model stays in memory instead of MLflow)."""
    from prag_models.methods.cfrag.tables import cfrag_user_embedding_rows
    from prag_models.methods.cfrag.training import train_task_user_encoder

    trained = train_task_user_encoder(con, TASK, settings)
    frame, stats = cfrag_user_embedding_rows(con, TASK, trained.model, True)
    _write(con, "cfrag_user_embeddings", frame)
    return {**stats, "train_seconds": round(trained.seconds, 1), "steps": len(trained.curve),
            "finetune_doc_embeddings": trained.params["finetune_doc_embeddings"]}  # fmt: skip


def _retrieval_evaluation(con, settings) -> dict:  # noqa: ANN001
    from prag_models.stages.retrieval_evaluation import retrieval_evaluation_tables
    from prag_models.storage.store import replace_many

    scored, stats = retrieval_evaluation_tables(con, TASK, settings.retrieval.k)
    if scored is not None:
        where = {"task": TASK}
        replace_many(con, [("lamp_retrieval_sample_scores", scored[0], where),
                           ("lamp_retrieval_evaluation", scored[1], where),
                           ("lamp_retrieval_comparisons", scored[2], where)])  # fmt: skip
    return stats


def stand_in_cfrag_embeddings(con) -> bool:  # noqa: ANN001
    """Where the user encoder did not run (full scale: docs/measurements.md), write z_u as cfrag_user_embeddings so
    cfrag_similar_users can be measured; True when it did (not timed: the caller runs it before the clock)."""
    from prag_models.storage.store import table_exists

    if table_exists(con, "cfrag_user_embeddings") and con.execute(
        "SELECT count(*) FROM cfrag_user_embeddings WHERE task = ?", [TASK]
    ).fetchall()[0][0]:
        return False
    frame = con.sql("SELECT task, user_id, embedding FROM user_embeddings WHERE task = ?", params=[TASK])
    _write(con, "cfrag_user_embeddings", frame.to_arrow_table())
    return True


def _cfrag_similar(con, settings):  # noqa: ANN001, ANN202
    from prag_models.methods.cfrag.tables import cfrag_similar_user_rows

    return cfrag_similar_user_rows(con, TASK, settings)


def stage_functions(settings, emb) -> dict[str, Callable]:  # noqa: ANN001
    """stage name → fn(con) -> stats, each writing its table(s)."""
    import prag_models.stages.embeddings as e
    import prag_models.stages.retrieval as r
    import prag_models.stages.users as u
    def table(name: str, fn: Callable) -> Callable:
        def run(con) -> dict:  # noqa: ANN001
            frame, stats = fn(con)
            _write(con, name, frame)
            return stats

        return run

    return {
        "document_embeddings": table("document_embeddings", lambda con: e.document_embedding_rows(con, TASK, emb)),
        "query_embeddings": table("query_embeddings", lambda con: e.query_embedding_rows(con, TASK, emb)),
        "user_embeddings": table("user_embeddings", lambda con: u.user_embedding_rows(con, TASK)),
        "user_clusters": table("user_clusters", lambda con: u.user_cluster_rows(con, TASK, settings)),
        "similar_users": table("similar_users", lambda con: u.similar_user_rows(con, TASK, settings)),
        "baseline_retrievals": table("baseline_retrievals", lambda con: r.baseline_rows(con, TASK, settings)),
        "clusterrag_retrievals": table("clusterrag_retrievals", lambda con: r.clusterrag_rows(con, TASK, settings)),
        "pbr_anchor_only": lambda con: _pbr_anchor_only(con, settings),
        "cfrag_user_encoder": lambda con: _user_encoder(con, settings),
        "cfrag_similar_users": table("cfrag_similar_users", lambda con: _cfrag_similar(con, settings)),
        "retrieval_evaluation": lambda con: _retrieval_evaluation(con, settings),
    }


def incremental(con, settings, emb, checks: bool) -> dict:  # noqa: ANN001
    """The history path after a change: update the changed users, refresh the lists that can change, then (checks)
    the history checks on the changed rows."""
    import uuid

    from prag_models.users.incremental import refresh_similar_users, update_users

    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    report = update_users(con, TASK, emb.embed, emb.model_id, settings.clustering, run_id)
    refresh = refresh_similar_users(con, TASK, settings.clustering.similar_users)
    stats = {"users_updated": len(report.users), "reference": report.reference,
             "lists_refreshed": refresh["users"], "clusters_touched": refresh["clusters"]}  # fmt: skip
    if checks:
        from prag_models.stages.table_rules import neighbour_problems, one_cluster_problems

        stats["problems"] = one_cluster_problems(con, TASK, settings, run_id) + neighbour_problems(
            con, TASK, settings, run_id
        )
    return stats


def full(con, settings, emb, checks: bool) -> dict:  # noqa: ANN001
    """What the incremental path replaces, in full: embeddings → user embeddings → clusters → similar users (then
    the same checks on every row)."""
    run = stage_functions(settings, emb)
    stats = {name: run[name](con) for name in FULL}
    if checks:
        from prag_models.stages.table_rules import neighbour_problems, one_cluster_problems

        stats["problems"] = one_cluster_problems(con, TASK, settings) + neighbour_problems(con, TASK, settings)
    return stats
