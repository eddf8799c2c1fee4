"""Stage 4: documents retrieved for each dev sample by the baselines and by ClusterRAG; the logic is
prag_models.stages.retrieval."""

from prag_assets.assets.embeddings import document_embeddings, query_embeddings
from prag_assets.assets.tuning import tuned_settings
from prag_assets.assets.users import similar_users
from prag_assets.builders.task_table import task_table_asset
from prag_assets.execution import TaskStep
from prag_models.stages.retrieval import (  # noqa: F401 - names other modules and the lead's code use from here
    BASELINE_METHODS,
    CLUSTERRAG_METHODS,
    RETRIEVAL_COLUMNS,
    baseline_rows,
    clusterrag_rows,
    community_retriever,
    load_task_inputs,
    planted_communities,
    run_baselines,
    run_clusterrag,
)

GROUP = "retrieval"


@task_table_asset(
    GROUP,
    deps=[document_embeddings, query_embeddings],
    description="Top-k of the user's own profile by random, recency, BM25 (bm25s) and dense (cosine) retrieval; "
    "dense_global over every user's documents (not personalized); oracle_community (demo only: dense over the "
    "user's true community, the ceiling); for every dev sample.",
)
def baseline_retrievals(step: TaskStep):
    """One task's baseline retrievals."""
    return baseline_rows(step.con, step.task, step.settings)


@task_table_asset(
    GROUP,
    deps=[similar_users, tuned_settings],
    description="ClusterRAG: user-only / collaborative / hybrid profiles ranked by cosine, two-stage retrieval "
    "(document clusters, top-B centroids, then top-k) over the hybrid pool, and the community-wide mode (the "
    "user's whole cluster by cos(q,d) + w·cos(z_u, z_author), one FAISS index per cluster); collaborative and "
    "community with the task's tuned knobs (tuned_settings), their untuned rows as <method>@default.",
)
def clusterrag_retrievals(step: TaskStep):
    """One task's ClusterRAG retrievals."""
    return clusterrag_rows(step.con, step.task, step.settings)
