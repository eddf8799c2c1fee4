"""CFRAG's knobs chosen per task on its TRAIN samples, before its training (docs/methods.md §2.9): the tuned values
as settings, and CFRAG before training as the search scores it.

The search (prag_models.evaluation.tuning.tune_cfrag: Optuna TPE, trial 0 = the configured default, a move only when
its paired train gain has a 95 % interval above 0) scores CFRAG as it stands before training: the similar users of
the trial's m and user vectors, the untrained retriever S = (1−α)·cos(q, d) + α·cos(W·e_u, d) with W at its ridge
start and the trial's α, the trial's documents per user, and the untrained reranker (the first stage's order). The
chosen values then hold for everything downstream — the similar-users table, the feedback candidates, the trained
models, the registered versions' inference settings and serving — so that serving answers as the evaluation did.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prag_models.config.settings import Settings
from prag_models.methods.knobs import read_tuned_table, with_knobs

TUNED_TABLE = "cfrag_tuned_settings"
METHOD = "cfrag"
#: The evaluation row of CFRAG with the configured (untuned) knobs and the same registered models.
DEFAULT_ROW = "cfrag@default"


def read_cfrag_tuned(con, task: str) -> dict[str, Any]:
    """The task's tuned CFRAG knob values (empty when the table or its rows are missing)."""
    return read_tuned_table(con, TUNED_TABLE, task).get(METHOD, {})


def tuned_cfrag_settings(con, task: str, settings: Settings) -> Settings:
    """The settings with the task's tuned CFRAG knobs (unchanged when tuning is off or nothing was tuned)."""
    values = read_cfrag_tuned(con, task) if settings.tuning.enabled else {}
    return with_knobs(settings, values) if values else settings


class UntrainedCfrag:
    """CFRAG before training, for every trial of the search: S = (1−α)·cos(q, d) + α·cos(W·e_u, d) with W at its
    ridge start (W does not depend on α), k documents per similar user, the top final-k by S (the untrained
    reranker keeps the first stage's order). The two cosines of each (sample, similar user) are computed once;
    tests/test_cfrag_tuning.py checks the lists against prag_models.methods.cfrag.inference."""

    def __init__(self, index: Any, queries: list, settings: Settings, e: np.ndarray, z: np.ndarray) -> None:
        import torch

        from prag_models.methods.cfrag.retriever import PersonalizedRetriever, init_projection

        c = settings.cfrag
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(c.seed)  # as training starts it
            model = PersonalizedRetriever(e.shape[1], z.shape[1], 0.5, c.retriever_projection)
            init_projection(model, e, z)
            directions = model.proj(torch.as_tensor(np.stack([q.e_u for q in queries]))).numpy()
        directions /= np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-12)
        self.index, self.queries, self.directions = index, queries, directions
        self._cosines: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def cosines(self, i: int, user: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows of ``user`` that query i's asker may see, their cos(q, d) and cos(W·e_u, d)."""
        key = (i, user)
        if key not in self._cosines:
            q = self.queries[i]
            rows = self.index.visible_rows(q.user_id, [user])
            docs = self.index.vectors[rows]
            docs = docs / np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
            query = q.vector / max(float(np.linalg.norm(q.vector)), 1e-12)
            self._cosines[key] = (rows, docs @ query, docs @ self.directions[i])
        return self._cosines[key]

    def retrieve(self, neighbours: dict[str, list[str]], settings: Settings) -> list:
        """Every query's final list under the settings' α, documents per user and final k."""
        from prag_models.methods.cfrag.inference import docs_per_user
        from prag_models.methods.cfrag.variants import final_k, top_final

        alpha, per_user, k = settings.cfrag.alpha, docs_per_user(settings), final_k(settings)
        out = []
        for i, q in enumerate(self.queries):
            found, scores = [], []
            for user in dict.fromkeys(neighbours.get(q.user_id, [q.user_id])):
                rows, relevance, personal = self.cosines(i, user)
                if not len(rows):
                    continue
                s = ((1.0 - alpha) * relevance + alpha * personal).astype(np.float32)
                order = np.argsort(-s, kind="stable")
                kept = self.index.as_retrieved(rows[order], s[order], per_user)
                found += kept
                scores.append(np.asarray([x.score for x in kept], dtype=np.float32))
            out.append(top_final(found, np.concatenate(scores) if scores else np.zeros(0, np.float32), k, self.index))
        return out
