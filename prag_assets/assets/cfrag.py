"""CFRAG stage 3 (docs/methods.md §2.3–2.8): retrieval for the dev samples with the REGISTERED models — full CFRAG
and the
ablations of paper Table 3 — into a table shaped like the other retrieval tables."""

import dagster as dg
import numpy as np
import pandas as pd

from prag_assets.assets.cfrag_training import cfrag_reranker, cfrag_retriever
from prag_assets.assets.cfrag_users import GROUP, cfrag_similar_users, load_registered_model, model_row
from prag_assets.assets.retrieval import RETRIEVAL_COLUMNS, load_task_inputs
from prag_assets.assets.users import user_embeddings
from prag_assets.common import run_tasks
from prag_assets.mlflow_resource import MlflowResource
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models.config import Settings
from prag_models.methods.cfrag import inference, pipeline
from prag_models.methods.profiles import ProfileIndex
from prag_models.registry import CHALLENGER, model_aliases
from prag_models.store import column_to_matrix, read_rows, replace_many

#: The model versions each task's CFRAG retrieval used (the bundle cfrag_model_evaluation evaluates).
BUNDLE_TABLE = "cfrag_retrieval_models"


def neighbour_lists(con, task: str) -> dict[str, list[str]]:
    """Each user's CFRAG similar users in rank order (the user itself first with include_self)."""
    out: dict[str, list[str]] = {}
    for user, nb in con.execute(
        "SELECT user_id, neighbour_id FROM cfrag_similar_users WHERE task = ? ORDER BY user_id, rank", [task]
    ).fetchall():
        out.setdefault(user, []).append(nb)
    return out


def mean_embedding_neighbours(con, task: str, settings: Settings) -> dict[str, list[str]]:
    """Top-m users by the MEAN-of-documents user embeddings (table user_embeddings): ablation §2.8."""
    from prag_models.methods.cfrag.user_encoder import top_m_similar_users

    users = read_rows(con, "user_embeddings", {"task": task}, order_by="user_id")
    ids = users["user_id"].tolist()
    found, _ = top_m_similar_users(
        column_to_matrix(users["embedding"].tolist()), settings.cfrag.top_m_users, settings.cfrag.include_self
    )
    return {ids[i]: [ids[int(j)] for j in found[i]] for i in range(len(ids))}


def load_challenger(con, mlflow: MlflowResource, task: str, kind: str) -> tuple[object, dict]:
    """The ``challenger`` version of a model kind; the version in ``cfrag_models`` when the alias does not exist."""
    row = model_row(con, task, kind)
    name = row["registered_name"]
    if CHALLENGER in model_aliases(mlflow.target(), name):
        model, entry = mlflow.load(name, alias=CHALLENGER)
        return model, {"registered_name": name, "version": entry.version, "loaded_by": f"alias {CHALLENGER}"}
    model, _ = load_registered_model(con, mlflow, task, kind)
    return model, {"registered_name": name, "version": int(row["version"]), "loaded_by": "cfrag_models version"}


def retrieve_variants(
    settings: Settings,
    task: str,
    index: ProfileIndex,
    samples: pd.DataFrame,
    user_emb: dict[str, np.ndarray],
    neighbours: dict[str, dict[str, list[str]]],
    models: dict,
) -> list[tuple]:
    """Rows of every CFRAG variant for every dev sample (prag_models.methods.cfrag.inference)."""
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
    found = inference.retrieve(index, queries, neighbours, models, settings)
    return [
        (task, v.method, q.sample_id, q.user_id, rank, r.doc_id, r.source_user_id, r.score)
        for q in queries
        for v in pipeline.VARIANTS
        for rank, r in enumerate(found[(q.sample_id, v.method)], 1)
    ]


def _agreement(frame: pd.DataFrame, a: str, b: str) -> float | None:
    """Share of samples whose doc lists are identical under methods a and b."""
    lists = {m: g.sort_values("rank").groupby("sample_id")["doc_id"].apply(tuple) for m, g in frame.groupby("method")}
    if a not in lists or b not in lists:
        return None
    joined = pd.concat([lists[a], lists[b]], axis=1, keys=[a, b]).dropna()
    return round(float((joined[a] == joined[b]).mean()), 3) if len(joined) else None


def _foreign_share(frame: pd.DataFrame, method: str) -> float | None:
    """Share of a method's retrieved documents that come from other users."""
    rows = frame[frame["method"] == method]
    return round(float((rows["source_user_id"] != rows["user_id"]).mean()), 3) if len(rows) else None


@dg.asset(
    deps=[cfrag_retriever, cfrag_reranker, cfrag_similar_users, user_embeddings],
    kinds={"duckdb", "pytorch", "mlflow"},
    description="CFRAG retrieval for every dev sample with the registered models (loaded from MLflow by alias "
    "'challenger', else the version in cfrag_models): top-m users, top-k docs of each by the retriever, reranked to "
    "the final k; plus the §2.8 ablations. The versions used go to table cfrag_retrieval_models.",
    group_name=GROUP,
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
)
def cfrag_retrievals(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Retrieve documents with CFRAG and its ablations."""
    settings = prag_settings.get()
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            index, samples, _ = load_task_inputs(con, task, with_neighbours=False)
            users = read_rows(con, "cfrag_user_embeddings", {"task": task})
            user_emb = dict(zip(users["user_id"], users["embedding"], strict=True))
            neighbours = {"encoder": neighbour_lists(con, task), "mean": mean_embedding_neighbours(con, task, settings)}
            loaded, versions = {}, {}
            encoder = model_row(con, task, "user_encoder")  # the encoder behind cfrag_user_embeddings
            used = {"user_encoder": {"registered_name": encoder["registered_name"], "version": int(encoder["version"]),
                                     "loaded_by": "cfrag_models version (user embeddings)"}}  # fmt: skip
            for kind in ("retriever", "reranker", "reranker_no_eu"):
                loaded[kind], used[kind] = load_challenger(con, mlflow, task, kind)
                versions[kind] = f"{used[kind]['registered_name']}/{used[kind]['version']}"
            rows = retrieve_variants(settings, task, index, samples, user_emb, neighbours, loaded)
            frame = pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS)
            bundle = pd.DataFrame([{"task": task, "kind": k, **u} for k, u in used.items()])
            replace_many(con, [("cfrag_retrievals", frame, {"task": task}), (BUNDLE_TABLE, bundle, {"task": task})])
            stats[task] = {
                "models": versions,
                "loaded_by": {k: u["loaded_by"] for k, u in used.items()},
                "samples": int(frame["sample_id"].nunique()),
                "docs_per_sample": round(len(frame) / max(frame["sample_id"].nunique() * len(pipeline.VARIANTS), 1), 2),
                "foreign_doc_share": _foreign_share(frame, "cfrag"),
                "same_as_cfrag": {m: _agreement(frame, "cfrag", m) for m in pipeline.CFRAG_METHODS[1:]},
                "coinciding_by_construction": {
                    f"{a} = {b}": {"same_lists": _agreement(frame, a, b), "why": why}
                    for (a, b), why in inference.COINCIDENCES.items()
                },
                "inference_docs_per_user": inference.docs_per_user(settings),
            }
            context.log.info(f"{task} CFRAG retrieval: {stats[task]}")
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "model_versions": dg.MetadataValue.json({t: s["models"] for t, s in stats.items()}),
        }
    )
