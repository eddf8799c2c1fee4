"""PBR — Personalize Before Retrieve (docs/methods.md §4): P-PRF expansions, the P-Anchor graph, fusion and FAISS
search.

Everything here works on precomputed embeddings (numpy arrays), so the maths is testable without models; LLM calls
go through the :class:`prag_models.llm.base.Generator` interface only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from prag_models.config.settings import PbrSettings
from prag_models.data.pbr_expansions import PbrExpansion, expansions_from_records  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from prag_models.llm.base import Generator

#: Method names of PBR and its ablations (docs/methods.md §4.1-4.3), in table order.
PBR_METHODS: tuple[str, ...] = ("base", "pbr", "pbr_wo_anchor", "pbr_wo_prf")
#: Methods that need P-PRF expansions (pseudo utterances + pseudo reasoning).
NEEDS_EXPANSION: frozenset[str] = frozenset({"pbr", "pbr_wo_anchor"})


def validate_pbr_settings(settings: PbrSettings) -> None:
    """Raise ValueError for PBR settings that would fail later in a confusing way."""
    if min(settings.k1, settings.k2, settings.num_pseudo, settings.top_k, settings.pagerank_iters) < 1:
        raise ValueError("pbr.k1, k2, num_pseudo, top_k and pagerank_iters must be at least 1")
    if not -1.0 <= settings.theta <= 1.0:
        raise ValueError(f"pbr.theta is a cosine threshold in [-1, 1], got {settings.theta}")
    if not 0.0 <= settings.damping < 1.0:
        raise ValueError(f"pbr.damping must lie in [0, 1) (0 = off), got {settings.damping}")
    if settings.tuning_folds < 1:
        raise ValueError(f"pbr.tuning_folds must be at least 1, got {settings.tuning_folds}")
    weights = {"anchor_weight": settings.anchor_weight, "utterance_weight": settings.utterance_weight,
               "reasoning_weight": settings.reasoning_weight}  # fmt: skip
    bad = {k: v for k, v in weights.items() if not (np.isfinite(v) and v >= 0)}
    if bad:
        raise ValueError(f"pbr.{next(iter(bad))} (a fusion weight) must be finite and at least 0, got {bad}")
    if settings.expansion_source not in {"auto", "replay", "generate"}:
        raise ValueError(
            f"pbr.expansion_source must be 'auto', 'replay' or 'generate', got {settings.expansion_source!r}"
        )


# ----------------------------------------------------------------------------------------------------------- P-PRF


def top_k_prf(query_vec: np.ndarray, doc_emb: np.ndarray, k1: int) -> np.ndarray:
    """Indices of the top-k1 documents by cosine to the query, H_q of docs/methods.md §4.1 (ties: lower index first)."""
    scores = doc_emb @ query_vec
    order = np.lexsort((np.arange(len(scores)), -scores))
    return order[: max(0, min(k1, len(scores)))]


def pseudo_utterance_prompt(history: Sequence[str], question: str, m: int = 10) -> str:
    """Prompt asking for m in-style user utterances as JSON {"candidates": [...]} (docs/methods.md §4.1)."""
    docs = "\n".join(history)
    return (
        f"Write {m} different things this user could naturally say, drawing on their past dialogue and on the "
        "question below.\n\n"
        f"Past dialogue of the user (copy their voice and style):\n{docs}\n\n"
        f"Question that should inspire the utterances:\n{question}\n\n"
        "Rules:\n"
        f"1. Give exactly {m} fluent, natural utterances in the first person, as the user would say them.\n"
        "2. Do not merely reword the question; vary tone, focus and situation.\n"
        "3. Every utterance must be longer than 25 words.\n"
        "4. Keep the wording, habits and tone of the past dialogue.\n"
        '5. Answer with JSON only, no markdown and no comments: {"candidates": ["...", "..."]}\n'
    )


def pseudo_reasoning_prompt(history: Sequence[str], question: str) -> str:
    """Prompt asking the LLM to solve the question step by step in the user's style (docs/methods.md §4.1)."""
    docs = "\n".join(history)
    return (
        "Answer the question below by reasoning step by step, using the user's past dialogue as evidence and "
        "writing in the way this user talks.\n\n"
        f"Past dialogue of the user:\n{docs}\n\n"
        f"Question:\n{question}\n\n"
        "Step-by-step answer:\n"
    )


