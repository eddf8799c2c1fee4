"""Stage 2: document and query embeddings from the frozen encoder, cached by (model id, content hash)."""

from collections.abc import Callable

from prag_assets.assets.lamp_data import lamp_samples, profile_documents
from prag_assets.builders.task_table import task_table_asset
from prag_assets.execution import TaskStep
from prag_assets.metadata import progress_logger
from prag_models.stages import embeddings as stage

GROUP = "embeddings"


def _embed(step: TaskStep, what: str, rows: Callable[..., tuple]) -> tuple:
    """One task's rows of an embedding table: the stage function with the embedder and a progress log."""
    progress = progress_logger(step.context, f"embedding {step.task} {what}")
    return rows(step.con, step.task, step.models.embedder(), progress)


@task_table_asset(
    GROUP,
    deps=[profile_documents],
    kinds=("duckdb", "pytorch"),
    description="Unit-norm embedding of every profile document; only texts not yet in embedding_cache are embedded.",
    fill="documents",
    summary=lambda stats: {"newly_embedded": sum(s["newly_embedded"] for s in stats.values())},
)
def document_embeddings(step: TaskStep):
    """One task's document vectors."""
    return _embed(step, "documents", stage.document_embedding_rows)


@task_table_asset(GROUP, deps=[lamp_samples], kinds=("duckdb", "pytorch"), fill="queries",
                  description="Unit-norm embedding of every sample's retrieval query (docs/methods.md §1 query side), "
                  "cached.")  # fmt: skip
def query_embeddings(step: TaskStep):
    """One task's query vectors."""
    return _embed(step, "queries", stage.query_embedding_rows)
