"""CFRAG stage 1 (docs/methods.md §2.1–2.3): contrastive user encoder, CFRAG user embeddings, top-m similar users.

The training and table logic is prag_models.methods.cfrag (training, tables); MLflow registration is
prag_assets.builders.cfrag_registry."""


from prag_assets.assets.embeddings import document_embeddings, query_embeddings
from prag_assets.assets.tuning import tuning_summary
from prag_assets.assets.users import user_embeddings
from prag_assets.builders.cfrag_registry import load_registered_model, training_asset
from prag_assets.builders.task_table import task_table_asset
from prag_assets.execution import TaskStep
from prag_assets.metadata import progress_logger
from prag_models.methods.cfrag.tables import cfrag_similar_user_rows, cfrag_user_embedding_rows
from prag_models.methods.cfrag.training import train_task_user_encoder
from prag_models.stages.tuning import cfrag_tuned_rows

GROUP = "cfrag"


cfrag_user_encoder = training_asset(
    name="cfrag_user_encoder",
    deps=[document_embeddings, query_embeddings],  # query vectors: the load-back probe
    description="CFRAG user encoder (§2.1–2.2): doc embeddings + positions + one Transformer layer, trained with "
    "InfoNCE on two augmented views of every user's history; saved as safetensors and registered in MLflow.",
    train=lambda step, track: [
        train_task_user_encoder(
            step.con, step.task, step.settings, progress_logger(step.context, f"{step.task} user encoder"), track
        )
    ],
)


@task_table_asset(
    GROUP,
    deps=[cfrag_user_encoder],
    kinds=("duckdb", "pytorch", "mlflow"),
    description="e_u of every user of the task from the REGISTERED user encoder version (loaded from MLflow).",
)
def cfrag_user_embeddings(step: TaskStep):
    """e_u of one task's users from the registered encoder version."""
    model, row = load_registered_model(step.con, step.mlflow, step.task, "user_encoder")
    described = f"{row['registered_name']} v{row['version']}"
    frame, stats = cfrag_user_embedding_rows(step.con, step.task, model, step.settings.privacy.default_share, described)
    return frame, {**stats, "encoder": f"{row['registered_name']}/{row['version']}"}


@task_table_asset(
    GROUP,
    deps=[cfrag_user_embeddings, user_embeddings, query_embeddings],
    description="Per task, CFRAG's knobs (similar users m, documents per user at inference, the retriever's "
    "starting α, which user vectors rank neighbours) chosen by an Optuna search on the task's TRAIN samples with "
    "CFRAG as it stands before training (docs/methods.md §2.9); the default is kept unless the best trial's paired "
    "train gain is shown. Everything downstream uses them; cfrag_retrievals keeps the untuned row as cfrag@default. "
    "The search is logged to MLflow (run cfrag-tuning-<task>).",
    summary=tuning_summary,
)
def cfrag_tuned_settings(step: TaskStep):
    """One task's tuned CFRAG knobs."""
    return cfrag_tuned_rows(step.con, step.task, step.settings, step.mlflow.target(), step.models.generator)


@task_table_asset(
    GROUP,
    deps=[cfrag_user_embeddings, cfrag_tuned_settings],
    description="Top-m users (m as tuned for the task) by cosine of CFRAG user embeddings or mean document "
    "embeddings (cfrag.user_vectors, tuned) with FAISS, blended with taste when clustering.user_similarity = taste "
    "| blend (docs/methods.md §3.8), the user itself first when cfrag.include_self (§2.3; code: self + m-1 others); "
    "on the demo, the pool precision of the m users' documents.",
)
def cfrag_similar_users(step: TaskStep):
    """One task's top-m similar users by CFRAG's user vectors."""
    return cfrag_similar_user_rows(step.con, step.task, step.settings)
