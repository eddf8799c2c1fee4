"""Stage 2: document and query embeddings from the frozen encoder, cached by (model id, content hash)."""

import dagster as dg
import pandas as pd

from prag_assets.assets.lamp_data import lamp_samples, profile_documents
from prag_assets.common import progress_logger, run_tasks
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, ModelsResource, PragSettingsResource
from prag_models.store import read_rows, replace_rows
from prag_models.text.embedding_cache import embed_with_cache

GROUP = "embeddings"


def _embed_table(context, con, models: ModelsResource, texts: list[str], what: str):
    """Embed texts through the cache; returns (matrix, hashes, newly embedded, model id)."""
    embedder = models.embedder()
    matrix, hashes, new = embed_with_cache(
        con, embedder.embed, embedder.model_id, texts, progress=progress_logger(context, f"embedding {what}")
    )
    return matrix, hashes, new, embedder.model_id


@dg.asset(
    group_name=GROUP,
    deps=[profile_documents],
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb", "pytorch"},
    description="Unit-norm embedding of every profile document; only texts not yet in embedding_cache are embedded.",
)
def document_embeddings(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Embed the profile documents of each task (cached by content hash)."""
    settings = prag_settings.get()
    stats = {}
    total_new = 0
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            docs = read_rows(con, "profile_documents", {"task": task}, order_by="user_id, position")
            matrix, _, new, model_id = _embed_table(context, con, models, docs["text"].tolist(), f"{task} documents")
            frame = pd.DataFrame(
                {
                    "task": task,
                    "user_id": docs["user_id"],
                    "doc_id": docs["doc_id"],
                    "position": docs["position"],
                    "model_id": model_id,
                    "content_hash": docs["content_hash"],
                    "embedding": list(matrix),
                }
            )
            replace_rows(con, "document_embeddings", frame, {"task": task})
            stats[task] = {"documents": len(frame), "newly_embedded": new, "dim": int(matrix.shape[1])}
            total_new += new
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "newly_embedded": total_new,
            "embedder": settings.embedder.model,
        }
    )


@dg.asset(
    group_name=GROUP,
    deps=[lamp_samples],
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb", "pytorch"},
    description="Unit-norm embedding of every sample's retrieval query (docs/methods.md §1 query side), cached.",
)
def query_embeddings(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Embed the queries of each task's samples (cached by content hash)."""
    settings = prag_settings.get()
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            samples = read_rows(con, "lamp_samples", {"task": task}, order_by="split, sample_id")
            matrix, hashes, new, model_id = _embed_table(
                context, con, models, samples["query"].tolist(), f"{task} queries"
            )
            frame = pd.DataFrame(
                {
                    "task": task,
                    "sample_id": samples["sample_id"],
                    "user_id": samples["user_id"],
                    "model_id": model_id,
                    "content_hash": hashes,
                    "embedding": list(matrix),
                }
            )
            replace_rows(con, "query_embeddings", frame, {"task": task})
            stats[task] = {"queries": len(frame), "newly_embedded": new}
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats)})
