"""CFRAG settings (docs/methods.md §2): user encoder, user retrieval, retriever, reranker, feedback and training."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from prag_models.config.sources import Section


class CfragSettings(Section):
    """CFRAG user encoder, user retrieval, personalized retriever and reranker (docs/methods.md §2)."""

    # §2.1 user encoder
    max_history: int = 100  # last N profile docs per user
    heads: int = 2
    dropout: float = 0.1
    finetune_doc_embeddings: bool = True  # code: the doc table is fine-tuned; False = frozen
    # Above this many documents the table stays frozen whatever finetune_doc_embeddings says: Adam's state and the
    # gradient would be 3x the table (17 GB at LaMP's 3.7 M documents) and every step would update all of it
    # (at 370,000 documents a step of 64 users took 1.3-4 s on 2 cores, 20 epochs of 2,000 users 43 minutes).
    finetune_max_docs: int = Field(100_000, ge=0)
    # §2.2 contrastive training
    crop_ratio: float = 0.7
    mask_ratio: float = 0.3
    reorder_ratio: float = 0.3
    tau: float = 0.1
    lr: float = 1e-3
    weight_decay: float = 1e-5
    batch_size: int = 64
    epochs: int = 20
    # torch threads while the user encoder and the retriever train (0 = torch's own count: every core unless
    # OMP_NUM_THREADS says otherwise). On free cores two threads are 1.7-1.8x faster per encoder step than one, at
    # the demo's size and at LaMP's (0.040 vs 0.067 s, 0.52 vs 0.94 s on 2 cores); set 1 when other work shares them.
    train_threads: int = Field(0, ge=0)
    # §2.3 user retrieval
    # m = 6 is the authors' code (user_topk = 6: the user and 5 others; the paper tunes m in 2..6). The same m users
    # give the feedback candidates and the inference pool.
    top_m_users: int = 6
    include_self: bool = True
    # Which user vectors rank the similar users: "encoder" = e_u of the contrastive user encoder (the paper),
    # "mean" = the mean of the user's document embeddings (the §2.8 ablation's). Tuned per task on train samples with
    # m, the pool per user and α (cfrag_tuned_settings, docs/methods.md §2.9): a measured choice, not a habit.
    user_vectors: Literal["encoder", "mean"] = "encoder"
    # §2.4 retriever
    # Demo budget: k = 1 candidate per user for training gives m*k = 6 candidates, hence 6 LLM feedback labels per
    # training sample (about 0.4 s each with the packaged LLM on 2 CPU cores); the paper's k = 5 means 30 labels per
    # sample (set docs_per_user = 5 on a GPU). One per user makes the teacher compare users' documents, which is
    # what the reranker has to decide at inference (with m = 3 and k = 2, over half the candidate sets were all
    # relevant or all irrelevant on the demo).
    docs_per_user: int = 1
    # The feedback candidates come from the first min(m, feedback_max_users) similar users: the LLM labels m·k
    # candidates per sample, so a tuned m of 12 (§2.9) would double the labelling time; 6 = the authors' m.
    feedback_max_users: int = Field(6, ge=1)
    # At inference the LLM-feedback budget does not apply: the retriever passes a wider pool to the reranker
    # (k per user at inference, i.e. m * k candidates; 0 = docs_per_user).
    inference_docs_per_user: int = 4
    alpha: float = 0.1
    # α is where training starts; learn_alpha lets the distillation move it (the paper fixes it, but with frozen text
    # encoders a fixed α = 0.1 is too small for the personalized term to reorder a list: docs/methods.md §2.6).
    learn_alpha: bool = True
    # α's shift and the student's scale are single numbers: at train_lr a few dozen steps barely move them.
    retriever_scalar_lr: float = Field(0.05, ge=0.0)
    # What the retriever learns (docs/methods.md §2.6): "diagonal" (prag) = W kept at its ridge start and a learnt
    # per-dimension weight of the personal term, at retriever_metric_lr; "linear" (the authors' code) = W itself;
    # "mlp" (the paper) = a two-layer MLP. With a noiseless teacher the diagonal metric beat its initialisation on
    # 5 of 6 tasks at 720 users where the trained W did on 2 (W memorises the users it is trained on).
    retriever_projection: Literal["diagonal", "linear", "mlp"] = "diagonal"
    retriever_metric_lr: float = Field(0.03, ge=0.0)
    # §2.5-2.6 LLM feedback and training
    # TRAIN samples per task that get feedback labels and train the retriever/reranker (0 = all). Demo budget:
    # 16 samples x 6 candidates (m = 6 users x k = 1) = 96 scored prompts per task (12 train + 4 validation at
    # validation_share 0.25, so 3 steps per epoch at batch 4); the paper labels every training sample.
    max_feedback_samples: int = 16
    # Measure before spending (issue 28): label this many of those samples first (a seeded subset) and compare the
    # teacher's ranking of their candidates with cosine by truth NDCG (paired 95 % interval). Where the interval is not
    # above 0 the teacher has no headroom: labelling stops there, and the retriever and rerankers register their
    # initialisation instead of training towards it (0 = no probe: the whole budget, as does feedback_force). 4 samples
    # x 6 candidates = 24 scored prompts a task: 150 s of the demo's main job on 2 AVX2-only cores at 8 samples.
    feedback_probe_samples: int = Field(4, ge=0)
    # The probe's second stage (docs/methods.md §2.5): fresh samples, as many as 80 % power at the pilot's headroom
    # needs, at least this many (at most what the budget holds); the headroom is decided on them alone.
    feedback_probe_min_samples: int = Field(6, ge=1)
    feedback_force: bool = False
    # The teacher signal of a (sample, candidate) label: "gold_loglik" = the generator's log-probability of the gold
    # output given the prompt with that one document (one scored continuation; labels differ even when the task
    # metric ties), or "metric" = the task metric of the generated output (the paper's signal), or "oracle" = a
    # teacher of known quality that needs no LLM: the task's truth for the (sample, document) pair (the demo's
    # planted relevance, else the document's label against the gold) with a share teacher_noise of labels replaced
    # by a uniform random score (benchmarks/cfrag_teacher.py: does the training loop learn from a good teacher?).
    feedback_signal: Literal["gold_loglik", "metric", "oracle"] = "gold_loglik"
    # feedback_signal = "oracle": the share of labels that are a seeded uniform draw in [0, 1] instead of the truth
    # (0 = a perfect teacher, 1 = a teacher that knows nothing).
    teacher_noise: float = Field(0.0, ge=0.0, le=1.0)
    # Cap on new tokens per feedback generation (paper 64); the task's own generation budget (generator.
    # max_new_tokens / label_max_new_tokens) applies when smaller, so labels score what the evaluation generates.
    feedback_max_new_tokens: int = 64
    retriever_temperature: float = 1.0
    reranker_temperature: float = 0.1
    # Training (paper: lr 6e-5, 1 epoch over every training sample). With a few labelled samples one epoch is one
    # step, so prag trains for up to train_epochs epochs at a higher rate and keeps the best epoch on a held-out
    # validation_share of the labelled samples (early stopping after early_stopping_patience epochs).
    # selection_metric says what "best" means: "relevance" = NDCG@k of the candidates against the task's truth for
    # those training samples (relevance labels where the data has them, else the document's label equals the gold
    # output), falling back to "kl" where the validation samples carry no truth signal; "kl" = the lowest KL to the
    # LLM feedback. The LLM's preferences can disagree with relevance (a small generator mostly does), and the model
    # is kept for retrieval.
    selection_metric: Literal["relevance", "kl"] = "relevance"
    # A trained epoch replaces the untrained initialisation only when its validation gain (truth NDCG gained, or with
    # KL selection the KL lost, per sample) is shown: the paired bootstrap interval at this confidence lies above 0.
    # A gain seen on a few validation samples is mostly noise (0 = no gate).
    selection_confidence: float = Field(0.95, ge=0.0, lt=1.0)
    # Where the truth is known, the gate tests the selected epoch on the task's other train samples (no feedback
    # labels, so no LLM call; held out from training and selection) instead of the few validation samples that
    # selected it (the demo: 32 held-out samples instead of 4).
    truth_validation: bool = True
    # The rate of the reranker's heads (W₂, the MLP, the user × pair term) and of a "linear"/"mlp" retriever's W (the
    # diagonal retriever's parameters have their own rates). 3e-4 (1e-3 until 2026-11-27): with a noiseless teacher
    # at 720 users the reranker beat its initialisation on 5 of 6 tasks instead of 3 (docs/methods.md §2.7); at 1e-3
    # the heads overfit the stored pair vectors within a few epochs.
    train_lr: float = Field(3e-4, gt=0.0)
    # The reranker's cross-encoder trains at this rate, its fresh heads (W₂, MLP) at train_lr. 0 (the default) freezes
    # the encoder: each pair's vector is computed once and the epochs train the heads alone. Measured with a noiseless
    # teacher (docs/methods.md §2.7): the same gains over the initialisation as fine-tuning at 2e-5, at 1/8 (160
    # users) to 1/20 (480 users) of the time. Set 2e-5 where there are thousands of labelled samples (a GPU).
    reranker_encoder_lr: float = Field(0.0, ge=0.0)
    train_epochs: int = 30
    train_batch_size: int = 4  # samples per optimizer step for retriever/reranker training
    validation_share: float = 0.25
    early_stopping_patience: int = 5
    # §2.7 reranker
    reranker_model: str = "sentence-transformers/all-MiniLM-L6-v2"  # HF id or path; bge-reranker-base on a deployment
    # Demo budget: 128 tokens per (query, doc) pair keeps reranker training and scoring to seconds per task on CPU
    # (the paper's bge-reranker-base reads up to 512).
    reranker_max_length: int = 128
    # Demo budget: keep only the first N Transformer layers of the cross-encoder (0 = all; the paper uses the whole
    # bge-reranker-base). With the residual design the cut encoder only learns a correction; 1 of MiniLM's 6 layers
    # keeps training (12 models) and the wide inference pool within the demo's 15-minute budget on 2 CPU cores.
    reranker_layers: int = 1
    # The pair's vector: "cls" = the [CLS] position (the paper; right for a cross-encoder trained so, such as
    # bge-reranker), "mean" = the mean over the pair's tokens. MiniLM was trained with mean pooling: its [CLS] after
    # the kept layer hardly depends on the text (std across candidates 2e-4), so the heads had nothing to learn from.
    reranker_pooling: Literal["cls", "mean"] = "mean"
    # prag's addition: rank of a user × pair term (U e_u)·(V pair) added to the MLP's score (0 = the paper's MLP only;
    # docs/methods.md §2.7: from a noiseless teacher the MLP alone did not find the user × text interaction)
    reranker_user_rank: int = Field(16, ge=0)
    # prag's addition: the heads also get the retriever's personal similarity of each document, cos(g ⊙ P·e_u, g ⊙ d)
    # over the frozen embedder's vectors, P the fixed ridge map from e_u to the user's mean document, g a diagonal
    # metric learnt from ones (at retriever_metric_lr), its weight from zero (docs/methods.md §2.7)
    reranker_personal_term: bool = True
    reranker_use_user_embedding: bool = True  # False = ablation "w/o e_u in reranker" (§2.8)
    # Residual reranker: score = cos(E(q), E(d)) of the frozen embedder + the learned MLP correction, whose last layer
    # starts at zero, so the untrained reranker ranks exactly like dense retrieval and training moves from there.
    reranker_residual: bool = True
    final_k: int = 0  # docs in the prompt after reranking; 0 = retrieval.k, as for every other method (paper 5)
    seed: int = 0
    prompt_version: str = "v1"
