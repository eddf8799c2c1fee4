"""CFRAG stage 3 (docs/methods.md §2.3–2.8): retrieval for the dev samples with the REGISTERED models — full CFRAG
and the ablations of paper Table 3 — into a table shaped like the other retrieval tables; the retrieval is
prag_models.stages.cfrag_retrieval."""

import pandas as pd

from prag_assets.assets.cfrag_training import cfrag_reranker, cfrag_retriever
from prag_assets.assets.cfrag_users import GROUP, cfrag_similar_users
from prag_assets.assets.users import user_embeddings
from prag_assets.builders.cfrag_registry import load_challenger, load_champion_bundle, load_registered_model
from prag_assets.builders.task_table import stage_asset
from prag_assets.execution import TaskStep
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_models.stages.cfrag_evaluation import BUNDLE_TABLE
from prag_models.stages.cfrag_retrieval import cfrag_retrieval_rows
from prag_models.stages.promotion_evidence import CHAMPION_TABLE, champion_retrieval_rows
from prag_models.stages.retrieval import RETRIEVAL_COLUMNS
from prag_models.storage.store import replace_many


@stage_asset(
    GROUP, table="cfrag_retrievals", uses=("mlflow",),
    deps=[cfrag_retriever, cfrag_reranker, cfrag_similar_users, user_embeddings],
    kinds={"duckdb", "pytorch", "mlflow"},
    description="CFRAG retrieval for every dev sample with the registered models (loaded from MLflow by alias "
    "'challenger', else the version in cfrag_models): top-m users, top-k docs of each by the retriever, reranked to "
    "the final k; plus the §2.8 ablations. The versions used go to table cfrag_retrieval_models. When the task's "
    "champion bundle differs, it retrieves for the same samples too (method cfrag@champion, versions in "
    "cfrag_champion_models): the paired evidence of the promotion gate.",
)
def cfrag_retrievals(step: TaskStep) -> dict:
    """One task's CFRAG retrieval and ablations with the registered models, and the champion's when it differs."""
    con, mlflow, task = step.con, step.mlflow, step.task
    loaded, versions = {}, {}
    # the encoder behind cfrag_user_embeddings (the consent-cost row encodes the opted-out users' empty history)
    loaded["user_encoder"], encoder = load_registered_model(con, mlflow, task, "user_encoder")
    used = {"user_encoder": {"registered_name": encoder["registered_name"], "version": int(encoder["version"]),
                             "loaded_by": "cfrag_models version (user embeddings)"}}  # fmt: skip
    for kind in ("retriever", "reranker", "reranker_no_eu"):
        loaded[kind], used[kind] = load_challenger(con, mlflow, task, kind)
        versions[kind] = f"{used[kind]['registered_name']}/{used[kind]['version']}"
    frame, task_stats = cfrag_retrieval_rows(con, task, step.settings, loaded)
    bundle = pd.DataFrame([{"task": task, "kind": k, **u} for k, u in used.items()])
    frame, champion = _with_champion(con, mlflow, step.settings, task, frame, used)
    replace_many(con, [("cfrag_retrievals", frame, {"task": task}), (BUNDLE_TABLE, bundle, {"task": task}),
                       (CHAMPION_TABLE, champion, {"task": task})])  # fmt: skip
    stats = {"models": versions, "loaded_by": {k: u["loaded_by"] for k, u in used.items()}, **task_stats}
    if len(champion):
        stats["champion_models"] = {r.kind: f"{r.registered_name}/{r.version}" for r in champion.itertuples()}
    step.context.log.info(f"{task} CFRAG retrieval: {stats}")
    return stats


def _with_champion(con, mlflow: MlflowResource, settings, task: str, frame: pd.DataFrame,
                   used: dict) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """The rows plus ``cfrag@champion`` when the champion bundle differs from the one used, and that bundle's rows
    for cfrag_champion_models (empty when there is no other champion)."""
    empty = pd.DataFrame({c: pd.Series(dtype="string") for c in ("task", "kind", "registered_name")}
                         | {"version": pd.Series(dtype="int64")})  # typed: it may create the table
    found = load_champion_bundle(mlflow, task)
    challenger = {k: int(u["version"]) for k, u in used.items()}
    if found is None or found[1] == challenger:
        return frame, empty
    models, versions = found
    rows = champion_retrieval_rows(con, task, settings, models, versions["user_encoder"] == challenger["user_encoder"])
    champion = pd.DataFrame([{"task": task, "kind": k, "registered_name": used[k]["registered_name"], "version": v}
                             for k, v in versions.items()])  # fmt: skip
    return pd.concat([frame, pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS)], ignore_index=True), champion
