"""PBR as a query-side option of LaMP retrieval (docs/methods.md §4): the user's own profile is the corpus, q*
replaces q.

Methods (configured in retrieval.methods): ``pbr`` — P-PRF (pseudo utterances and pseudo reasoning generated with the
configured LLM from the top pbr.lamp_k1 profile documents) fused with the P-Anchor of the profile, q* = q + g +
w1 f_avg + w2 r; ``pbr_anchor_only`` — PBR w/o P-PRF, q* = q + g, no LLM. Top retrieval.k by inner product.

Demo budget of ``pbr``: 2 generations per dev sample (utterances + reasoning), at most pbr.lamp_max_new_tokens new
tokens each with the shown documents cut to pbr.lamp_history_tokens: 2 x 8 dev samples x 6 tasks = 96 generations
on the embedded demo (about 0.6 s each with the packaged SmolLM2 on 2 cores: ~1 min), kept in generation_cache
(a re-run generates none).
"""

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

import dagster as dg
import numpy as np
import pandas as pd

from prag_assets.assets.embeddings import document_embeddings, query_embeddings
from prag_assets.assets.retrieval import RETRIEVAL_COLUMNS, load_task_inputs
from prag_assets.common import progress_logger, run_tasks, table_metadata
from prag_assets.resources import DuckDBResource, ModelsResource, PragSettingsResource
from prag_assets.task_table import task_asset
from prag_models.config import PbrSettings
from prag_models.data.source import llm_eval_sample_ids
from prag_models.llm.base import Generator
from prag_models.llm.cache import generate_cached
from prag_models.methods.pbr import (
    PbrExpansion,
    anchor_vector,
    generate_expansions,
    pbr_query_vectors,
    top_k_prf,
    validate_pbr_settings,
)
from prag_models.methods.profiles import ProfileIndex
from prag_models.store import replace_rows
from prag_models.text.embedding_cache import embed_with_cache

GROUP = "retrieval"
TABLE = "pbr_lamp_retrievals"
#: LaMP method name -> the PBR query vector it uses (prag_models.methods.pbr.pbr_query_vectors).
LAMP_METHODS: dict[str, str] = {"pbr": "pbr", "pbr_anchor_only": "pbr_wo_prf"}
_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (task VARCHAR, method VARCHAR, sample_id VARCHAR, user_id VARCHAR, "
    "rank BIGINT, doc_id VARCHAR, source_user_id VARCHAR, score DOUBLE)"
)


class CachedEmbedder:
    """Embeds through DuckDB's embedding_cache (shared with the LaMP graph); the model loads only on a miss."""

    def __init__(self, con, models: ModelsResource, model_id: str, dim: int = 0, progress=None) -> None:
        self.con, self.models, self.model_id, self.dim, self.progress = con, models, model_id, dim, progress
        self.new = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) embeddings of texts, looked up or embedded and cached."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        matrix, _, new = embed_with_cache(
            self.con, lambda t: self.models.embedder().embed(t), self.model_id, list(texts), progress=self.progress
        )
        self.new += new
        self.dim = int(matrix.shape[1])
        return matrix


