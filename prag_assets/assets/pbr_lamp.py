"""PBR as a query-side option of LaMP retrieval (docs/methods.md §4): the user's own profile is the corpus, q*
replaces q.

Methods: ``pbr`` (when in retrieval.methods) — P-PRF (pseudo utterances and pseudo reasoning generated with the
configured LLM from the top pbr.lamp_k1 profile documents) fused with the P-Anchor of the profile, q* = q + g +
w1 f_avg + w2 r; ``pbr_anchor_only`` (always: no LLM) — PBR w/o P-PRF, q* = q + g. Top retrieval.k by inner product.

Demo budget of ``pbr``: 2 generations per dev sample (utterances + reasoning), at most pbr.lamp_max_new_tokens new
tokens each with the shown documents cut to pbr.lamp_history_tokens: 2 x 8 dev samples x 6 tasks = 96 generations
on the embedded demo (about 0.6 s each with the packaged SmolLM2 on 2 cores: ~1 min), kept in generation_cache
(a re-run generates none).
"""

from collections import Counter

import dagster as dg
import pandas as pd
from dagster_ray import RayResource

from prag_assets.assets.embeddings import document_embeddings, query_embeddings
from prag_assets.builders.task_table import task_asset
from prag_assets.execution import TaskStep, run_stage
from prag_assets.metadata import progress_logger
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.data.source import llm_eval_sample_ids
from prag_models.stages.pbr_lamp import (
    DDL,
    LAMP_METHODS,
    TABLE,
    CachedEmbedder,
    CachedGenerator,
    lamp_expansions,
    lamp_pbr_settings,
    pbr_lamp_rows,
)
from prag_models.stages.retrieval import RETRIEVAL_COLUMNS, load_task_inputs
from prag_models.storage.store import replace_rows
from prag_models.text.embedder import embedder_key

GROUP = "retrieval"


@task_asset(
    GROUP,
    deps=[document_embeddings, query_embeddings],
    description="PBR query side over the user's own profile: pbr (P-PRF via the configured LLM + P-Anchor fusion) "
    "and pbr_anchor_only (q + g, no LLM); top-k by inner product; pbr on the LLM-evaluation samples "
    "(data.llm_eval_samples), pbr_anchor_only on every dev sample.",
)
def pbr_lamp_retrievals(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    ray: RayResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Retrieve with the PBR methods configured in retrieval.methods (P-PRF generations cached in DuckDB; on Ray
    computed there first)."""
    settings = prag_settings.get()
    # anchor-only needs no LLM: the retrieval evaluation scores it on every sample whatever retrieval.methods says;
    # P-PRF (pbr) runs only when asked for, on the LLM-evaluation samples
    methods = [m for m in LAMP_METHODS if m == "pbr_anchor_only" or m in settings.retrieval.methods]
    pbr = lamp_pbr_settings(settings.pbr)
    run: dict = {"gen": None}

    def prepare(con) -> None:
        """The table, the P-PRF generator (when pbr runs) and the cached embedder of the run."""
        con.execute(DDL)
        if "pbr" in methods:
            run["gen"] = CachedGenerator(models.generator(), con, settings.generator.batch_size,
                                         progress_logger(context, "PBR P-PRF generation"))  # fmt: skip
        run["emb"] = CachedEmbedder(con, models.embedder, embedder_key(settings.embedder))

    def retrieve(step: TaskStep) -> dict:
        """One task's PBR rows, written in one transaction."""
        gen, emb, task = run["gen"], run["emb"], step.task
        index, samples, _ = load_task_inputs(step.con, task, False, default_share=settings.privacy.default_share)
        before = gen.generated if gen else 0
        # P-PRF costs 2 generations per sample: only the LLM-evaluation samples; anchor-only runs on all
        subset = samples[samples["sample_id"].isin(llm_eval_sample_ids(samples["sample_id"], settings))]
        expansions = lamp_expansions(index, subset, pbr, gen) if gen else {}
        k, rest = settings.retrieval.k, [m for m in methods if m != "pbr"]
        rows = pbr_lamp_rows(task, index, subset, [m for m in methods if m == "pbr"], pbr, k, expansions, emb.embed)
        rows += pbr_lamp_rows(task, index, samples, rest, pbr, k, {}, emb.embed) if rest else []
        frame = pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS)
        replace_rows(step.con, TABLE, frame, {"task": task})
        stats = {
            "samples": len(samples),
            "pbr_samples": len(subset),
            "rows": len(frame),
            "methods": methods,
            "p_prf_prompts": 2 * len(expansions),
            "generated_now": (gen.generated if gen else 0) - before,
            "parse_fallbacks": dict(Counter(e.parse_fallback for e in expansions.values())),
        }
        context.log.info(f"{task}: {stats}")
        return stats

    filled = run_stage(context, retrieve, settings=settings, duckdb=duckdb, table=TABLE, models=models, ray=ray,
                       fill="pbr", prepare=prepare)  # fmt: skip
    return dg.MaterializeResult(metadata={"generator": run["gen"].model_id if run["gen"] else "none", **filled})
