"""Stage 5: LLM generations for every retrieval method (and zero-shot), batched and cached by prompt; the logic is
prag_models.stages.generation."""

from prag_assets.assets.cfrag import cfrag_retrievals
from prag_assets.assets.lamp_data import lamp_samples
from prag_assets.assets.pbr_lamp import pbr_lamp_retrievals
from prag_assets.assets.retrieval import baseline_retrievals, clusterrag_retrievals
from prag_assets.builders.task_table import task_table_asset
from prag_assets.execution import TaskStep
from prag_assets.metadata import progress_logger
from prag_models.generation.answers import answer_mode
from prag_models.stages.generation import generation_rows

GROUP = "generation"


@task_table_asset(
    GROUP,
    deps=[lamp_samples, baseline_retrievals, clusterrag_retrievals, cfrag_retrievals, pbr_lamp_retrievals],
    description="One answer per (method, LLM-evaluation sample: the first data.llm_eval_samples dev samples) with "
    "the LaMP prompt and token budget: the most likely label for LaMP-1/2/3 (label scoring), a greedy generation "
    "for LaMP-4/5/7; identical prompts for the same model run once (generation_cache).",
    fill="generations",
    summary=lambda stats: {"generator": next((s["generator"] for s in stats.values()), "")},
)
def generations(step: TaskStep):
    """Generate and parse the outputs of every configured method on one task."""
    mode = answer_mode(step.task, step.settings.generator)
    progress = progress_logger(step.context, f"{step.task} {mode}")
    return generation_rows(step.con, step.task, step.settings, step.models.generator(), progress)
