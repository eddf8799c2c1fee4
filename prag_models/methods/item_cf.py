"""item_cf: item-based collaborative filtering over everyone's documents (docs/methods.md §5.2, prag's extension).

The question collaborative filtering asks of a tagging history: among everyone's documents about this item, which
did users like the asker write? For a query:

1. **The item.** The ``shortlist`` texts closest to the query among those the asker may see
   (``ProfileIndex.collapsed_mask``: each text once, however many users wrote it; the asker's own unshared documents
   added); the query's item is the item of the closest one, and the item's documents are every document the asker may
   see with that item (``ProfileIndex.same_item_rows``: the same item field, ``data.tasks.ITEM_FIELDS`` — LaMP-2's
   movie description — exactly; a task without an item field: the same text).
2. **Counted agreement.** Users who gave the item the same label wrote identical documents: each of the item's texts
   stands for every user the asker may see who wrote it, and its vote is the sum over those authors of
   exp(sharpness · cos(z_asker, z_author)) under ``clustering.user_similarity`` (content, taste or blend); its share
   of the item's votes is its agreement. sharpness 0 is the crowd's plain majority.
3. **Ranking.** The item's texts by agreement (ties by cosine to the query), scored 1 + share; then the other
   shortlisted texts by cosine. Each shown text reports how many users wrote it (``Retrieved.writers``) and shows the
   copy of the author most like the asker.

Only the asker's visible rows are read and counted (its own, and the shareable rows of the others): a document its
owner keeps unshared adds no vote and no count to anyone else's ranking, and the user vectors come from shareable
documents alone (docs/privacy.md). Where no item recurs (every document its own text and item), item_cf ranks as
dense_global does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from prag_models.config.settings import Settings
from prag_models.methods.baselines import visible_top
from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.methods.vector_index import CorpusIndex

METHOD = "item_cf"


@dataclass
class ItemCfRetriever:
    """item_cf over one task's documents, with unit user vectors (a user without one: zeros, its vote 1)."""

    index: ProfileIndex
    user_vectors: Mapping[str, np.ndarray]
    sharpness: float = 4.0
    shortlist: int = 64
    corpus: CorpusIndex | None = None
    _z: np.ndarray = field(init=False, repr=False)  # the user vector of each index owner (zeros without one)

    def __post_init__(self) -> None:
        dim = len(next(iter(self.user_vectors.values()))) if self.user_vectors else 1
        self._z = np.zeros((len(self.index.users), dim), dtype=np.float32)
        for i, name in enumerate(self.index.users):
            if name in self.user_vectors:
                self._z[i] = self.user_vectors[name]

    def _vector(self, user_id: str) -> np.ndarray:
        """The asker's user vector (zeros for a user without one: every author then weighs the same)."""
        vector = self.user_vectors.get(user_id)
        return np.zeros(self._z.shape[1], dtype=np.float32) if vector is None else np.asarray(vector, np.float32)

    def retrieve(self, user_id: str, query_vector: np.ndarray, k: int) -> list[Retrieved]:
        """The asker's top k (see the module docstring)."""
        return self.retrieve_many([user_id], np.atleast_2d(query_vector), k)[0]

    def retrieve_many(self, users: Sequence[str], queries: np.ndarray, k: int) -> list[list[Retrieved]]:
        """retrieve for each (user, query) pair; the shortlists of all queries searched together."""
        if len(users) == 0:
            return []
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        scores, rows = visible_top(self.index, users, q, self.shortlist, self.corpus, self.index.collapsed_mask())
        return [self._rank(user, q[i], scores[i], rows[i], k) for i, user in enumerate(users)]

    def _texts(self, rows: np.ndarray, z_u: np.ndarray) -> list[tuple[int, int, float]]:
        """The texts among the given visible rows, each once: (the copy of its author most like the asker, how many
        users wrote it, its vote: the authors' summed weights)."""
        out = []
        keys = self.index.row_keys("text")[rows]
        for key in dict.fromkeys(keys.tolist()):
            copies = rows[keys == key]
            _, first = np.unique(self.index.owners.codes[copies], return_index=True)
            authors = copies[np.sort(first)]  # one copy per author
            weights = np.exp(self.sharpness * (self._z[self.index.owners.codes[authors]] @ z_u))
            out.append((int(authors[int(np.argmax(weights))]), len(authors), float(weights.sum())))
        return out

    def _rank(self, viewer: str, q: np.ndarray, scores: np.ndarray, rows: np.ndarray, k: int) -> list[Retrieved]:
        """One query's ranking from its shortlist (scores, rows best first; -1 = none)."""
        rows = rows[rows >= 0]
        if len(rows) == 0:
            return []
        z_u = self._vector(viewer)
        own = self.index.visible_rows(viewer, [viewer])  # the rule every read goes through (a shared view: none)
        item = self._texts(self.index.same_rows("item", int(rows[0]), own), z_u)
        total = sum(vote for _, _, vote in item)
        cosine = self.index.vectors[[row for row, _, _ in item]] @ q
        order = sorted(range(len(item)), key=lambda i: (-item[i][2], -cosine[i]))
        found = [Retrieved(item[i][0], self.index.doc_ids[item[i][0]], self.index.user_ids[item[i][0]],
                           1.0 + item[i][2] / total, item[i][1]) for i in order[:k]]  # fmt: skip
        shown = {self.index.row_keys("text")[r.row] for r in found}
        for row in rows:
            if len(found) >= k:
                break
            if self.index.row_keys("text")[row] in shown:
                continue
            copy, writers, _ = self._texts(self.index.same_rows("text", int(row), own), z_u)[0]
            shown.add(self.index.row_keys("text")[row])
            found.append(Retrieved(copy, self.index.doc_ids[copy], self.index.user_ids[copy],
                                   float(self.index.vectors[row] @ q), writers))  # fmt: skip
        return found


def item_cf_retriever(
    index: ProfileIndex, ids: Sequence[str], vectors: np.ndarray, settings: Settings
) -> ItemCfRetriever:
    """item_cf with the settings' knobs (section ``item_cf``) over the users' unit vectors (rows of ids)."""
    c = settings.item_cf
    return ItemCfRetriever(index, dict(zip(ids, vectors, strict=True)), c.sharpness, c.shortlist)
