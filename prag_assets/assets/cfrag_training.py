"""CFRAG stage 2 (docs/methods.md §2.4–2.7): LLM feedback labels, then the personalized retriever and reranker
trained on them by distillation, each registered in MLflow. The feedback loop and the training are
prag_models.methods.cfrag (feedback, training)."""


from prag_assets.assets.cfrag_users import GROUP, cfrag_similar_users, cfrag_user_embeddings
from prag_assets.assets.lamp_data import lamp_samples
from prag_assets.assets.users import user_embeddings
from prag_assets.builders.cfrag_registry import training_asset
from prag_assets.builders.task_table import stage_asset
from prag_assets.execution import TaskStep
from prag_models.methods.cfrag.feedback import FEEDBACK_TABLE, label_task
from prag_models.methods.cfrag.training import train_task_rerankers, train_task_retriever
from prag_models.methods.cfrag.tuning import tuned_cfrag_settings


@stage_asset(
    GROUP,
    table=FEEDBACK_TABLE,
    uses=("models", "ray"),
    fill="feedback",
    about=lambda resources: {"generator": resources.models.generator().model_id},
    deps=[cfrag_similar_users, lamp_samples],
    description="LLM feedback (§2.5): for each selected TRAIN sample and each of its m·k candidates, the output "
    "generated with a prompt holding only that doc, scored against the gold (accuracy, -|error|, ROUGE-1). Keyed by "
    "(task, sample, doc, generator, prompt version): existing labels are reused, each batch is written when done. "
    "A probe of cfrag.feedback_probe_samples samples is labelled first: where the teacher's ranking shows no headroom "
    "over cosine (truth NDCG, paired interval) labelling stops there (table feedback_probe says why).",
)
def feedback_labels(step: TaskStep) -> dict:
    """Generate and score one task's missing feedback labels (on Ray: computed there first, then stored); its
    partition says what the probe decided."""
    stats = label_task(step.con, step.task, tuned_cfrag_settings(step.con, step.task, step.settings),
                       step.models.generator(), step.context.log.info)  # fmt: skip
    step.context.log.info(f"{step.task} feedback: {stats}")
    step.shown["probe"] = f"{stats['probe']['decision']}: {stats['probe']['reason']}"
    return stats


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
