"""The rows of each real-data retrieval-evaluation table for one dataset (docs/methods.md §4.5): PBR, its ablations and
the QE baselines on PersonaBench and LongMemEval. The assets of group ``retrieval_eval`` call these per dataset and
write every dataset's rows in one transaction."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config.settings import PbrSettings, Settings
from prag_models.data.personabench import RetrievalQuestion
from prag_models.evaluation.pbr_tuning import PbrTuning, tune_pbr
from prag_models.llm.base import Generator
from prag_models.methods import query_expansion as qe
from prag_models.methods.pbr import NEEDS_EXPANSION, PBR_METHODS, PbrExpansion, validate_pbr_settings
from prag_models.methods.pbr_eval import (
    EmbeddingCache,
    aggregate_scores,
    build_pbr_expansions,
    per_question_scores,
    prf_histories,
    retrieve_rankings,
)
from prag_models.methods.pbr_knobs import DEFAULT_METHOD
from prag_models.metrics.retrieval import KS
from prag_models.stages.pbr_lamp import CachedEmbedder, CachedGenerator
from prag_models.stages.pbr_tuning import pbr_vectors, tuned_per_question
from prag_models.stages.real_data import read_corpus
from prag_models.storage.store import read_rows, table_exists
from prag_models.text.embedder import content_hash, embedder_key

DATASETS: tuple[str, ...] = ("personabench", "longmemeval")
ALL_METHODS: tuple[str, ...] = (*PBR_METHODS, *qe.QE_METHODS)
#: Every method retrieval_runs may hold: the configurable ones and PBR with the authors' settings (§4.7).
RUN_METHODS: tuple[str, ...] = (*PBR_METHODS, DEFAULT_METHOD, *qe.QE_METHODS)
P_PRF = "p_prf"  # expansion method name of PBR's pseudo utterances + pseudo reasoning
REPLAY_SOURCE = "replay:pbr_cached_expansions.json"
#: Datasets with the PBR authors' cached P-PRF expansions (pbr.expansion_source = auto | replay replays them).
REPLAYABLE = ("personabench",)
SEGMENT_COLUMNS = ["dataset", "user_id", "user_position", "position", "segment_id", "source", "text", "content_hash"]
QUESTION_COLUMNS = ["dataset", "position", "q_id", "user_id", "question", "category", "answer", "gold_json"]
EXPANSION_COLUMNS = ["dataset", "q_id", "user_id", "method", "source", "utterances_json", "text", "parse_fallback"]
RUN_COLUMNS = ["dataset", "method", "q_id", "user_id", "rank", "segment_id"]

Warn = Callable[[str], None]


def real_data_root(settings: Settings) -> Path:
    """The configured real-data folder (relative paths: from the current directory)."""
    return Path(settings.data.real_data_dir).expanduser().resolve()


def _present(root: Path, dataset: str) -> bool:
    """Whether the loader of dataset finds its files under root."""
    from prag_models.data import longmemeval, personabench

    try:
        return bool((personabench.community_names if dataset == "personabench" else longmemeval.longmemeval_file)(root))
    except ValueError:
        return False


def configured_datasets(settings: Settings, warn: Warn) -> list[str]:
    """Configured datasets found under data.real_data_dir; [] (warned) when it is not set; ValueError if none."""
    unknown = sorted(set(settings.pbr.datasets) - set(DATASETS))
    if unknown:
        raise ValueError(f"pbr.datasets: unknown dataset(s) {unknown}; known: {list(DATASETS)}")
    if not settings.data.real_data_dir:
        warn("data.real_data_dir is not set: the retrieval_eval group is skipped (set it, e.g. "
             "PRAG__DATA__REAL_DATA_DIR=../shared/data)")
        return []
    root = real_data_root(settings)
    found = [d for d in settings.pbr.datasets if _present(root, d)]
    missing = [d for d in settings.pbr.datasets if d not in found]
    if not found:
        raise ValueError(f"data.real_data_dir {str(root)!r}: none of the datasets {list(settings.pbr.datasets)} "
                         "found (expected personabench/community_1/ and/or longmemeval/longmemeval_s_3.json)")
    if missing:
        warn(f"datasets {missing} not found under {root}: skipped")
    return found


def load_personabench(settings: Settings, with_expansions: bool = True):  # noqa: ANN201 - PersonaBenchData
    """The configured PersonaBench communities (default: all) at the configured noise level, pooled."""
    from prag_models.data.personabench import load_personabench_pool

    pbr = settings.pbr
    return load_personabench_pool(
        real_data_root(settings), pbr.personabench_communities, pbr.personabench_noise, with_expansions=with_expansions
    )


def dataset_settings(pbr: PbrSettings, dataset: str) -> PbrSettings:
    """PBR settings of a dataset: LongMemEval takes lme_k1 / lme_theta / lme_k2 (docs/methods.md §4.1-4.2)."""
    if dataset == "longmemeval":
        pbr = pbr.model_copy(update={"k1": pbr.lme_k1, "theta": pbr.lme_theta, "k2": pbr.lme_k2})
    validate_pbr_settings(pbr)
    unknown = sorted(set(pbr.eval_methods) - set(ALL_METHODS))
    if unknown:
        raise ValueError(f"pbr.eval_methods: unknown method(s) {unknown}; known: {list(ALL_METHODS)}")
    return pbr


def corpora_rows(settings: Settings, dataset: str) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Rows of personal_segments and personal_questions of one dataset, read from data.real_data_dir, and its stats."""
    if dataset == "personabench":
        pb = load_personabench(settings, with_expansions=False)
        questions, segments, skipped = pb.questions, pb.segments_by_user, pb.skipped
    else:
        from prag_models.data.longmemeval import load_longmemeval

        (questions, segments), skipped = load_longmemeval(real_data_root(settings)), {}
    seg_frame = pd.DataFrame(
        [(dataset, u, ui, i, s.segment_id, s.source, s.text, content_hash(s.text))
         for ui, (u, segs) in enumerate(segments.items()) for i, s in enumerate(segs)], columns=SEGMENT_COLUMNS)
    question_frame = pd.DataFrame(
        [(dataset, i, q.q_id, q.user, q.question, q.category, q.answer, json.dumps(q.gold_sets))
         for i, q in enumerate(questions)], columns=QUESTION_COLUMNS)
    stats = {"segments": len(seg_frame), "users": len(segments), "questions": len(question_frame),
             "categories": question_frame["category"].value_counts().to_dict(), "skipped": skipped}
    return seg_frame, question_frame, stats


