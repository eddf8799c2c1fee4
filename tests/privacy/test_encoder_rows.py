"""The user encoder's document-row map (issue 26): histories map through it, never by position; any mismatch refuses
with the model and what to retrain. In-memory DuckDB, no model weights (the map and num_docs are all it reads)."""

from __future__ import annotations

from types import SimpleNamespace

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from prag_models.methods.cfrag.tables import EncoderMismatchError, encoder_histories


def _store(docs: list[tuple[str, str, int]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    frame = pd.DataFrame(docs, columns=["user_id", "doc_id", "position"]).assign(task="T", model_id="m",
                                                                                content_hash="h")  # fmt: skip
    con.register("_d", frame)
    con.execute("CREATE TABLE document_embeddings AS SELECT * FROM _d")
    con.execute("CREATE TABLE lamp_samples AS SELECT 'T' AS task, 'c' AS user_id")
    return con


def _encoder(rows: list[tuple[str, str]]) -> SimpleNamespace:
    table = pa.table({"user_id": [u for u, _ in rows], "doc_id": [d for _, d in rows]})
    return SimpleNamespace(doc_rows=table, num_docs=len(rows))


def test_histories_follow_the_map_and_any_mismatch_refuses() -> None:
    con = _store([("a", "a1", 0), ("a", "a2", 1), ("b", "b1", 0)])
    encoder = _encoder([("b", "b1"), ("a", "a2"), ("a", "a1")])  # trained in another row order
    users, histories = encoder_histories(con, "T", encoder, True, "prag-user-encoder-T v3")
    assert users == ["a", "b", "c"] and histories == {"a": [2, 1], "b": [0]}
    con.execute("DELETE FROM document_embeddings WHERE doc_id = 'a1'")  # erased: positions would shift
    with pytest.raises(EncoderMismatchError, match=r"v3 was trained on 3 documents.* 0 are not in its table and 1"):
        encoder_histories(con, "T", encoder, True, "prag-user-encoder-T v3")
    con.execute("INSERT INTO document_embeddings VALUES ('a', 'a1', 0, 'T', 'm', 'h'), ('b', 'b9', 1, 'T', 'm', 'h')")
    with pytest.raises(EncoderMismatchError, match=r"1 are not in its table and 0 of its rows are gone.*b/b9"):
        encoder_histories(con, "T", encoder, True)
    # a served version after `prag ingest`: the new document b9 is left out, a gone row still refuses
    assert encoder_histories(con, "T", encoder, True, allow_new=True)[1] == {"a": [2, 1], "b": [0]}
    con.execute("DELETE FROM document_embeddings WHERE doc_id = 'a1'")
    with pytest.raises(EncoderMismatchError, match=r"0 are not in its table and 1 of its rows are gone"):
        encoder_histories(con, "T", encoder, True, allow_new=True)
    with pytest.raises(EncoderMismatchError, match="stores no document-row map"):
        encoder_histories(con, "T", SimpleNamespace(num_docs=3), True)
