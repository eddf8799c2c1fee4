"""CFRAG's consent-cost row (docs/privacy.md "What consent costs"): the full-consent row's tuned knobs and trained
models, and similar users ranked as the graph ranks them for users who share nothing — the opted-out users' own
e_u and documents shape no other user's row."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import SERVED_TASK, store_copy

from prag_models.methods.cfrag import serialization
from prag_models.methods.cfrag.table_rules import retrieval_extra
from prag_models.methods.cfrag.tables import cfrag_similar_user_rows, model_row
from prag_models.methods.knobs import with_knobs
from prag_models.privacy.rules import consent_cost_opted_out
from prag_models.stages.cfrag_retrieval import cfrag_retrieval_rows
from prag_models.storage.store import replace_many

TASK = SERVED_TASK
KEY = ["sample_id", "rank"]
COLUMNS = ["user_id", "doc_id", "source_user_id", "score"]
LOADERS = {"user_encoder": serialization.load_user_encoder, "retriever": serialization.load_retriever,
           "reranker": serialization.load_reranker, "reranker_no_eu": serialization.load_reranker}  # fmt: skip


def _models(con) -> dict:
    """The task's registered models, from the folders their training wrote (cfrag_models.local_path)."""
    return {kind: load(model_row(con, TASK, kind)["local_path"]) for kind, load in LOADERS.items()}


def _rows(frame: pd.DataFrame, method: str, drop: list[str] = ()) -> pd.DataFrame:
    """One method's rows (of the users not in ``drop``) in a fixed order, without the method column."""
    part = frame[(frame["method"] == method) & ~frame["user_id"].isin(list(drop))]
    return part.sort_values(KEY)[KEY + COLUMNS].reset_index(drop=True)


def test_with_nobody_opted_out_the_consent_row_is_the_full_row(served_graph, tmp_path) -> None:
    """The scenario's similar users, ranked afresh, are the stored ones when nobody opts out: cfrag@consent100 is
    exactly cfrag."""
    settings, _, _, _ = served_graph
    settings = with_knobs(settings, {"privacy.consent_cost_share": 0.001})
    with store_copy(settings.duckdb_path, tmp_path) as con:
        frame, _ = cfrag_retrieval_rows(con, TASK, settings, _models(con))
    full = _rows(frame, "cfrag")
    assert len(full)
    pd.testing.assert_frame_equal(_rows(frame, "cfrag@consent100"), full)


@pytest.mark.parametrize("similarity", ["content", "taste"])
def test_opted_out_users_do_not_shape_the_consent_row(served_graph, tmp_path, similarity) -> None:
    """Changing only what the opted-out users bring (their e_u, their documents' labels) and ranking the stored
    similar users again as the graph would changes the full-consent lists, but no cfrag@consent50 row of a user who
    shares; the CFRAG retrieval check accepts the rows and refuses an opted-out user's document shown to another."""
    settings, _, _, _ = served_graph
    settings = with_knobs(settings, {"clustering.user_similarity": similarity})
    with store_copy(settings.duckdb_path, tmp_path) as con:
        p = settings.privacy
        out = consent_cost_opted_out(con, TASK, p.consent_cost_share, p.consent_cost_seed)
        models = _models(con)
        replace_many(con, [("cfrag_similar_users", cfrag_similar_user_rows(con, TASK, settings)[0], {"task": TASK})])
        stored = con.execute("SELECT * FROM cfrag_similar_users WHERE task = ? ORDER BY ALL", [TASK]).fetchall()
        before, _ = cfrag_retrieval_rows(con, TASK, settings, models)
        sharing = [u for (u,) in con.execute("SELECT user_id FROM cfrag_user_embeddings WHERE task = ? ORDER BY 1",
                                             [TASK]).fetchall() if u not in out]  # fmt: skip
        for i, user in enumerate(out):  # each opted-out user's e_u and z_u a copy of a sharing user's (their nearest
            twin = sharing[i % len(sharing)]  # neighbour now), each of its documents another tag
            for table in ("cfrag_user_embeddings", "user_embeddings"):
                con.execute(f"UPDATE {table} SET embedding = (SELECT embedding FROM {table} WHERE task = ? AND "
                            "user_id = ?) WHERE task = ? AND user_id = ?", [TASK, twin, TASK, user])  # fmt: skip
        tags = sorted({json.loads(f)["tag"] for (f,) in con.execute(
            "SELECT fields_json FROM profile_documents WHERE task = ?", [TASK]).fetchall()})  # fmt: skip
        docs = con.execute("SELECT user_id, doc_id, fields_json FROM profile_documents WHERE task = ?", [TASK])
        for user, doc, fields in docs.fetchall():
            if user in out:
                value = json.loads(fields)
                value["tag"] = tags[(tags.index(value["tag"]) + 1) % len(tags)]
                con.execute("UPDATE profile_documents SET fields_json = ? WHERE task = ? AND doc_id = ?",
                            [json.dumps(value), TASK, doc])  # fmt: skip
        replace_many(con, [("cfrag_similar_users", cfrag_similar_user_rows(con, TASK, settings)[0], {"task": TASK})])
        assert stored != con.execute("SELECT * FROM cfrag_similar_users WHERE task = ? ORDER BY ALL", [TASK]).fetchall()
        after, _ = cfrag_retrieval_rows(con, TASK, settings, models)
        problems = retrieval_extra(con, TASK, after, settings)
        mine = after[(after["method"] == "cfrag@consent50") & ~after["user_id"].isin(out)]
        refused = retrieval_extra(con, TASK, pd.concat([after, mine.head(1).assign(source_user_id=out[0])]), settings)
    assert out and problems == [], problems
    a, b = _rows(before, "cfrag@consent50", out), _rows(after, "cfrag@consent50", out)
    assert len(a)
    pd.testing.assert_frame_equal(a, b)
    assert not (b["source_user_id"].isin(out) & (b["source_user_id"] != b["user_id"])).any()
    assert any("documents come from users the method may not use" in p for p in refused), refused
