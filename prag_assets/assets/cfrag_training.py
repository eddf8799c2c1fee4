"""CFRAG stage 2 (docs/methods.md §2.4–2.7): LLM feedback labels, then the personalized retriever and reranker
trained on them by distillation, each registered in MLflow. The feedback loop and the training are
prag_models.methods.cfrag (feedback, training)."""

import dagster as dg
from dagster_ray import RayResource

from prag_assets.assets.cfrag_users import GROUP, cfrag_similar_users, cfrag_user_embeddings
from prag_assets.assets.lamp_data import lamp_samples
from prag_assets.assets.users import user_embeddings
from prag_assets.builders.cfrag_registry import training_asset
from prag_assets.builders.task_table import task_asset
from prag_assets.execution import fill_stage, task_run
from prag_assets.metadata import keyed_table, report_partitions
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.methods.cfrag.feedback import FEEDBACK_TABLE, label_task
from prag_models.methods.cfrag.training import train_task_rerankers, train_task_retriever
from prag_models.methods.cfrag.tuning import tuned_cfrag_settings


@task_asset(
    GROUP,
    deps=[cfrag_similar_users, lamp_samples],
    kinds={"duckdb"},
    description="LLM feedback (§2.5): for each selected TRAIN sample and each of its m·k candidates, the output "
    "generated with a prompt holding only that doc, scored against the gold (accuracy, -|error|, ROUGE-1). Keyed by "
    "(task, sample, doc, generator, prompt version): existing labels are reused, each batch is written when done. "
    "A probe of cfrag.feedback_probe_samples samples is labelled first: where the teacher's ranking shows no headroom "
    "over cosine (truth NDCG, paired interval) labelling stops there (table feedback_probe says why).",
)
def feedback_labels(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
    ray: RayResource,
) -> dg.MaterializeResult:
    """Generate and score the missing feedback labels of each task (on Ray: computed there first, then stored)."""
    generator = models.generator()
    stats = {}
    with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
        filled = fill_stage(context, con, "feedback", tasks, settings, models, ray)
        for task in tasks:
            stats[task] = label_task(con, task, tuned_cfrag_settings(con, task, settings), generator, context.log.info)
            context.log.info(f"{task} feedback: {stats[task]}")
        probe = {t: {"probe": f"{s['probe']['decision']}: {s['probe']['reason']}"} for t, s in stats.items()}
        report_partitions(context, con, FEEDBACK_TABLE, stats, probe)
    return dg.MaterializeResult(
        metadata={"generator": generator.model_id, "run_cache_fill": keyed_table({"run": filled}, "scope")}
    )


cfrag_retriever = training_asset(
    name="cfrag_retriever",
    deps=[feedback_labels, cfrag_user_embeddings, user_embeddings],
    description="Personalized retriever S = (1-α)cos(q,d) + α cos(W e_u, d) (§2.4) distilled from the feedback "
    "labels with KL at T = 1 (§2.6); registered in MLflow.",
    train=lambda step, track: [
        train_task_retriever(step.con, step.task, step.settings, step.models.generator().model_id, track)
    ],
)

cfrag_reranker = training_asset(
    name="cfrag_reranker",
    deps=[feedback_labels, cfrag_user_embeddings, user_embeddings],
    description="Personalized reranker MLP([CLS(q,d) ⊕ W2 e_u]) over a cross-encoder (§2.7) distilled from the "
    "feedback labels with KL at T = 0.1; plus the ablation reranker trained without e_u (§2.8). Both registered.",
    train=lambda step, track: train_task_rerankers(
        step.con, step.task, step.settings, step.models.generator().model_id, track
    ),
)