_BULLET_RE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|\"|')\s*")


def _first_json_object(text: str) -> Any | None:
    """Decode the first JSON object found anywhere in text, or None."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text[match.start() :])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def _candidates_of(obj: Any) -> list[str] | None:
    """The string list under "candidates" (or the only list value) of a decoded object."""
    if not isinstance(obj, dict):
        return None
    value = obj.get("candidates")
    if value is None:
        lists = [v for v in obj.values() if isinstance(v, list)]
        value = lists[0] if len(lists) == 1 else None
    if not isinstance(value, list):
        return None
    items = [str(v).strip() for v in value if str(v).strip()]
    return items or None


def parse_candidates(text: str, m: int = 10) -> tuple[list[str], str]:
    """Parse pseudo utterances from an LLM reply; return (utterances, fallback used).

    Fallbacks, tried in order: ``json`` (the whole reply is the JSON object), ``json_object`` (the first JSON
    object inside the reply, e.g. in a markdown fence), ``lines`` (one utterance per non-empty line, bullets and
    numbering stripped, JSON punctuation lines dropped), ``empty`` (nothing usable). At most m are kept.
    """
    stripped = text.strip()
    try:
        items = _candidates_of(json.loads(stripped))
    except json.JSONDecodeError:
        items = None
    if items:
        return items[:m], "json"
    items = _candidates_of(_first_json_object(stripped))
    if items:
        return items[:m], "json_object"
    lines = []
    for raw in stripped.splitlines():
        line = _BULLET_RE.sub("", raw.strip()).strip().rstrip(",").strip().strip('"').strip()
        if not line or line in "{}[]" or line.startswith(("```", '"candidates"', "candidates")):
            continue
        lines.append(line)
    if lines:
        return lines[:m], "lines"
    return [], "empty"


def fit_history(generator: Generator, docs: Sequence[str], max_tokens: int | None) -> list[str]:
    """Cut the history docs to share max_tokens generator tokens (unused share carries over); None = no cut."""
    if max_tokens is None:
        return list(docs)
    out: list[str] = []
    left = max(0, max_tokens)
    for i, doc in enumerate(docs):
        share = left // (len(docs) - i)
        cut = generator.truncate(doc, share)
        left -= generator.count_tokens(cut)
        out.append(cut)
    return out


def expansion_prompts(
    generator: Generator,
    items: Sequence[tuple[str, str, Sequence[str]]],
    m: int = 10,
    max_history_tokens: int | None = None,
) -> tuple[list[str], list[str]]:
    """The two P-PRF prompts of each (q_id, question, top-k1 doc texts) item: pseudo utterances, pseudo reasoning."""
    histories = [fit_history(generator, docs, max_history_tokens) for _, _, docs in items]
    pairs = [(question, h) for (_, question, _), h in zip(items, histories, strict=True)]
    return [pseudo_utterance_prompt(h, q, m) for q, h in pairs], [pseudo_reasoning_prompt(h, q) for q, h in pairs]


def generate_expansions(
    generator: Generator,
    items: Sequence[tuple[str, str, Sequence[str]]],
    m: int = 10,
    max_new_tokens: int = 512,
    max_history_tokens: int | None = None,
) -> dict[str, PbrExpansion]:
    """Run P-PRF with an LLM for (q_id, question, top-k1 doc texts) items; returns q_id -> expansion.

    ``max_history_tokens`` caps the tokens of the shown history (see :func:`fit_history`) so that prompts fit a
    small context window; the parse fallback of each reply is recorded in the expansion.
    """
    utt_prompts, rea_prompts = expansion_prompts(generator, items, m, max_history_tokens)
    utt_out = generator.generate(utt_prompts, max_new_tokens) if items else []
    rea_out = generator.generate(rea_prompts, max_new_tokens) if items else []
    result: dict[str, PbrExpansion] = {}
    for (q_id, _, _), utt_text, rea_text in zip(items, utt_out, rea_out, strict=True):
        utterances, fallback = parse_candidates(utt_text, m)
        result[q_id] = PbrExpansion(tuple(utterances), rea_text.strip(), "generate", fallback)
    return result


# -------------------------------------------------------------------------------------------------------- P-Anchor


def build_anchor_graph(doc_emb: np.ndarray, theta: float, k2: int) -> csr_matrix:
    """Weighted kNN graph of docs/methods.md §4.2: A_ij = cos(c_i, c_j) if cos >= theta and j in top-k2 of i, else 0.

    As in the authors' code, row i keeps at most k2 entries among the docs whose cosine is >= theta, ranked by
    cosine, and the node itself counts as one of the k2 (the self-loop is always kept, with weight cos(c_i, c_i)).
    Ties are broken by the lower index.
    """
    from scipy.sparse import csr_matrix

    if k2 < 1:
        raise ValueError(f"k2 must be at least 1, got {k2}")
    emb = np.asarray(doc_emb, dtype=np.float64)
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    unit = emb / np.maximum(norms, 1e-12)
    sim = unit @ unit.T
    n = len(sim)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for i in range(n):
        candidates = np.flatnonzero(sim[i] >= theta)
        candidates = candidates[candidates != i]
        order = np.lexsort((candidates, -sim[i, candidates]))
        keep = [i, *candidates[order][: k2 - 1].tolist()]
        rows.extend([i] * len(keep))
        cols.extend(keep)
        vals.extend(sim[i, keep].tolist())
    return csr_matrix((vals, (rows, cols)), shape=(n, n))


def row_normalize(adjacency: csr_matrix) -> csr_matrix:
    """Transition matrix P: each row of A divided by its sum (all-zero rows stay zero)."""
    from scipy.sparse import diags

    sums = np.asarray(adjacency.sum(axis=1)).ravel()
    inv = np.divide(1.0, sums, out=np.zeros_like(sums, dtype=np.float64), where=sums != 0)
    return (diags(inv) @ adjacency).tocsr()


def stationary_distribution(transition: Any, iters: int = 50, tol: float = 1e-6, damping: float = 0.0) -> np.ndarray:
    """Stationary distribution pi of a row-stochastic P by power iteration from the uniform vector (docs/methods.md
    §4.2).

    damping = 0 (default, the authors' code): pi <- P^T pi. Otherwise classical PageRank: pi <- d P^T pi + (1 - d)/n.
    Stops after ``iters`` steps or when the L2 change is below ``tol``; the result is renormalised to sum to 1.
    """
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must lie in [0, 1), got {damping}")
    n = transition.shape[0]
    if n == 0:
        return np.zeros(0)
    pt = transition.T
    pi = np.full(n, 1.0 / n)
    for _ in range(iters):
        new = np.asarray(pt @ pi).ravel()
        if damping > 0.0:
            new = damping * new + (1.0 - damping) / n
        delta = float(np.linalg.norm(new - pi))
        pi = new
        if delta < tol:
            break
    total = pi.sum()
    return pi / total if total > 0 else np.full(n, 1.0 / n)


def anchor_vector(doc_emb: np.ndarray, settings: PbrSettings) -> tuple[np.ndarray, np.ndarray]:
    """The P-Anchor g = sum_i pi_i c_i of a user's corpus, and pi (docs/methods.md §4.2)."""
    graph = build_anchor_graph(doc_emb, settings.theta, settings.k2)
    pi = stationary_distribution(row_normalize(graph), settings.pagerank_iters, settings.pagerank_tol, settings.damping)
    return (pi @ np.asarray(doc_emb, dtype=np.float64)).astype(np.float32), pi


# ---------------------------------------------------------------------------------------------------------- fusion


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity; 0 when either vector is zero (sklearn's convention, used by the authors)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b) / (na * nb) if na > 0 and nb > 0 else 0.0


def fusion_weights(center: np.ndarray, f_avg: np.ndarray, r: np.ndarray) -> tuple[float, float]:
    """w1 = 1 + cos(center, f_avg), w2 = 1 + cos(center, r) (docs/methods.md §4.3; PBR uses center = (q + g) / 2)."""
    return 1.0 + _cos(center, f_avg), 1.0 + _cos(center, r)


def fusion_weights_of(settings: PbrSettings) -> tuple[float, float, float]:
    """PBR's three fusion weights (anchor, utterances, reasoning) from its settings (docs/methods.md §4.3, §4.7)."""
    return settings.anchor_weight, settings.utterance_weight, settings.reasoning_weight


def pbr_query_vectors(
    q: np.ndarray,
    g: np.ndarray,
    f_avg: np.ndarray | None = None,
    r: np.ndarray | None = None,
    methods: Sequence[str] = PBR_METHODS,
    anchor_weight: float = 1.0,
    utterance_weight: float = 1.0,
    reasoning_weight: float = 1.0,
) -> dict[str, np.ndarray]:
    """Query vectors of Base, PBR and the two ablations for one question (docs/methods.md §4.3).

    - ``base``: q.
    - ``pbr``: w1 = 1 + cos((q+g)/2, f_avg), w2 = 1 + cos((q+g)/2, r); q* = q + a g + b w1 f_avg + c w2 r with the
      fusion weights a, b, c = ``anchor_weight``, ``utterance_weight``, ``reasoning_weight`` (all 1: the authors'
      fusion; tuned per dataset, §4.7).
    - ``pbr_wo_anchor`` (no P-Anchor): g is dropped from the sum and from the weights, w1 = 1 + cos(q, f_avg),
      w2 = 1 + cos(q, r); q* = q + w1 f_avg + w2 r.
    - ``pbr_wo_prf`` (no P-PRF): no pseudo utterances nor reasoning; q* = q + g.

    q, r are the (unit) embeddings of the question and the pseudo reasoning, f_avg the unnormalised mean of the
    pseudo-utterance embeddings (zero vector when there are none, which makes its weight 1 and its term 0), g the
    anchor. Vectors are not renormalised: retrieval is by inner product, as in the authors' code.
    """
    q = np.asarray(q, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    out: dict[str, np.ndarray] = {}
    for method in methods:
        if method == "base":
            vec = q
        elif method == "pbr_wo_prf":
            vec = q + g
        elif method in NEEDS_EXPANSION:
            if f_avg is None or r is None:
                raise ValueError(f"method {method!r} needs the P-PRF vectors f_avg and r")
            f = np.asarray(f_avg, dtype=np.float64)
            rr = np.asarray(r, dtype=np.float64)
            if method == "pbr":
                w1, w2 = fusion_weights((q + g) / 2.0, f, rr)
                vec = q + anchor_weight * g + utterance_weight * w1 * f + reasoning_weight * w2 * rr
            else:
                w1, w2 = fusion_weights(q, f, rr)
                vec = q + w1 * f + w2 * rr
        else:
            raise ValueError(f"unknown PBR method {method!r}; known: {list(PBR_METHODS)}")
        out[method] = vec.astype(np.float32)
    return out


# ------------------------------------------------------------------------------------------------------- retrieval


def faiss_top_k(doc_emb: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Row-wise indices of the top-k documents by inner product (FAISS IndexFlatIP); shape (n_queries, min(k, n))."""
    import faiss

    docs = np.ascontiguousarray(doc_emb, dtype=np.float32)
    qs = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    k = min(k, len(docs))
    if k == 0:
        return np.zeros((len(qs), 0), dtype=np.int64)
    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    _, idx = index.search(qs, k)
    return idx
