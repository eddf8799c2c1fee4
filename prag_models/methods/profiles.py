"""An in-memory view of one task's profile documents: one float32 matrix of vectors, each row's owner as a small
integer code, ids as one Arrow column, each user's rows in date order; texts are read on demand (task_tables.py).

Nothing here holds a Python object per document, so a 3.7 M-document task costs its vectors plus a few bytes a row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

#: Where a ranking is cut before its texts are compared (a FAISS top-k, a BM25 top-k), it is cut this many times
#: deeper than k, so that k distinct texts remain unless one text fills the whole depth.
DISTINCT_DEPTH = 10


@dataclass(frozen=True)
class Retrieved:
    """One retrieved document: its row in the profile index, the user it came from and its score; ``writers``: how
    many users the asker may see wrote this very text (a method that counts agreement sets it; else 1)."""

    row: int
    doc_id: str
    source_user_id: str
    score: float
    writers: int = 1


class StrColumn(Sequence[str]):
    """Read-only strings over one Arrow string array (no Python object per row until one is asked for)."""

    def __init__(self, values: pa.Array | pa.ChunkedArray | Sequence[str]) -> None:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        self.values = values if isinstance(values, pa.Array) else pa.array(list(values), pa.string())

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i):  # int or slice, like a list
        if isinstance(i, slice):
            return self.values[i].to_pylist()
        return self.values[int(i)].as_py()

    def __iter__(self) -> Iterator[str]:
        return iter(self.values.to_pylist())

    def take(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """The strings of the given rows."""
        return self.values.take(pa.array(np.asarray(rows, dtype=np.int64))).to_pylist()


class OwnerColumn(Sequence[str]):
    """Each row's owner as a code into ``names`` (users in order of first appearance)."""

    def __init__(self, codes: np.ndarray, names: Sequence[str]) -> None:
        self.codes = np.asarray(codes, dtype=np.int32)
        self.names = list(names)

    @classmethod
    def of(cls, values: pa.Array | pa.ChunkedArray | Sequence[str]) -> OwnerColumn:
        """Encode a column of user ids (Arrow or any sequence of strings)."""
        if isinstance(values, OwnerColumn):
            return values
        if not isinstance(values, pa.Array | pa.ChunkedArray):
            values = pa.array(list(values), pa.string())
        encoded = _dictionary(values)
        return cls(encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist())

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i):  # int or slice, like a list
        if isinstance(i, slice):
            return [self.names[c] for c in self.codes[i]]
        return self.names[self.codes[int(i)]]

    def __iter__(self) -> Iterator[str]:
        return (self.names[c] for c in self.codes)


