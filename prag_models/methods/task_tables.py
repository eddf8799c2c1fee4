"""Reads shared by the retrieval methods: a task's profile index (documents with their embeddings) and its users'
embeddings with their clusters, from the DuckDB tables the embeddings and users stages write.

The index is built without a Python object per document: the keys (owner, id, the embedding's rowid) come sorted
from DuckDB as Arrow, the vectors stream in record batches straight into one float32 matrix, and the texts stay in
DuckDB until a method asks for them (``DocumentTexts``, a block of whole users at a time).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from prag_models.methods.profiles import OwnerColumn, ProfileIndex, StrColumn
from prag_models.privacy import rules
from prag_models.storage.store import column_to_matrix, iter_batches

#: Rows of texts read from DuckDB at once by DocumentTexts (whole users; a user larger than this is read alone).
TEXT_BLOCK_ROWS = 262_144
_ORDER = "ORDER BY p.user_id, p.position, p.doc_id"
_KEYS = (
    "SELECT e.rowid AS rid, p.user_id, p.doc_id, hash(p.text) AS text_key, {item} AS item_key "
    "FROM profile_documents p JOIN document_embeddings e "
    f"USING (task, user_id, doc_id) WHERE p.task = ? {_ORDER}"
)


def item_key_sql(task: str) -> str:
    """The SQL of a document's item key: a hash of its item field (``data.tasks.ITEM_FIELDS``), else of its text."""
    from prag_models.data.tasks import ITEM_FIELDS

    name = ITEM_FIELDS.get(task)
    if name is None or not name.isidentifier():
        return "hash(p.text)"
    return f"hash(coalesce(json_extract_string(p.fields_json, '$.{name}'), p.text))"


class DocumentTexts(Sequence[str]):
    """The texts of an index's rows, read from profile_documents a block of whole users at a time (the index itself
    holds none). Needs the index's rows grouped by owner, as ``read_profile_index`` orders them."""

    def __init__(self, con, task: str, owners: OwnerColumn, doc_ids: StrColumn, block_rows: int = TEXT_BLOCK_ROWS):
        if len(owners.codes) and bool((np.diff(owners.codes) < 0).any()):
            raise ValueError("DocumentTexts needs the rows grouped by owner")
        self.con, self.task, self.owners, self.doc_ids, self.block_rows = con, task, owners, doc_ids, block_rows
        self._starts = np.searchsorted(owners.codes, np.arange(len(owners.names) + 1))
        self._lo = self._hi = 0
        self._texts: list[str] = []
        self.blocks_read = 0

    def __len__(self) -> int:
        return len(self.owners)

    def __getitem__(self, row):  # int or slice, like a list
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        row = int(row) + (len(self) if int(row) < 0 else 0)
        if not self._lo <= row < self._hi:
            self._load(row)
        return self._texts[row - self._lo]

    def _load(self, row: int) -> None:
        """Read the block of whole users that starts with the owner of ``row``."""
        first = int(self.owners.codes[row])
        last = max(first, int(np.searchsorted(self._starts, self._starts[first] + self.block_rows, "right")) - 2)
        lo, hi = int(self._starts[first]), int(self._starts[last + 1])
        names = self.owners.names
        found = self.con.sql(
            "SELECT user_id, doc_id, text FROM profile_documents WHERE task = ? AND user_id BETWEEN ? AND ?",
            params=[self.task, names[first], names[last]],
        ).to_arrow_table()
        lookup = dict(zip(zip(found["user_id"].to_pylist(), found["doc_id"].to_pylist(), strict=True),
                          found["text"].to_pylist(), strict=True))  # fmt: skip
        keys = zip(self.owners[lo:hi], self.doc_ids[lo:hi], strict=True)
        self._texts, self._lo, self._hi = [lookup[key] for key in keys], lo, hi
        self.blocks_read += 1


def vectors_by_rowid(con, task: str, rid: np.ndarray) -> np.ndarray:
    """The document_embeddings vector of each row (rid: its rowid in that table), streamed in record batches into
    one float32 matrix (no sort of the vectors, no Python object per row)."""
    n = len(rid)
    if n == 0:
        return np.zeros((0, 0), dtype=np.float32)
    row_of = np.full(int(rid.max()) + 1, -1, dtype=np.int64)
    row_of[rid] = np.arange(n)
    out: np.ndarray | None = None
    filled = np.zeros(n, dtype=bool)
    for batch in iter_batches(con, "SELECT rowid AS rid, embedding FROM document_embeddings WHERE task = ?", [task]):
        r = batch["rid"].to_numpy()
        rows = np.full(len(r), -1, dtype=np.int64)
        inside = r < len(row_of)
        rows[inside] = row_of[r[inside]]
        keep = rows >= 0
        if not keep.any():
            continue
        matrix = column_to_matrix(batch["embedding"])
        if out is None:
            out = np.empty((n, matrix.shape[1]), dtype=np.float32)
        out[rows[keep]] = matrix[keep]
        filled[rows[keep]] = True
    assert out is not None
    missing = np.flatnonzero(~filled)  # a document listed twice shares its embedding row
    out[missing] = out[row_of[rid[missing]]]
    return out


def shareable_mask(con, task: str, keys: pa.Table, owners: OwnerColumn, default_share: bool) -> np.ndarray:
    """The sharing rule of ``privacy.rules.shareable_mask`` over the index's rows (keys: user_id, doc_id per row)."""
    return rules.shareable_mask(con, task, keys["user_id"], keys["doc_id"], default_share)


def read_profile_index(con, task: str, *, default_share: bool) -> ProfileIndex:
    """The task's profile documents as an index (profile order, sharing flags of docs/privacy.md, a hash of each
    text so that a ranking shows a text once and of each document's item), texts on demand."""
    keys = con.sql(_KEYS.format(item=item_key_sql(task)), params=[task]).to_arrow_table()
    owners, doc_ids = OwnerColumn.of(keys["user_id"]), StrColumn(keys["doc_id"])
    vectors = vectors_by_rowid(con, task, keys["rid"].to_numpy())
    shareable = shareable_mask(con, task, keys, owners, default_share)
    text_keys, item_keys = keys["text_key"].to_numpy(), keys["item_key"].to_numpy()
    return ProfileIndex(doc_ids, owners, DocumentTexts(con, task, owners, doc_ids), vectors, shareable, text_keys,
                        item_keys)  # fmt: skip


def profile_index(con, task: str, *, default_share: bool) -> tuple[ProfileIndex, pd.DataFrame]:
    """The task's profile index with every text in memory, and its rows (doc_id, user_id, text, fields_json) in the
    index's order — for the callers that show every document (CFRAG feedback)."""
    index = read_profile_index(con, task, default_share=default_share)
    docs = con.execute(
        "SELECT p.doc_id, p.user_id, p.text, p.fields_json FROM profile_documents p JOIN document_embeddings e "
        f"USING (task, user_id, doc_id) WHERE task = ? {_ORDER}",
        [task],
    ).df()
    texts: Sequence[str] = docs["text"].tolist()
    full = ProfileIndex(index.doc_ids, index.owners, texts, index.vectors, index.shareable, index.text_keys,
                        index.item_keys)  # fmt: skip
    return full, docs


def clustered_users(con, task: str) -> pa.Table:
    """user_id, embedding (z_u) and cluster of every clustered user of the task, by user id."""
    return con.sql(
        "SELECT e.user_id, e.embedding, c.cluster FROM user_embeddings e JOIN user_clusters c "
        "USING (task, user_id) WHERE task = ? ORDER BY e.user_id",
        params=[task],
    ).to_arrow_table()
