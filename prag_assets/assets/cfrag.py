"""CFRAG stage 3 (docs/methods.md §2.3–2.8): retrieval for the dev samples with the REGISTERED models — full CFRAG
and the ablations of paper Table 3 — into a table shaped like the other retrieval tables; the retrieval is
prag_models.stages.cfrag_retrieval."""

import dagster as dg
import pandas as pd

from prag_assets.assets.cfrag_training import cfrag_reranker, cfrag_retriever
from prag_assets.assets.cfrag_users import GROUP, cfrag_similar_users
from prag_assets.assets.users import user_embeddings
from prag_assets.cfrag_registry import load_challenger, load_registered_model
from prag_assets.common import report_partitions, task_run
from prag_assets.mlflow_resource import MlflowResource
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_assets.task_table import task_asset
from prag_models.stages.cfrag_evaluation import BUNDLE_TABLE
from prag_models.stages.cfrag_retrieval import cfrag_retrieval_rows
from prag_models.storage.store import replace_many


@task_asset(
    GROUP,
    deps=[cfrag_retriever, cfrag_reranker, cfrag_similar_users, user_embeddings],
    kinds={"duckdb", "pytorch", "mlflow"},
    description="CFRAG retrieval for every dev sample with the registered models (loaded from MLflow by alias "
    "'challenger', else the version in cfrag_models): top-m users, top-k docs of each by the retriever, reranked to "
    "the final k; plus the §2.8 ablations. The versions used go to table cfrag_retrieval_models.",
)
def cfrag_retrievals(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Retrieve documents with CFRAG and its ablations."""
    stats = {}
    with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
        for task in tasks:
            loaded, versions = {}, {}
            # the encoder behind cfrag_user_embeddings (the consent-cost row encodes the opted-out users' empty history)
            loaded["user_encoder"], encoder = load_registered_model(con, mlflow, task, "user_encoder")
            used = {"user_encoder": {"registered_name": encoder["registered_name"], "version": int(encoder["version"]),
                                     "loaded_by": "cfrag_models version (user embeddings)"}}  # fmt: skip
            for kind in ("retriever", "reranker", "reranker_no_eu"):
                loaded[kind], used[kind] = load_challenger(con, mlflow, task, kind)
                versions[kind] = f"{used[kind]['registered_name']}/{used[kind]['version']}"
            frame, task_stats = cfrag_retrieval_rows(con, task, settings, loaded)
            bundle = pd.DataFrame([{"task": task, "kind": k, **u} for k, u in used.items()])
            replace_many(con, [("cfrag_retrievals", frame, {"task": task}), (BUNDLE_TABLE, bundle, {"task": task})])
            stats[task] = {"models": versions, "loaded_by": {k: u["loaded_by"] for k, u in used.items()}, **task_stats}
            context.log.info(f"{task} CFRAG retrieval: {stats[task]}")
        report_partitions(context, con, "cfrag_retrievals", stats)
    return dg.MaterializeResult()
