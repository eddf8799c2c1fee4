"""Stage 5: LLM generations for every retrieval method (and zero-shot), batched and cached by prompt."""

import hashlib
import json

import dagster as dg
import pandas as pd

from prag_assets.assets.cfrag import cfrag_retrievals
from prag_assets.assets.lamp_data import lamp_samples
from prag_assets.assets.pbr_lamp import pbr_lamp_retrievals
from prag_assets.assets.retrieval import baseline_retrievals, clusterrag_retrievals
from prag_assets.common import progress_logger, run_tasks
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, ModelsResource, PragSettingsResource
from prag_models.data.source import llm_eval_sample_ids
from prag_models.generation import ZERO_SHOT, answer_cached, answer_mode, build_jobs, run_jobs
from prag_models.prompts import prompt_document
from prag_models.store import replace_rows, table_exists

GROUP = "generation"
#: Tables of retrieved documents that feed the generation stage.
RETRIEVAL_TABLES = ("baseline_retrievals", "clusterrag_retrievals", "cfrag_retrievals", "pbr_lamp_retrievals")


def retrieved_texts(con, task: str, methods: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    """method → sample → texts of the retrieved documents in rank order (configured methods only)."""
    out: dict[str, dict[str, list[str]]] = {}
    for table in RETRIEVAL_TABLES:
        if not table_exists(con, table):
            continue
        rows = con.execute(
            f"SELECT r.method, r.sample_id, p.text, p.fields_json FROM {table} r JOIN profile_documents p "
            "ON p.task = r.task AND p.user_id = r.source_user_id AND p.doc_id = r.doc_id "
            "WHERE r.task = ? ORDER BY r.method, r.sample_id, r.rank",
            [task],
        ).fetchall()
        for method, sample_id, text, fields in rows:
            if method in methods:
                doc = prompt_document(task, text, json.loads(fields))
                out.setdefault(method, {}).setdefault(sample_id, []).append(doc)
    return out


@dg.asset(
    group_name=GROUP,
    deps=[lamp_samples, baseline_retrievals, clusterrag_retrievals, cfrag_retrievals, pbr_lamp_retrievals],
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    description="One answer per (method, LLM-evaluation sample: the first data.llm_eval_samples dev samples) with "
    "the LaMP prompt and token budget: the most likely label "
    "for LaMP-1/2/3 (label scoring), a greedy generation for LaMP-4/5/7; identical prompts for the same model run "
    "once (generation_cache).",
)
def generations(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Generate and parse the outputs of every configured method."""
    settings = prag_settings.get()
    generator = models.generator()
    methods = settings.retrieval.methods
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            samples = con.execute(
                "SELECT sample_id, user_id, input, gold FROM lamp_samples WHERE task = ? AND split = 'dev' "
                "ORDER BY sample_id",
                [task],
            ).df()
            samples = samples[samples["sample_id"].isin(llm_eval_sample_ids(samples["sample_id"], settings))]
            jobs = build_jobs(
                task,
                dict(zip(samples["sample_id"], samples["input"], strict=True)),
                retrieved_texts(con, task, methods),
                generator,
                settings.prompt,
                zero_shot=ZERO_SHOT in methods,
            )
            counter = {"ran": 0}
            mode = answer_mode(task, settings.generator)

            def answer(prompts, _task=task, _counter=counter, _mode=mode):
                outputs, ran = answer_cached(
                    _task,
                    generator,
                    prompts,
                    settings.generator,
                    con,
                    progress=progress_logger(context, f"{_task} {_mode}"),
                )
                _counter["ran"] += ran
                return outputs

            results = run_jobs(task, jobs, answer)
            meta = samples.set_index("sample_id")
            frame = pd.DataFrame(
                [
                    (
                        task,
                        job.method,
                        job.sample_id,
                        meta.at[job.sample_id, "user_id"],
                        generator.model_id,
                        mode,
                        hashlib.sha256(job.prompt.encode()).hexdigest(),
                        raw,
                        pred,
                        meta.at[job.sample_id, "gold"],
                    )
                    for job, raw, pred in results
                ],
                columns=[
                    "task",
                    "method",
                    "sample_id",
                    "user_id",
                    "generator_id",
                    "answer_mode",
                    "prompt_hash",
                    "output",
                    "prediction",
                    "gold",
                ],
            )
            replace_rows(con, "generations", frame, {"task": task})
            stats[task] = {
                "prompts": len(jobs),
                "answer_mode": mode,
                "model_calls_now": counter["ran"],
                "methods": int(frame["method"].nunique()),
                "samples": len(samples),
            }
            context.log.info(f"{task}: {stats[task]}")
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats), "generator": generator.model_id})
