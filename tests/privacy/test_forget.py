"""`prag forget` (docs/privacy.md): every row of the user in one transaction, the audit, the flagged models and the
promotion gate, on a real DuckDB file and a real MLflow sqlite store."""

from __future__ import annotations

import json
import time

import duckdb
import pandas as pd
import pytest

from prag_models.generation.prompts import build_prompt
from prag_models.mlops import promotion, registry
from prag_models.privacy.forget import AUDIT_TABLE, RETRAIN_TAG, forget
from prag_models.storage.hashing import content_hash

TASK = "LaMP-2"


#: Cached texts besides the documents: each user's question, and document titles (taste similarity embeds them).
#: a's question and the title of its document "shared" are a's alone; the title of da1 is c's question.
TITLES = {("a", "da1"): "c q", ("a", "shared"): "alpha title", ("b", "shared"): "b title", ("c", "dc1"): "c title"}
QUERIES = {"a": "alpha heist", "b": "b q", "c": "c q"}


def _store(path) -> duckdb.DuckDBPyConnection:
    """Tables shaped like the graph's, with rows of users a (to erase), b and c."""
    con = duckdb.connect(str(path))
    cached = ["h-a1", "h-x", "h-c1", *sorted({content_hash(t) for t in [*TITLES.values(), *QUERIES.values()]})]
    frames = {
        "lamp_samples": pd.DataFrame({"task": [TASK] * 3, "split": "dev", "sample_id": ["s-a", "s-b", "s-c"],
                                      "user_id": ["a", "b", "c"], "input": ["tag of: alpha heist", "b q", "c q"],
                                      "query": [QUERIES[u] for u in "abc"]}),
        "profile_documents": pd.DataFrame({"task": TASK, "user_id": ["a", "a", "b", "c"],
                                           "doc_id": ["da1", "shared", "shared", "dc1"],
                                           "text": ["alpha secret diary entry", "x", "x", "y"],
                                           "fields_json": [json.dumps({"title": TITLES[k]}) for k in TITLES],
                                           "content_hash": ["h-a1", "h-x", "h-x", "h-c1"]}),
        "query_embeddings": pd.DataFrame({"task": TASK, "sample_id": ["s-a", "s-b"], "embedding": [[1.0], [0.0]]}),
        "similar_users": pd.DataFrame({"task": TASK, "user_id": ["b", "c", "a"], "neighbour_id": ["a", "b", "b"],
                                       "rank": 1}),
        "clusterrag_retrievals": pd.DataFrame({"task": TASK, "method": "m", "sample_id": ["s-b", "s-b", "s-c"],
                                               "user_id": ["b", "b", "c"], "doc_id": ["da1", "shared", "dc1"],
                                               "source_user_id": ["a", "b", "c"]}),
        "feedback_labels": pd.DataFrame({"task": TASK, "sample_id": ["s-c"], "doc_id": ["da1"],
                                         "source_user_id": ["a"], "score": [1.0]}),
        "relevance_labels": pd.DataFrame({"task": TASK, "sample_id": ["s-b", "s-b"], "doc_id": ["da1", "shared"]}),
        "embedding_cache": pd.DataFrame({"model_id": "m", "content_hash": cached}),
        # the LLM cache's provenance (users): p4 shows a's document cut short (no text or id ties it to a), p5 is
        # a row cached before provenance (NULL: not known, so perhaps a's)
        "generation_cache": pd.DataFrame({"generator_id": "g", "prompt_hash": ["p1", "p2", "p3", "p4", "p5"],
                                          "prompt": [build_prompt(TASK, "b q", ["alpha secret diary entry"]),
                                                     build_prompt(TASK, "tag of: alpha heist", []),
                                                     build_prompt(TASK, "c q", ["y"]),
                                                     build_prompt(TASK, "c q", ["alpha secr"]),
                                                     build_prompt(TASK, "b q", ["x"])],
                                          "output": "o", "users": [["a", "b"], ["a"], ["c"], ["a", "c"], None]}),
        "lamp_evaluation": pd.DataFrame({"task": [TASK], "method": ["m"], "value": [0.5]}),
    }  # fmt: skip
    for name, frame in frames.items():
        con.register("_f", frame)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _f")
        con.unregister("_f")
    return con


