"""Stage 2: document and query embeddings from the frozen encoder, cached by (model id, content hash)."""

from collections.abc import Callable

from prag_assets.assets.lamp_data import lamp_samples, profile_documents
from prag_assets.builders.task_table import task_table_asset
from prag_assets.execution import TaskStep
from prag_assets.metadata import progress_logger
from prag_models.stages import embeddings as stage

GROUP = "embeddings"


def _embed(what: str, rows: Callable[..., tuple]) -> Callable[[TaskStep], tuple]:
    """The build of one embedding table: the stage function with the embedder and a progress log."""
    return lambda step: rows(
        step.con, step.task, step.models.embedder(), progress_logger(step.context, f"embedding {step.task} {what}")
    )


document_embeddings = task_table_asset(
    name="document_embeddings",
    group=GROUP,
    deps=[profile_documents],
    kinds=("duckdb", "pytorch"),
    description="Unit-norm embedding of every profile document; only texts not yet in embedding_cache are embedded.",
    build=_embed("documents", stage.document_embedding_rows),
    fill="documents",
    summary=lambda stats: {"newly_embedded": sum(s["newly_embedded"] for s in stats.values())},
)

query_embeddings = task_table_asset(
    name="query_embeddings",
    group=GROUP,
    deps=[lamp_samples],
    kinds=("duckdb", "pytorch"),
    description="Unit-norm embedding of every sample's retrieval query (docs/methods.md §1 query side), cached.",
    build=_embed("queries", stage.query_embedding_rows),
    fill="queries",
)