def segment_embedding_rows(
    con, dataset: str, settings: Settings, load_embedder: Callable[[], Any], progress=None  # noqa: ANN001
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Rows of segment_embeddings of one dataset (through embedding_cache) and its stats."""
    segs = read_rows(con, "personal_segments", {"dataset": dataset}, order_by="user_position, position")
    emb = CachedEmbedder(con, load_embedder, embedder_key(settings.embedder), progress=progress)
    matrix = emb.embed(segs["text"].tolist())
    frame = segs[["dataset", "user_id", "segment_id", "content_hash"]].assign(
        model_id=embedder_key(settings.embedder), embedding=list(matrix))
    return frame, {"segments": len(frame), "newly_embedded": emb.new, "dim": emb.dim}


def seeded_cache(con, dataset: str, settings: Settings, load_embedder: Callable[[], Any]) -> EmbeddingCache:  # noqa: ANN001
    """An EmbeddingCache holding the dataset's segment_embeddings; other texts go through embedding_cache."""
    if not table_exists(con, "segment_embeddings"):
        raise ValueError(f"{dataset}: no table segment_embeddings: materialize segment_embeddings first")
    rows = con.execute(
        "SELECT s.text, e.model_id, e.embedding FROM personal_segments s JOIN segment_embeddings e "
        "USING (dataset, user_id, segment_id) WHERE dataset = ?", [dataset]).fetchall()
    stale = {m for _, m, _ in rows} - {embedder_key(settings.embedder)}
    if stale or not rows:
        raise ValueError(f"{dataset}: segment_embeddings missing or made with {sorted(stale)}, not "
                         f"{embedder_key(settings.embedder)!r}: materialize segment_embeddings first")
    cache = EmbeddingCache(CachedEmbedder(con, load_embedder, embedder_key(settings.embedder), len(rows[0][2])))
    cache.vectors.update({text: np.asarray(vec, dtype=np.float32) for text, _, vec in rows})
    return cache


class LazyGenerator:
    """The configured generator behind generation_cache, loaded at first use (a replay-only run loads no LLM)."""

    def __init__(self, con, make: Callable[[], Generator], batch_size: int, progress=None) -> None:  # noqa: ANN001
        self.con, self.make, self.batch_size, self.progress = con, make, batch_size, progress
        self._gen: CachedGenerator | None = None

    def get(self) -> CachedGenerator:
        """The cached generator (loads the model once)."""
        if self._gen is None:
            self._gen = CachedGenerator(self.make(), self.con, self.batch_size, self.progress)
        return self._gen

    @property
    def generated(self) -> int:
        """Prompts generated now (not found in generation_cache)."""
        return self._gen.generated if self._gen else 0

    @property
    def model_id(self) -> str:
        """The generator's model id, or a note that none was loaded."""
        return self._gen.model_id if self._gen else "none (replay only)"


def qe_methods_to_run(settings: Settings, warn: Warn) -> list[str]:
    """The configured QE baselines that can run: they need generated expansions (no cached ones exist)."""
    pbr = settings.pbr
    wanted = [m for m in pbr.eval_methods if m in qe.QE_METHODS]
    if wanted and not (pbr.expansion_source == "generate" or pbr.generate_qe):
        warn(f"QE baselines {wanted} skipped: they need generated expansions (no cached ones exist); set "
             "pbr.generate_qe = true or pbr.expansion_source = 'generate' to run them")
        return []
    return wanted


def _qe_rows(dataset: str, questions: list[RetrievalQuestion], gen: Generator, methods: list[str],
             docs: dict[str, list[str]], max_new: int) -> list[tuple]:
    """Rows of query_expansions for the QE baselines, generated (through the cache) with gen."""
    user = {q.q_id: q.user for q in questions}
    rows = []
    for method in methods:
        items = [(q.q_id, q.question, docs.get(q.q_id, []) if method in qe.NEEDS_DOCS else []) for q in questions]
        for q_id, text in qe.generate_qe_expansions(gen, method, items, max_new).items():
            fallback = qe.parse_list(text)[1] if method == "mill" else "text"
            rows.append((dataset, q_id, user[q_id], method, gen.model_id, "[]", text, fallback))
    return rows


def _p_prf_expansions(settings: Settings, dataset: str, questions: list[RetrievalQuestion], generate_here: bool,
                      warn: Warn) -> dict[str, PbrExpansion]:
    """The PBR authors' cached P-PRF expansions of a replayable dataset ({} when they are to be generated)."""
    if generate_here:
        return {}
    if dataset not in REPLAYABLE:
        warn(f"{dataset}: no cached P-PRF expansions to replay: PBR and PBR w/o P-Anchor are skipped there (set "
             "pbr.expansion_source = 'generate' to generate them)")
        return {}
    expansions = load_personabench(settings).expansions
    missing = [q.q_id for q in questions if q.q_id not in expansions]
    if missing:
        raise ValueError(f"personabench: no cached expansion for questions {missing[:5]}; "
                         "set pbr.expansion_source = 'generate'")
    return expansions


def generation_paid(settings: Settings, questions: int) -> tuple[bool, float]:
    """(whether the run's generation budget pays for P-PRF's two generations per question, their estimated seconds):
    a P-PRF generation timed by `prag materialize` scaled from pbr.lamp_max_new_tokens to expansion_max_new_tokens
    (an upper bound: most replies stop earlier). Paid where the speeds were not measured or there is no budget."""
    from prag_models.evaluation.llm_budget import generation_budget_s, stored_throughput

    speeds = stored_throughput(settings)
    if speeds is None or settings.run.llm_budget_s <= 0:
        return True, 0.0
    pbr = settings.pbr
    seconds = 2 * questions * speeds.pbr_s * pbr.expansion_max_new_tokens / max(1, pbr.lamp_max_new_tokens)
    return seconds <= generation_budget_s(settings), seconds


def expansion_rows(con, dataset: str, settings: Settings, load_embedder: Callable[[], Any], gen: LazyGenerator,  # noqa: ANN001
                   qe_methods: list[str], warn: Warn, evidence_run: bool = False,
                   ) -> tuple[pd.DataFrame, dict[str, Any]]:  # fmt: skip
    """Rows of query_expansions of one dataset: P-PRF pseudo utterances + reasoning (replayed or generated) and the
    QE baselines' expansions, every generation through generation_cache; and its stats. Generation the main job's
    budget cannot pay is deferred to the LLM evidence run (``evidence_run``: `prag evidence`)."""
    pbr = settings.pbr
    ds = dataset_settings(pbr, dataset)
    questions, segments = read_corpus(con, dataset)
    cache = seeded_cache(con, dataset, settings, load_embedder)
    wants_prf = any(m in NEEDS_EXPANSION for m in pbr.eval_methods)
    # auto: the PBR authors' cached expansions where they exist (PersonaBench), the configured LLM elsewhere
    generate_here = pbr.expansion_source == "generate" or (pbr.expansion_source == "auto" and dataset not in REPLAYABLE)
    paid, seconds = generation_paid(settings, len(questions))
    if wants_prf and generate_here and not (paid or evidence_run):
        warn(f"{dataset}: P-PRF's generation (≈ {seconds:.0f} s on this machine) does not fit the run's budget: PBR "
             "and PBR w/o P-Anchor are deferred there to `prag evidence`")  # fmt: skip
        wants_prf = False
    before = gen.generated
    expansions = _p_prf_expansions(settings, dataset, questions, generate_here, warn) if wants_prf else {}
    if wants_prf and generate_here:
        budget = settings.generator.n_ctx - pbr.expansion_max_new_tokens - 300
        expansions = build_pbr_expansions(gen.get(), questions, segments, cache, ds, pbr.expansion_max_new_tokens,
                                          max(budget, 64))
    source = gen.model_id if generate_here else REPLAY_SOURCE  # loaded above whenever there are P-PRF rows
    user = {q.q_id: q.user for q in questions}
    rows = [(dataset, q_id, user[q_id], P_PRF, source, json.dumps(list(e.pseudo_utterances)), e.reasoning,
             e.parse_fallback) for q_id, e in expansions.items() if q_id in user]
    if qe_methods:
        docs = {}
        if any(m in qe.NEEDS_DOCS for m in qe_methods):  # ThinkQE shows the top-5 segments of the question
            docs = {q_id: texts for q_id, _, texts in prf_histories(questions, segments, cache, 5)}
        rows += _qe_rows(dataset, questions, gen.get(), qe_methods, docs, pbr.qe_max_new_tokens)
    frame = pd.DataFrame(rows, columns=EXPANSION_COLUMNS)
    fallbacks = frame.groupby(["method", "parse_fallback"]).size()
    return frame, {"rows": len(frame), "generated_now": gen.generated - before,
                   "parse_fallbacks": {f"{m}:{f}": int(n) for (m, f), n in fallbacks.items()},
                   "sources": sorted(frame["source"].unique().tolist())}


def _expansions_of(frame: pd.DataFrame) -> tuple[dict[str, PbrExpansion], dict[str, dict[str, str]]]:
    """P-PRF expansions and QE texts (method -> q_id -> text) from query_expansions rows."""
    prf: dict[str, PbrExpansion] = {}
    qe_texts: dict[str, dict[str, str]] = {}
    for r in frame.itertuples():
        if r.method == P_PRF:
            prf[r.q_id] = PbrExpansion(tuple(json.loads(r.utterances_json)), r.text, r.source, r.parse_fallback)
        else:
            qe_texts.setdefault(r.method, {})[r.q_id] = r.text
    return prf, qe_texts


def retrieval_run_rows(con, dataset: str, settings: Settings, load_embedder: Callable[[], Any],  # noqa: ANN001
                       warn: Warn) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Rows of retrieval_runs of one dataset: every question's top pbr.top_k segments of the asking user's corpus by
    every method whose expansions cover every question; and its stats."""
    ds = dataset_settings(settings.pbr, dataset)
    questions, segments = read_corpus(con, dataset)
    prf, qe_texts = _expansions_of(read_rows(con, "query_expansions", {"dataset": dataset}))
    ids = {q.q_id for q in questions}
    methods = [m for m in ds.eval_methods if (m not in NEEDS_EXPANSION or ids <= set(prf))
               and (m not in qe.QE_METHODS or ids <= set(qe_texts.get(m, {})))]
    skipped = [m for m in ds.eval_methods if m not in methods]
    if skipped:
        warn(f"{dataset}: methods {skipped} skipped (no expansion for every question)")
    cache = seeded_cache(con, dataset, settings, load_embedder)
    rankings = retrieve_rankings(questions, segments, cache, methods, prf, ds, qe_texts)
    tuned = tuned_per_question(con, dataset, ds, questions) if "pbr" in methods else None
    if tuned:  # pbr = the knobs tuned without the question's fold; the authors' settings stay as pbr@default
        vectors = pbr_vectors(questions, segments, prf, cache)
        for q in questions:
            rankings[(DEFAULT_METHOD, q.q_id)] = rankings[("pbr", q.q_id)]
            rankings[("pbr", q.q_id)] = vectors.rank(q, tuned[q.q_id])
    user = {q.q_id: q.user for q in questions}
    frame = pd.DataFrame([(dataset, m, q_id, user[q_id], rank, seg) for (m, q_id), ranked in rankings.items()
                          for rank, seg in enumerate(ranked, 1)], columns=RUN_COLUMNS)
    methods = [*methods, DEFAULT_METHOD] if tuned else methods
    return frame, {"methods": methods, "skipped": skipped, "questions": len(questions), "rows": len(frame),
                   "newly_embedded": cache.embedder.new}


def pbr_tuning(con, dataset: str, settings: Settings, load_embedder: Callable[[], Any]) -> PbrTuning | None:  # noqa: ANN001
    """Cross-fitted tuning of PBR's knobs on one dataset (docs/methods.md §4.7); None where PBR is not evaluated,
    lacks an expansion for some question, or tuning is off."""
    if not settings.tuning.enabled or "pbr" not in settings.pbr.eval_methods:
        return None
    questions, segments = read_corpus(con, dataset)
    prf, _ = _expansions_of(read_rows(con, "query_expansions", {"dataset": dataset}))
    vectors = pbr_vectors(questions, segments, prf, seeded_cache(con, dataset, settings, load_embedder))
    if vectors is None:
        return None
    ds = dataset_settings(settings.pbr, dataset)
    return tune_pbr(dataset, vectors, ds, settings.tuning, ds.tuning_folds)


def evaluation_rows(con, dataset: str, settings: Settings) -> pd.DataFrame:  # noqa: ANN001
    """Rows of retrieval_evaluation of one dataset: R@K and NDCG@K per method and category with their intervals
    (PersonaBench also per community, as well as pooled as the paper pools them)."""
    ks = [k for k in KS if k <= settings.pbr.top_k]
    questions, _ = read_corpus(con, dataset)
    runs = read_rows(con, "retrieval_runs", {"dataset": dataset}, order_by="method, q_id, rank")
    rankings = {key: g["segment_id"].tolist() for key, g in runs.groupby(["method", "q_id"], sort=False)}
    methods = [m for m in RUN_METHODS if m in set(runs["method"])]
    scores = per_question_scores(questions, rankings, methods, ks)
    if dataset == "personabench":
        from prag_models.data.personabench import community_of

        per = scores.assign(dataset=[f"personabench[{community_of(q)}]" for q in scores["q_id"]])
        scores = pd.concat([scores, per], ignore_index=True)
    return aggregate_scores(scores)
