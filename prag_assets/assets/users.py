"""Stage 3: user embeddings, user clusters (HDBSCAN / k-means) and intra-cluster similar users (docs/methods.md
§3.1–3.3)."""

import json

import dagster as dg
import numpy as np
import pandas as pd

from prag_assets.assets.embeddings import document_embeddings, query_embeddings
from prag_assets.common import preview, run_tasks
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models.store import column_to_matrix, read_rows, replace_rows
from prag_models.users.clustering import cluster_users
from prag_models.users.embeddings import mean_user_embeddings
from prag_models.users.similar import intra_cluster_neighbours

GROUP = "users"
_COMMON = dict(
    group_name=GROUP, partitions_def=task_partitions, backfill_policy=single_run, pool=DUCKDB_POOL, kinds={"duckdb"}
)


@dg.asset(
    deps=[document_embeddings, query_embeddings],
    description="z_u = mean of the user's unit document embeddings; a user with no history gets the mean of its "
    "query embeddings (cold start, docs/methods.md §3.6).",
    **_COMMON,
)
def user_embeddings(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Compute one embedding per user of each task."""
    settings = prag_settings.get()
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            docs = read_rows(con, "document_embeddings", {"task": task})
            queries = read_rows(con, "query_embeddings", {"task": task})
            users = sorted(set(queries["user_id"]) | set(docs["user_id"]))
            q_by_user = {
                u: column_to_matrix(g["embedding"].tolist()).mean(axis=0) for u, g in queries.groupby("user_id")
            }
            vectors, counts, cold = mean_user_embeddings(
                users, docs["user_id"].tolist(), column_to_matrix(docs["embedding"].tolist()), q_by_user
            )
            frame = pd.DataFrame(
                {"task": task, "user_id": users, "n_docs": counts, "cold_start": cold, "embedding": list(vectors)}
            )
            replace_rows(con, "user_embeddings", frame, {"task": task})
            stats[task] = {"users": len(users), "cold_start": int(sum(cold))}
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats)})


def _planted_communities(settings, task: str) -> dict[str, int] | None:
    """The demo's planted community of each user (None when the source is not the demo)."""
    if settings.data.source != "demo":
        return None
    from prag_models.data.source import demo_root

    manifest = json.loads((demo_root(settings) / "demo_manifest.json").read_text())
    return manifest.get("tasks", manifest).get(task, {}).get("community_of_user")


@dg.asset(
    deps=[user_embeddings],
    description="Every user in exactly one cluster: HDBSCAN (noise users form one extra cluster) or k-means; "
    "silhouette score and, on the demo, adjusted Rand index against the planted communities in metadata.",
    **_COMMON,
)
def user_clusters(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Cluster the users of each task."""
    from sklearn.metrics import adjusted_rand_score

    settings = prag_settings.get()
    c = settings.clustering
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            users = read_rows(con, "user_embeddings", {"task": task}, order_by="user_id")
            result = cluster_users(
                column_to_matrix(users["embedding"].tolist()),
                c.algorithm,
                c.min_cluster_size,
                c.min_samples,
                c.kmeans_k,
                c.seed,
            )
            frame = pd.DataFrame(
                {"task": task, "user_id": users["user_id"], "cluster": result.labels, "algorithm": c.algorithm}
            )
            replace_rows(con, "user_clusters", frame, {"task": task})
            entry = {"clusters": result.n_clusters, "noise_users": result.n_noise, "silhouette": result.silhouette}
            planted = _planted_communities(settings, task)
            if planted:
                truth = [planted.get(u, -1) for u in users["user_id"]]
                entry["adjusted_rand_vs_planted"] = round(float(adjusted_rand_score(truth, result.labels)), 4)
            stats[task] = entry
            context.log.info(f"{task}: {entry}")
    sil = [s["silhouette"] for s in stats.values() if s["silhouette"] is not None]
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "algorithm": c.algorithm,
            "mean_silhouette": float(np.mean(sil)) if sil else None,
        }
    )


@dg.asset(
    deps=[user_clusters],
    description="Top-k most similar members of each user's own cluster (cosine of user embeddings, self excluded).",
    **_COMMON,
)
def similar_users(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Rank intra-cluster neighbours for each user."""
    settings = prag_settings.get()
    stats = {}
    frame = pd.DataFrame()
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            users = con.execute(
                "SELECT e.user_id, e.embedding, c.cluster FROM user_embeddings e JOIN user_clusters c "
                "USING (task, user_id) WHERE task = ? ORDER BY e.user_id",
                [task],
            ).df()
            rows = intra_cluster_neighbours(
                users["user_id"].tolist(),
                column_to_matrix(users["embedding"].tolist()),
                users["cluster"].to_numpy(),
                settings.clustering.similar_users,
            )
            frame = pd.DataFrame(rows, columns=["user_id", "neighbour_id", "rank", "similarity"])
            frame.insert(0, "task", task)
            replace_rows(con, "similar_users", frame, {"task": task})
            stats[task] = {
                "pairs": len(frame),
                "users_without_neighbours": int(len(set(users["user_id"]) - set(frame["user_id"]))),
            }
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats), "preview": preview(frame)})
