"""What may cross users (docs/privacy.md): the shared view, the one input of all that other users' results depend on.

A document is *shareable* when its owner shares and it is not private (:func:`prag_models.privacy.rules.shareable_mask`
decides it). A user's own retrieval sees its own documents and the shareable documents of the others
(``ProfileIndex.visible_rows``): that is per user. Everything ANOTHER user's results depend on reads the **shared
view** instead — the shareable documents and nothing else, the owner's own non-shareable documents hidden from the
owner too — so that two worlds that differ only in documents others may not see build the same:

* z_u, taste vectors, the user clusters and every neighbour list (``stages/users.user_embedding_rows`` and
  ``users/taste`` stream the documents through the rule; a user with neither a shareable document nor a question
  gets no z_u at all, :func:`placed_by`, in the incremental update too: ``users/placement.place_users``);
* the CFRAG user encoder's document table and histories (``methods/cfrag/tables.task_histories``), its feedback
  candidates and so its LLM labels and the training sets of the retriever and reranker
  (``methods/cfrag/feedback.load_feedback_inputs``: :func:`shared_view`);
* the tuned knobs of ClusterRAG and CFRAG (``evaluation/tuning.train_inputs``: :func:`shared_view` and
  :func:`shared_truth`);
* the approximate corpus index: its lists' centroids, its quantiser and the choice of exact or IVF search
  (``methods/vector_index.CorpusIndex.build``: :func:`shared_rows`);
* the caches are keyed by content (a vector or an answer per text): a user's entry is read by whoever has that text.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection
from typing import Any

import numpy as np

from prag_models.data.truth import Truth


def _asks_viewer(method: Any) -> bool:
    """Whether a method's first parameter is ``viewer`` (a read of what that viewer may see)."""
    try:
        params = list(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "viewer"


class SharedView:
    """A profile index seen as a cross-user artefact must see it: every viewer, the owner included, sees the
    shareable rows only — any method of the index whose first parameter is ``viewer`` is asked for nobody's own
    rows (viewer None), so a read added to the index later is covered too. Row numbers, vectors, ids and texts are
    the index's own (nothing is copied)."""

    def __init__(self, index: Any) -> None:
        self.index = index.index if isinstance(index, SharedView) else index

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.index, name)
        if not (callable(value) and _asks_viewer(value)):
            return value

        def as_nobody(viewer: str | None = None, *args: Any, **kwargs: Any) -> Any:
            return value(None, *args, **kwargs)

        return as_nobody

    def visible_rows(self, viewer: str | None, owners: Any = None) -> np.ndarray:
        """The owners' shareable rows, whoever asks."""
        return self.index.visible_rows(None, owners)

    def visible_mask(self, viewer: str | None = None) -> np.ndarray:
        """The shareable rows, whoever asks."""
        return self.index.visible_mask(None)

    def shares_all(self, user_id: str) -> bool:
        """True: every viewer sees exactly what the others see of it."""
        return True

    def with_shareable(self, shareable: np.ndarray) -> SharedView:
        """The shared view of the index under other sharing flags."""
        return SharedView(self.index.with_shareable(shareable))

    def with_opted_out(self, users: Any) -> SharedView:
        """The shared view with the given users' consent withdrawn."""
        return SharedView(self.index.with_opted_out(users))


def shared_view(index: Any) -> SharedView:
    """The shared view of a ``ProfileIndex``: what the CFRAG feedback candidates and the tuning searches read."""
    return SharedView(index)


def shared_rows(shareable: np.ndarray | None, n: int) -> np.ndarray:
    """The rows of an n-row corpus that may shape a corpus-wide structure (``shareable``: per row; None: all)."""
    if shareable is None:
        return np.arange(n, dtype=np.int64)
    flags = np.asarray(shareable, dtype=bool)
    if flags.shape != (n,):
        raise ValueError(f"shareable has shape {flags.shape}, expected ({n},)")
    return np.flatnonzero(flags)


def shared_truth(truth: Truth, shareable_ids: Collection[str]) -> Truth:
    """The truth a search over the shared view scores: relevant documents limited to shareable ones (a capped
    recall's or NDCG's ideal would otherwise count the owners' hidden documents)."""
    if truth.relevant is None:
        return truth
    keep = set(shareable_ids)
    return Truth({s: docs & keep for s, docs in truth.relevant.items()}, truth.labels, truth.golds)


def placed_by(shareable_documents: int, has_question: bool) -> str | None:
    """What places a user among the others (z_u, docs/methods.md §3.6): its shareable documents, else its own
    questions, else nothing — a user known only from documents others may not see gets no z_u, is in no cluster
    and nobody's neighbour (a question of its own then places it as a new user)."""
    if shareable_documents > 0:
        return "documents"
    return "questions" if has_question else None
