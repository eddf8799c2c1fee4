"""PBR as a query-side option of LaMP retrieval (docs/methods.md §4): the user's own profile is the corpus, q*
replaces q. ``pbr``: P-PRF from the top pbr.lamp_k1 profile documents fused with the P-Anchor, q* = q + g + w1 f_avg
+ w2 r; ``pbr_anchor_only``: q* = q + g, no LLM. Top retrieval.k by inner product."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config.settings import PbrSettings, Settings
from prag_models.data.source import llm_eval_sample_ids
from prag_models.llm.base import Generator
from prag_models.llm.cache import generate_cached
from prag_models.methods.pbr import (
    PbrExpansion,
    anchor_vector,
    expansion_prompts,
    fusion_weights_of,
    generate_expansions,
    pbr_query_vectors,
    top_k_prf,
    validate_pbr_settings,
)
from prag_models.methods.pbr_eval import expansion_vectors
from prag_models.methods.profiles import ProfileIndex
from prag_models.storage.validation import Expect, between, in_set, not_null, unique
from prag_models.text.embedding_cache import embed_with_cache

TABLE = "pbr_lamp_retrievals"
#: LaMP method name -> the PBR query vector it uses (prag_models.methods.pbr.pbr_query_vectors).
LAMP_METHODS: dict[str, str] = {"pbr": "pbr", "pbr_anchor_only": "pbr_wo_prf"}
DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (task VARCHAR, method VARCHAR, sample_id VARCHAR, user_id VARCHAR, "
    "rank BIGINT, doc_id VARCHAR, source_user_id VARCHAR, score DOUBLE)"
)


class CachedEmbedder:
    """Embeds through DuckDB's embedding_cache (shared with the LaMP graph); the model loads only on a miss."""

    def __init__(self, con, load: Callable[[], Any], model_id: str, dim: int = 0, progress=None) -> None:
        self.con, self.load, self.model_id, self.dim, self.progress = con, load, model_id, dim, progress
        self.new = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) embeddings of texts, looked up or embedded and cached."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        matrix, _, new = embed_with_cache(
            self.con, lambda t: self.load().embed(t), self.model_id, list(texts), progress=self.progress
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
        self.users: dict[str, list[str]] = {}  # prompt -> whose data it shows (the cache's provenance), if known

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Outputs through the cache; counts the prompts generated now."""
        outputs, new = generate_cached(
            self.inner, list(prompts), max_new_tokens, self.con, self.batch_size, self.progress,
            [self.users.get(p) for p in prompts],
        )  # fmt: skip
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
    out = pbr.model_copy(update={"k1": pbr.lamp_k1, "num_pseudo": pbr.lamp_num_pseudo})
    validate_pbr_settings(out)
    return out


def lamp_expansion_items(index: ProfileIndex, samples: pd.DataFrame, pbr: PbrSettings) -> list[tuple]:
    """(sample id, query, top-k1 own document texts by cosine, each text once) of every sample with a profile:
    P-PRF's input."""
    items = []
    for s in samples.itertuples():
        rows = index.visible_rows(s.user_id, [s.user_id])
        if len(rows):
            ranked = rows[top_k_prf(np.asarray(s.embedding, dtype=np.float32), index.vectors[rows], len(rows))]
            items.append((s.sample_id, s.query, [index.texts[r] for r in ranked[index.distinct(ranked, pbr.k1)]]))
    return items


def lamp_expansions(
    index: ProfileIndex, samples: pd.DataFrame, pbr: PbrSettings, generator: Generator
) -> dict[str, PbrExpansion]:
    """P-PRF of every dev sample with a profile: the top-k1 own documents by cosine, then the two LLM prompts."""
    items = lamp_expansion_items(index, samples, pbr)
    if isinstance(generator, CachedGenerator):  # each prompt shows one user's question and own documents
        owner = dict(zip(samples["sample_id"], samples["user_id"], strict=True))
        utterances, reasoning = expansion_prompts(generator, items, pbr.num_pseudo, pbr.lamp_history_tokens)
        shown = zip([*utterances, *reasoning], [*items, *items], strict=True)
        generator.users |= {prompt: [str(owner[item[0]])] for prompt, item in shown}
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
    """Rows (RETRIEVAL_COLUMNS) of the top-k own-profile documents by inner product with each method's q*, each
    text once."""
    texts = list(
        dict.fromkeys(t for e in expansions.values() for t in (*e.pseudo_utterances, e.reasoning) if t.strip())
    )
    vecs = dict(zip(texts, embed(texts), strict=True))
    anchors: dict[str, np.ndarray] = {}
    out: list[tuple] = []
    for s in samples.itertuples():
        rows = index.visible_rows(s.user_id, [s.user_id])
        if not len(rows):
            continue
        docs = index.vectors[rows]
        if s.user_id not in anchors:
            anchors[s.user_id] = anchor_vector(docs, pbr)[0]
        q = np.asarray(s.embedding, dtype=np.float32)
        f_avg, r = expansion_vectors(expansions.get(s.sample_id), lambda t: np.stack([vecs[x] for x in t]), len(q))
        vectors = pbr_query_vectors(q, anchors[s.user_id], f_avg, r, [LAMP_METHODS[m] for m in methods],
                                    *fusion_weights_of(pbr))  # fmt: skip
        for m in methods:
            scores = docs @ vectors[LAMP_METHODS[m]]
            order = np.argsort(-scores, kind="stable")
            found = index.as_retrieved(rows[order], scores[order], k)
            out += [(task, m, s.sample_id, s.user_id, rank, r.doc_id, r.source_user_id, r.score)
                    for rank, r in enumerate(found, 1)]  # fmt: skip
    return out


def pbr_lamp_suite(task: str, settings: Settings) -> list[Expect]:
    """Expectations of pbr_lamp_retrievals."""
    return [*not_null("method", "sample_id", "user_id", "doc_id", "source_user_id", "score"),
            unique("method", "sample_id", "rank"), between("rank", 1, settings.retrieval.k),
            in_set("method", list(LAMP_METHODS))]


def pbr_lamp_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Documents from the asking user's own profile only; every sample served."""
    problems = []
    foreign = df[df["source_user_id"] != df["user_id"]]
    if len(foreign):
        problems.append(f"{len(foreign)} documents come from another user's profile, e.g. "
                        f"{foreign[['method', 'sample_id', 'doc_id']].head(3).values.tolist()}")
    missing = con.execute(
        f"SELECT count(*) FROM {TABLE} r LEFT JOIN profile_documents p ON p.task = r.task "
        "AND p.user_id = r.user_id AND p.doc_id = r.doc_id WHERE r.task = ? AND p.doc_id IS NULL", [task]).fetchone()[0]
    if missing:
        problems.append(f"{missing} retrieved documents are not in the asking user's profile")
    sql = "SELECT sample_id FROM lamp_samples WHERE task = ? AND split = 'dev'"
    dev = [s for (s,) in con.execute(sql, [task]).fetchall()]
    expected = {"pbr": len(llm_eval_sample_ids(dev, settings))}  # P-PRF runs on the LLM-evaluation samples only
    short = {m: g["sample_id"].nunique() for m, g in df.groupby("method")
             if g["sample_id"].nunique() != expected.get(m, len(dev))}  # fmt: skip
    return problems + ([f"methods short of their samples (dev: {len(dev)}): {short}"] if short else [])
