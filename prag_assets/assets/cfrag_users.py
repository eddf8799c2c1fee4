"""CFRAG stage 1 (docs/methods.md §2.1–2.3): contrastive user encoder, CFRAG user embeddings, top-m similar users.

The training and table logic is prag_models.methods.cfrag (training, tables); MLflow registration is
prag_assets.cfrag_registry."""

import dagster as dg

from prag_assets.assets.embeddings import document_embeddings, query_embeddings
from prag_assets.cfrag_registry import load_registered_model, record_model, training_metadata
from prag_assets.common import progress_logger, run_tasks, table_metadata
from prag_assets.mlflow_resource import MlflowResource
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_assets.task_table import CODE_VERSION, TaskStep, task_table_asset
from prag_models.methods.cfrag.tables import MODELS_TABLE, cfrag_similar_user_rows, cfrag_user_embedding_rows
from prag_models.methods.cfrag.training import train_task_user_encoder

GROUP = "cfrag"
_COMMON = dict(
    group_name=GROUP,
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    code_version=CODE_VERSION,
)


@dg.asset(
    deps=[document_embeddings, query_embeddings],  # query vectors: the load-back probe
    kinds={"duckdb", "pytorch", "mlflow"},
    description="CFRAG user encoder (§2.1–2.2): doc embeddings + positions + one Transformer layer, trained with "
    "InfoNCE on two augmented views of every user's history; saved as safetensors and registered in MLflow.",
    **_COMMON,
)
def cfrag_user_encoder(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Train and register one user encoder per task on the histories of all its users."""
    settings = prag_settings.get()
    stats, curves = {}, {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            trained = train_task_user_encoder(con, task, settings, progress_logger(context, f"{task} user encoder"))
            stats[task] = record_model(con, mlflow, settings, task, trained)
            curves[task] = trained.curve
            context.log.info(f"{task} user encoder: {stats[task]}")
        written = table_metadata(con, MODELS_TABLE, list(stats))
    return dg.MaterializeResult(metadata={**training_metadata(stats, curves), **written})


def _user_embeddings(step: TaskStep):
    """e_u of one task's users from the registered encoder version."""
    model, row = load_registered_model(step.con, step.mlflow, step.task, "user_encoder")
    frame, stats = cfrag_user_embedding_rows(step.con, step.task, model)
    return frame, {**stats, "encoder": f"{row['registered_name']}/{row['version']}"}


cfrag_user_embeddings = task_table_asset(
    name="cfrag_user_embeddings",
    table="cfrag_user_embeddings",
    group=GROUP,
    deps=[cfrag_user_encoder],
    kinds=("duckdb", "pytorch", "mlflow"),
    description="e_u of every user of the task from the REGISTERED user encoder version (loaded from MLflow).",
    build=_user_embeddings,
)

cfrag_similar_users = task_table_asset(
    name="cfrag_similar_users",
    table="cfrag_similar_users",
    group=GROUP,
    deps=[cfrag_user_embeddings],
    description="Top-m users by cosine of CFRAG user embeddings (FAISS), the user itself first when "
    "cfrag.include_self (§2.3; code: self + m-1 others).",
    build=lambda step: cfrag_similar_user_rows(step.con, step.task, step.settings),
)
