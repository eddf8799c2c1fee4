"""PBR settings (docs/methods.md §4): P-PRF, the P-Anchor graph, fusion, retrieval depth and the real-data
evaluation."""

from __future__ import annotations

from prag_models.config.sources import Csv, Section


class PbrSettings(Section):
    """PBR personalized query expansion (docs/methods.md §4): P-PRF, P-Anchor graph and retrieval depth."""

    k1: int = 5  # top-k1 docs shown to the LLM for P-PRF (5 PersonaBench, 10 LongMemEval)
    num_pseudo: int = 10  # m pseudo utterances
    theta: float = 0.5  # cosine threshold of the P-Anchor graph (0.5 PersonaBench, 0.75 LongMemEval)
    k2: int = 5  # neighbours per node, self-loop included (5 PersonaBench, 10 LongMemEval-s)
    pagerank_iters: int = 50
    pagerank_tol: float = 1e-6
    damping: float = 0.0  # 0 = off (authors' code); else pi <- d * P^T pi + (1 - d) / n
    # Fusion weights of PBR's q* = q + anchor_weight g + utterance_weight w1 f_avg + reasoning_weight w2 r (all 1:
    # the authors' fusion)
    anchor_weight: float = 1.0
    utterance_weight: float = 1.0
    reasoning_weight: float = 1.0
    # θ, k2 and the three weights tuned per dataset on other persons' questions, cross-fitted over this many folds of
    # persons (of communities when several are pooled); off with tuning.enabled = false (docs/methods.md §4.7)
    tuning_folds: int = 5
    top_k: int = 10  # retrieval depth (largest K of the metrics)
    expansion_source: str = "auto"  # auto (replay where cached, else generate) | replay | generate (configured LLM)
    # Retrieval evaluation on real data (asset group retrieval_eval, data.real_data_dir)
    datasets: Csv = ("personabench", "longmemeval")
    # PersonaBench communities to pool (folder names under personabench/; empty = every community found) and the
    # noise level of their private data (private_data/noise_<level>/, eval_info/qa_gt_context_all_noise_<level>.json)
    personabench_communities: Csv = ()
    personabench_noise: str = "0.0"
    eval_methods: Csv = (
        "base",
        "pbr",
        "pbr_wo_anchor",
        "pbr_wo_prf",
        "hyde",
        "query2term",
        "mill",
        "cot",
        "thinkqe",
    )
    generate_qe: bool = False  # generate the QE baselines' expansions even with expansion_source = replay
    expansion_max_new_tokens: int = 512  # per P-PRF reply (pseudo utterances, pseudo reasoning)
    qe_max_new_tokens: int = 256  # per QE baseline reply
    lme_k1: int = 10  # LongMemEval overrides of k1, theta, k2 (authors' code defaults for LongMemEval-s)
    lme_theta: float = 0.75
    lme_k2: int = 10
    # LaMP query side (pbr_lamp_retrievals). Demo budget: 2 generations per dev sample (utterances + reasoning)
    lamp_k1: int = 2  # profile docs shown to the LLM
    lamp_num_pseudo: int = 3  # pseudo utterances asked for
    lamp_max_new_tokens: int = 32
    lamp_history_tokens: int = 128  # token budget of the shown profile docs
