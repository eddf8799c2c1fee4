"""Former grab-bag of CFRAG glue, now split by what it holds; these names stay importable from here for the modules
that still import them (prefer the new modules: variants, candidates, feedback_labels, training_set, probes)."""

from prag_models.methods.cfrag.candidates import cosine_scorer, per_user_top_k, select_feedback_samples, user_histories
from prag_models.methods.cfrag.feedback_labels import (
    degenerate_samples,
    feedback_max_new_tokens,
    feedback_prompt_version,
    feedback_scores,
    gold_loglik_scores,
    score_outputs,
    score_range,
)
from prag_models.methods.cfrag.probes import (
    MODEL_KINDS,
    PROBE_DOCS,
    PROBE_ROWS,
    Probe,
    loss_trend,
    probe_scores,
    single_thread,
)
from prag_models.methods.cfrag.training_set import TrainingSet, new_reranker, rerank_samples, training_set
from prag_models.methods.cfrag.variants import CFRAG_METHODS, VARIANTS, Variant, final_k, top_final

__all__ = [
    "CFRAG_METHODS", "MODEL_KINDS", "PROBE_DOCS", "PROBE_ROWS", "VARIANTS", "Probe", "TrainingSet", "Variant",
    "cosine_scorer", "degenerate_samples", "feedback_max_new_tokens", "feedback_prompt_version", "feedback_scores",
    "final_k", "gold_loglik_scores", "loss_trend", "new_reranker", "per_user_top_k", "probe_scores", "rerank_samples",
    "score_outputs", "score_range", "select_feedback_samples", "single_thread", "top_final", "training_set",
    "user_histories",
]  # fmt: skip