def _user_rows(con, user: str) -> dict[str, int]:
    """Rows naming the user in any user column, per table (the audit excluded)."""
    out = {}
    for (table,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
        cols = {c for (c,) in con.execute(f"SELECT column_name FROM duckdb_columns() WHERE table_name = '{table}'")
                .fetchall()} & {"user_id", "source_user_id", "neighbour_id"}  # fmt: skip
        if table == AUDIT_TABLE or not cols:
            continue
        n = con.execute(f"SELECT count(*) FROM {table} WHERE " + " OR ".join(f"{c} = ?" for c in cols),
                        [user] * len(cols)).fetchall()[0][0]  # fmt: skip
        if n:
            out[table] = n
    return out


def test_forget_deletes_every_row_audits_and_is_idempotent(tmp_path) -> None:
    con = _store(tmp_path / "t.duckdb")
    erasure = forget(con, "a", TASK)
    assert _user_rows(con, "a") == {}
    assert erasure.deleted == {
        "clusterrag_retrievals": 1, "embedding_cache": 3, "feedback_labels": 1, "generation_cache": 4,
        "lamp_samples": 1, "profile_documents": 2, "query_embeddings": 1, "relevance_labels": 1, "similar_users": 2,
    }  # fmt: skip
    # the LLM cache by provenance only: c's own prompt stays, whatever text it shares with a's
    assert con.execute("SELECT prompt_hash, users FROM generation_cache").fetchall() == [("p3", ["c"])]
    # other users keep their rows, including the document id user b shares with a
    assert con.execute("SELECT count(*) FROM profile_documents WHERE user_id = 'b'").fetchall()[0][0] == 1
    assert con.execute("SELECT doc_id FROM relevance_labels").fetchall() == [("shared",)]
    # the cache keeps the vectors of texts other users still have: b's document "x", c's document, b's and c's
    # questions (one of them also a's title) and titles; a's own document, question and title go
    cache = {h for (h,) in con.execute("SELECT content_hash FROM embedding_cache").fetchall()}
    assert cache == {"h-x", "h-c1", *map(content_hash, ["b q", "c q", "b title", "c title"])}
    assert con.execute("SELECT count(*) FROM lamp_evaluation").fetchall()[0][0] == 1  # aggregates stay
    audit = con.execute(f"SELECT user_id, task, rows_deleted, tables_json FROM {AUDIT_TABLE}").fetchall()
    assert len(audit) == 1 and audit[0][:3] == ("a", TASK, 16) and "alpha" not in audit[0][3]
    again = forget(con, "a", TASK)
    assert again.already_erased and again.rows_deleted == 0
    assert con.execute(f"SELECT count(*) FROM {AUDIT_TABLE}").fetchall()[0][0] == 1
    with pytest.raises(LookupError, match="unknown user 'zed'"):
        forget(con, "zed")


def test_a_failed_forget_changes_nothing(tmp_path, monkeypatch) -> None:
    con = _store(tmp_path / "t.duckdb")
    monkeypatch.setenv("PRAG_FAULT", f"table_write@{AUDIT_TABLE}:raise")
    with pytest.raises(Exception, match="PRAG_FAULT|fault"):
        forget(con, "a", TASK)
    assert _user_rows(con, "a") == {"clusterrag_retrievals": 1, "feedback_labels": 1, "lamp_samples": 1,
                                    "profile_documents": 2, "similar_users": 2}  # fmt: skip


def _bundle(target, folder) -> dict[str, int]:
    return {
        kind: registry.log_and_register(target, folder, registry.registered_name(kind, TASK), {}, [1.0], "d").version
        for kind in promotion.KINDS
    }


def test_flagged_models_and_the_promotion_gate(tmp_path) -> None:
    target = registry.MlflowTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "test", str(tmp_path / "artifacts"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"w")  # never loaded: promotion reads tags only
    old = _bundle(target, folder)
    promotion.promote(target, TASK, "test", "first", override=True)
    other = registry.log_and_register(target, folder, registry.registered_name("retriever", "LaMP-3"), {}, [1.0], "d")
    client = registry.make_client(target)
    time.sleep(0.01)
    erasure = forget(_store(tmp_path / "t.duckdb"), "a", None, client)
    assert len(erasure.models_flagged) == len(promotion.KINDS)
    for kind, version in old.items():
        assert client.get_model_version(registry.registered_name(kind, TASK), str(version)).tags[RETRAIN_TAG] == "true"
    assert RETRAIN_TAG not in client.get_model_version(other.name, str(other.version)).tags  # not the user's task
    # no new challenger: the flagged champion is not kept silently: the decision and champion.status say it is not
    # served (the pyfunc and `prag answer` refuse it, tests/privacy/test_served_privacy.py) and how to retrain
    kept = promotion.promote(target, TASK, "test", "again", override=True)
    assert not kept.promoted and "not served" in kept.message and "prag materialize" in kept.message
    for kind, version in old.items():
        status = client.get_registered_model(registry.registered_name(kind, TASK)).tags[registry.CHAMPION_STATUS_TAG]
        assert status.startswith(f"v{version}: flagged for retraining") and "not served" in status
    # the retraining after the erasure (unflagged versions), whose reranker did not beat its initialisation: it
    # replaces the flagged champion (privacy first), and the decision and champion.status say it did not learn
    new = _bundle(target, folder)
    reranker = registry.registered_name("reranker", TASK)
    client.set_model_version_tag(reranker, str(new["reranker"]), promotion.IMPROVED_TAG, "false")
    replaced = promotion.promote(target, TASK, "test", "retrained")
    assert replaced.promoted and "cannot be kept" in replaced.message and promotion.NOT_LEARNED in replaced.message
    assert replaced.to_versions == new
    status = client.get_registered_model(reranker).tags[registry.CHAMPION_STATUS_TAG]
    assert "replaces a flagged champion" in status and "did not beat its initialisation" in status
