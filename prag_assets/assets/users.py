"""Stage 3: user embeddings, user clusters (HDBSCAN / k-means) and intra-cluster similar users (docs/methods.md
§3.1–3.3); the logic is prag_models.stages.users."""

from typing import Any

import numpy as np

from prag_assets.assets.embeddings import document_embeddings, query_embeddings
from prag_assets.builders.task_table import task_table_asset
from prag_assets.execution import TaskStep
from prag_models.stages import users as stage

GROUP = "users"


def _cluster_summary(stats: dict[str, dict]) -> dict[str, Any]:
    """The run's algorithm and mean silhouette over its tasks."""
    sil = [s["silhouette"] for s in stats.values() if s["silhouette"] is not None]
    return {"mean_silhouette": float(np.mean(sil)) if sil else None}


@task_table_asset(
    GROUP,
    deps=[document_embeddings, query_embeddings],
    description="z_u = mean of the user's unit document embeddings that may be shared (private documents and "
    "non-sharing users' documents never shape others' clusters, docs/privacy.md); a user with none gets the mean of "
    "its query embeddings (cold start, docs/methods.md §3.6).",
)
def user_embeddings(step: TaskStep):
    """One task's z_u rows."""
    return stage.user_embedding_rows(step.con, step.task, step.settings.privacy.default_share)


@task_table_asset(
    GROUP,
    deps=[user_embeddings],
    description="Every user in exactly one cluster: HDBSCAN (noise users form one extra cluster) or k-means, over the "
    "vectors of clustering.user_similarity (content | taste | blend, docs/methods.md §3.8); silhouette score and, on "
    "the demo, adjusted Rand index and cluster pool precision against the planted communities in metadata.",
    summary=_cluster_summary,
)
def user_clusters(step: TaskStep):
    """One task's cluster of every user."""
    return stage.user_cluster_rows(step.con, step.task, step.settings)


@task_table_asset(
    GROUP,
    deps=[user_clusters],
    description="Top-k most similar members of each user's own cluster (cosine of the clustering.user_similarity "
    "vectors, self excluded); on the demo, the pool precision of the neighbours' documents in metadata.",
)
def similar_users(step: TaskStep):
    """One task's intra-cluster neighbours of every user."""
    return stage.similar_user_rows(step.con, step.task, step.settings)
