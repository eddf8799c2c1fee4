"""Stage 4a: ClusterRAG's knobs tuned per task on its train samples (never dev); the logic is
prag_models.stages.tuning."""

import dagster as dg

from prag_assets.assets.embeddings import query_embeddings
from prag_assets.assets.users import similar_users
from prag_assets.builders.task_table import task_table_asset
from prag_assets.execution import TaskStep
from prag_models.stages.tuning import tuned_settings_rows, tuning_markdown

GROUP = "retrieval"


def tuning_summary(stats: dict[str, dict]) -> dict:
    """The chosen values and the train scores of every task, as a table."""
    return {"tuning": dg.MetadataValue.md(tuning_markdown(stats))}


@task_table_asset(
    GROUP,
    deps=[similar_users, query_embeddings],
    description="Per task, the values of ClusterRAG's knobs (HDBSCAN's minimum cluster size, neighbours k, user "
    "similarity, community user weight and pool size) chosen by an Optuna search on the task's TRAIN samples "
    "(NDCG@k where relevance labels exist, label-hit@k otherwise; never dev) within tuning.budget_s; the search is "
    "logged to MLflow (run tuning-<task>). clusterrag_retrievals retrieves with them and keeps the untuned rows as "
    "<method>@default.",
    summary=tuning_summary,
)
def tuned_settings(step: TaskStep):
    """One task's tuned ClusterRAG knobs."""
    return tuned_settings_rows(step.con, step.task, step.settings, step.mlflow.target(), step.models.generator)