class CachedGenerator(Generator):
    """The configured generator behind generate_cached: a prompt already in generation_cache is not generated."""

    def __init__(self, inner: Generator, con, batch_size: int = 8, progress=None) -> None:
        self.inner, self.con, self.batch_size, self.progress = inner, con, batch_size, progress
        self.model_id = inner.model_id
        self.generated = 0

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Outputs through the cache; counts the prompts generated now."""
        outputs, new = generate_cached(
            self.inner, list(prompts), max_new_tokens, self.con, self.batch_size, self.progress
        )
        self.generated += new
        return outputs

    def count_tokens(self, text: str) -> int:
        """Token count of the wrapped generator."""
        return self.inner.count_tokens(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        """Truncation of the wrapped generator."""
        return self.inner.truncate(text, max_tokens)


def lamp_pbr_settings(pbr: PbrSettings) -> PbrSettings:
    """PBR settings for LaMP profiles: k1 = pbr.lamp_k1, m = pbr.lamp_num_pseudo (theta, k2 as configured)."""
    out = dataclasses.replace(pbr, k1=pbr.lamp_k1, num_pseudo=pbr.lamp_num_pseudo)
    validate_pbr_settings(out)
    return out


def lamp_expansions(
    index: ProfileIndex, samples: pd.DataFrame, pbr: PbrSettings, generator: Generator
) -> dict[str, PbrExpansion]:
    """P-PRF of every dev sample with a profile: the top-k1 own documents by cosine, then the two LLM prompts."""
    items = []
    for s in samples.itertuples():
        rows = index.rows_of([s.user_id])
        if len(rows):
            top = top_k_prf(np.asarray(s.embedding, dtype=np.float32), index.vectors[rows], pbr.k1)
            items.append((s.sample_id, s.query, [index.texts[rows[i]] for i in top]))
    return generate_expansions(generator, items, pbr.num_pseudo, pbr.lamp_max_new_tokens, pbr.lamp_history_tokens)


def pbr_lamp_rows(
    task: str,
    index: ProfileIndex,
    samples: pd.DataFrame,
    methods: Sequence[str],
    pbr: PbrSettings,
    k: int,
    expansions: dict[str, PbrExpansion],
    embed: Callable[[Sequence[str]], np.ndarray],
) -> list[tuple]:
    """Rows (RETRIEVAL_COLUMNS) of the top-k own-profile documents by inner product with each method's q*."""
    texts = list(
        dict.fromkeys(t for e in expansions.values() for t in (*e.pseudo_utterances, e.reasoning) if t.strip())
    )
    vecs = dict(zip(texts, embed(texts), strict=True))
    anchors: dict[str, np.ndarray] = {}
    out: list[tuple] = []
    for s in samples.itertuples():
        rows = index.rows_of([s.user_id])
        if not len(rows):
            continue
        docs = index.vectors[rows]
        if s.user_id not in anchors:
            anchors[s.user_id] = anchor_vector(docs, pbr)[0]
        q = np.asarray(s.embedding, dtype=np.float32)
        f_avg = r = None
        if s.sample_id in expansions:
            e, zero = expansions[s.sample_id], np.zeros_like(q)
            utt = [vecs[t] for t in e.pseudo_utterances if t.strip()]
            f_avg = np.mean(utt, axis=0) if utt else zero
            r = vecs[e.reasoning] if e.reasoning.strip() else zero
        vectors = pbr_query_vectors(q, anchors[s.user_id], f_avg, r, [LAMP_METHODS[m] for m in methods])
        for m in methods:
            scores = docs @ vectors[LAMP_METHODS[m]]
            order = np.argsort(-scores, kind="stable")[:k]
            out += [
                (
                    task,
                    m,
                    s.sample_id,
                    s.user_id,
                    rank,
                    index.doc_ids[rows[i]],
                    index.user_ids[rows[i]],
                    float(scores[i]),
                )
                for rank, i in enumerate(order, 1)
            ]
    return out


@task_asset(
    GROUP,
    deps=[document_embeddings, query_embeddings],
    kinds={"duckdb"},
    description="PBR query side over the user's own profile: pbr (P-PRF via the configured LLM + P-Anchor fusion) "
    "and pbr_anchor_only (q + g, no LLM); top-k by inner product; pbr on the LLM-evaluation samples "
    "(data.llm_eval_samples), pbr_anchor_only on every dev sample.",
)
def pbr_lamp_retrievals(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Retrieve with the PBR methods configured in retrieval.methods (P-PRF generations cached in DuckDB)."""
    settings = prag_settings.get()
    methods = [m for m in LAMP_METHODS if m in settings.retrieval.methods]
    if not methods:
        context.log.warning(f"none of {list(LAMP_METHODS)} is in retrieval.methods: nothing retrieved")
    pbr = lamp_pbr_settings(settings.pbr)
    stats = {}
    with duckdb.connect() as con:
        con.execute(_DDL)
        gen = None
        if "pbr" in methods:
            gen = CachedGenerator(
                models.generator(), con, settings.generator.batch_size, progress_logger(context, "PBR P-PRF generation")
            )
        emb = CachedEmbedder(con, models, settings.embedder.model)
        for task in run_tasks(context, settings):
            index, samples, _ = load_task_inputs(con, task, with_neighbours=False)
            before = gen.generated if gen else 0
            # P-PRF costs 2 generations per sample: only the LLM-evaluation samples; anchor-only runs on all
            subset = samples[samples["sample_id"].isin(llm_eval_sample_ids(samples["sample_id"], settings))]
            expansions = lamp_expansions(index, subset, pbr, gen) if gen else {}
            k, rest = settings.retrieval.k, [m for m in methods if m != "pbr"]
            rows = pbr_lamp_rows(task, index, subset, [m for m in methods if m == "pbr"], pbr, k, expansions, emb.embed)
            rows += pbr_lamp_rows(task, index, samples, rest, pbr, k, {}, emb.embed) if rest else []
            frame = pd.DataFrame(rows, columns=RETRIEVAL_COLUMNS)
            replace_rows(con, TABLE, frame, {"task": task})
            stats[task] = {
                "samples": len(samples),
                "pbr_samples": len(subset),
                "rows": len(frame),
                "methods": methods,
                "p_prf_prompts": 2 * len(expansions),
                "generated_now": (gen.generated if gen else 0) - before,
                "parse_fallbacks": dict(Counter(e.parse_fallback for e in expansions.values())),
            }
            context.log.info(f"{task}: {stats[task]}")
        written = table_metadata(con, TABLE, list(stats))
    return dg.MaterializeResult(
        metadata={
            **written,
            "per_task": dg.MetadataValue.json(stats),
            "generator": gen.model_id if gen else "none",
            "generated_now": sum(s["generated_now"] for s in stats.values()),
        }
    )