def _dictionary(values: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """Dictionary-encode a string column into one DictionaryArray (codes in order of first appearance)."""
    encoded = values.dictionary_encode()
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.unify_dictionaries().combine_chunks()
    return encoded


def _grouped(codes: np.ndarray, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows ordered by owner, then row; start of each owner's run) — no copy when rows are already by owner."""
    if len(codes) and bool((np.diff(codes) < 0).any()):
        order = np.argsort(codes, kind="stable")
    else:
        order = np.arange(len(codes), dtype=np.int64)
    return order, np.searchsorted(codes[order], np.arange(n_users + 1)).astype(np.int64)


@dataclass(eq=False)
class ProfileIndex:
    """Documents of all users of a task; rows of a user are kept in profile (date) order.

    ``shareable[row]`` says whether a document may be shown to users other than its owner (docs/privacy.md: its
    owner shares and it is not private; ``prag_models.privacy.rules.shareable_flags``). An index built without the flags
    shares nothing. Every read of rows goes through ``visible_rows`` (or ``visible_mask``, the same rule as a mask
    over every row, for whole-corpus searches): a viewer sees its own documents and the shareable documents of the
    others — there is no other way to a user's rows.

    ``text_keys`` (a hash of each text, ``task_tables.read_profile_index``) lets every ranking show a text once;
    ``item_keys`` (a hash of the item each document labels, ``data.tasks.ITEM_FIELDS``; None: its text) lets item_cf
    gather everyone's documents about one item.
    """

    doc_ids: Sequence[str]
    user_ids: Sequence[str]
    texts: Sequence[str]
    vectors: np.ndarray  # (n_docs, d), unit rows
    shareable: np.ndarray | None = None  # (n_docs,) bool; None = nothing leaves its owner
    text_keys: np.ndarray | None = None  # (n_docs,) a hash of each text; None = every text counts as distinct
    item_keys: np.ndarray | None = None  # (n_docs,) a hash of the item each document labels; None = its text
    _code_of: dict[str, int] = field(init=False, repr=False)
    _rows_by_user: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)
    _shared_by_user: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)
    _key_order: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, init=False, repr=False)
    _collapsed: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        owners = OwnerColumn.of(self.user_ids)
        self.user_ids = owners
        n = len(owners)
        flags = np.zeros(n, dtype=bool) if self.shareable is None else np.asarray(self.shareable)
        if flags.shape != (n,):
            raise ValueError(f"shareable has shape {flags.shape}, expected ({n},)")
        self.shareable = flags.astype(bool, copy=False)
        for name in ("text_keys", "item_keys"):
            if getattr(self, name) is not None and np.shape(getattr(self, name)) != (n,):
                raise ValueError(f"{name} has shape {np.shape(getattr(self, name))}, expected ({n},)")
        self._code_of = {u: i for i, u in enumerate(owners.names)}
        order, starts = _grouped(owners.codes, len(owners.names))
        self._rows_by_user = (order, starts)
        shared = order[self.shareable[order]]
        self._shared_by_user = (shared, np.searchsorted(owners.codes[shared], np.arange(len(owners.names) + 1)))

    @property
    def owners(self) -> OwnerColumn:
        """Each row's owner as a code (``owners.codes``) into the task's users (``owners.names``)."""
        return self.user_ids  # type: ignore[return-value]

    @property
    def users(self) -> list[str]:
        """Every user with documents, in order of first appearance."""
        return self.owners.names

    def _run(self, user: str, own: bool) -> np.ndarray:
        """One user's rows (all of them, or only the shareable ones)."""
        code = self._code_of.get(user)
        if code is None:
            return np.zeros(0, dtype=np.int64)
        rows, starts = self._rows_by_user if own else self._shared_by_user
        return rows[starts[code] : starts[code + 1]]

    def visible_rows(self, viewer: str | None, owners: Sequence[str] | None = None) -> np.ndarray:
        """Rows of the owners' documents the viewer may see, owner by owner in the given order (None = every user in
        index order): all of the viewer's own rows, only the shareable rows of anyone else (viewer None: a user with
        no documents, who sees only shareable rows)."""
        owners = self.users if owners is None else owners
        parts = [self._run(u, u == viewer) for u in dict.fromkeys(owners) if u in self._code_of]
        return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, dtype=np.int64)

    def visible_mask(self, viewer: str | None = None) -> np.ndarray:
        """The same rule over every row at once: True where the viewer may see the row (None: shareable rows)."""
        if viewer is None:
            return self.shareable.copy()  # type: ignore[union-attr]
        mask = self.shareable.copy()  # type: ignore[union-attr]
        mask[self._run(viewer, True)] = True
        return mask

    def shares_all(self, user_id: str) -> bool:
        """Whether every document of the user is shareable (then it sees exactly what the others see of it)."""
        return len(self._run(user_id, True)) == len(self._run(user_id, False))

    def with_shareable(self, shareable: np.ndarray) -> ProfileIndex:
        """The same documents under other sharing flags (the consent-cost evaluation)."""
        return ProfileIndex(self.doc_ids, self.user_ids, self.texts, self.vectors, shareable, self.text_keys,
                            self.item_keys)  # fmt: skip

    def with_opted_out(self, users: Sequence[str]) -> ProfileIndex:
        """The same documents with the given users' consent withdrawn (none of their rows shareable any more)."""
        codes = [self._code_of[u] for u in users if u in self._code_of]
        out = np.isin(self.owners.codes, np.asarray(codes, dtype=np.int32))
        return self.with_shareable(self.shareable & ~out)  # type: ignore[operator]

    def distinct(self, rows: Sequence[int] | np.ndarray, k: int | None = None) -> np.ndarray:
        """Positions into a ranked list of rows that keep the first row of each text (``text_keys``), the first k of
        them (all when k is None): a text repeated in a ranking — a retweet, a pasted boilerplate — shows once."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.text_keys is None or len(rows) == 0:
            return np.arange(len(rows) if k is None else min(k, len(rows)))
        if k is not None and len(rows) > self.depth(k):  # a long ranking: its head usually holds k texts
            head = self.distinct(rows[: self.depth(k)], k)
            if len(head) == k:
                return head
        _, first = np.unique(self.text_keys[rows], return_index=True)
        return np.sort(first)[:k]

    def row_keys(self, kind: str) -> np.ndarray:
        """Each row's text key (``kind`` "text") or item key ("item"); a row's own number where none is known."""
        keys = self.item_keys if kind == "item" and self.item_keys is not None else self.text_keys
        return keys if keys is not None else np.arange(len(self.shareable), dtype=np.uint64)  # type: ignore[arg-type]

    def _order(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(keys of the shareable rows in sorted order, those rows): who wrote a text (or about an item), found by
        binary search."""
        if kind not in self._key_order:
            rows = np.flatnonzero(self.shareable)
            keys = self.row_keys(kind)[rows]
            order = np.argsort(keys, kind="stable")
            self._key_order[kind] = (keys[order], rows[order])
        return self._key_order[kind]

    def same_rows(self, kind: str, row: int, own: np.ndarray) -> np.ndarray:
        """The shareable rows with the given row's text (``kind`` "text") or item ("item"), and those of the ``own``
        rows (the viewer's rows it may see: ``visible_rows(viewer, [viewer])``), in row order."""
        key = self.row_keys(kind)[row]
        keys, rows = self._order(kind)
        shared = rows[np.searchsorted(keys, key, "left") : np.searchsorted(keys, key, "right")]
        own = np.asarray(own, dtype=np.int64)
        return np.union1d(shared, own[self.row_keys(kind)[own] == key]).astype(np.int64)

    def _own(self, viewer: str | None) -> np.ndarray:
        """The viewer's own rows it may see (none for no viewer)."""
        return self.visible_rows(viewer, [viewer]) if viewer is not None else np.zeros(0, dtype=np.int64)

    def collapsed_mask(self) -> np.ndarray:
        """The shareable rows that stand for their text: the first shareable row of each text (one row per text, so
        that a search over them finds k different texts however often one is repeated)."""
        if self._collapsed is None:
            keys, rows = self._order("text")
            first = np.ones(len(keys), dtype=bool)
            first[1:] = keys[1:] != keys[:-1]
            self._collapsed = np.zeros(len(self.shareable), dtype=bool)  # type: ignore[arg-type]
            self._collapsed[rows[first]] = True
        return self._collapsed

    def same_text_rows(self, viewer: str | None, row: int) -> np.ndarray:
        """The rows with the given row's text that the viewer may see: its copies in every shareable profile and in
        the viewer's own (a text another user keeps unshared is not among them), in row order."""
        return self.same_rows("text", row, self._own(viewer))

    def same_item_rows(self, viewer: str | None, row: int) -> np.ndarray:
        """The rows about the given row's item (``item_keys``; without them, its text) that the viewer may see, in row
        order: everyone's documents about one movie, whatever tag each gave it."""
        return self.same_rows("item", row, self._own(viewer))

    def writers(self, viewer: str | None, row: int) -> np.ndarray:
        """The users (owner codes, distinct, in code order) who wrote the row's text, among those the viewer may see:
        identical documents collapse into one text that says how many users wrote it (docs/methods.md §0)."""
        return np.unique(self.owners.codes[self.same_text_rows(viewer, row)])

    def depth(self, k: int) -> int:
        """How deep to cut a ranking so that k distinct texts remain: ``DISTINCT_DEPTH`` × k, or k without keys."""
        return DISTINCT_DEPTH * k if self.text_keys is not None else k

    def as_retrieved(self, rows: Sequence[int], scores: Sequence[float], k: int | None = None) -> list[Retrieved]:
        """Wrap a ranked list of rows and their scores into Retrieved records; with k, the first k distinct texts
        (callers pass candidates deeper than k, ``DISTINCT_DEPTH`` × k where the ranking is cut early)."""
        rows, scores = np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float64)
        if k is not None:
            keep = self.distinct(rows, k)
            rows, scores = rows[keep], scores[keep]
        return [
            Retrieved(int(r), self.doc_ids[int(r)], self.user_ids[int(r)], float(s))
            for r, s in zip(rows, scores, strict=True)
        ]


def text_keys_of(texts: Sequence[str]) -> np.ndarray:
    """A 64-bit hash of each text (pandas' vectorised hash): equal texts, equal keys — ``ProfileIndex.text_keys`` for
    an index built from texts in memory (``read_profile_index`` has DuckDB hash them instead)."""
    import pandas as pd

    return pd.util.hash_array(np.asarray(list(texts), dtype=object)).astype(np.uint64)


def top_by_cosine(index: ProfileIndex, rows: np.ndarray, query_vector: np.ndarray, k: int) -> list[Retrieved]:
    """The k rows most similar to the query vector, one per text (ties keep profile order)."""
    if len(rows) == 0:
        return []
    scores = index.vectors[rows] @ np.asarray(query_vector, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")
    return index.as_retrieved(rows[order], scores[order], k)
