"""The planted-marker test (docs/privacy.md): private documents and non-sharing users carry a marker unique to their
owner; after the whole graph no other user's retrieval row, prompt, generation, feedback label or training batch
holds one, and after `prag forget` no table holds a row of the erased user."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
from conftest import materialize_graph, partition_metadata, write_config

from prag_models.config.settings import load_settings
from prag_models.data.source import demo_root
from prag_models.stages.retrieval import load_task_inputs, run_clusterrag
from privacy.helpers import MARK, edit_questions, mark

TASK = "LaMP-2"
CFRAG = {"epochs": 2, "reranker_layers": 1, "reranker_max_length": 64}


def _plant(root: Path) -> tuple[dict[str, set[str]], set[str]]:
    """Users u%4 == 0 do not share (record field ``share``, or sharing.json for every second one); users u%4 == 1
    share but make every second document private (record field ``visibility``, or sharing.json). Every hidden
    document carries its owner's marker. Returns owner -> hidden doc ids, and the non-sharing users."""
    hidden: dict[str, set[str]] = {}

    def edit(q: dict, side: dict) -> None:
        user = q["user_id"]
        n = int(user[1:])
        if n % 4 not in (0, 1):
            return
        for j, doc in enumerate(q["profile"]):
            if n % 4 == 0 or j % 2 == 0:
                mark(doc, user, hidden)
                if n % 4 == 1 and n % 8 == 1:
                    doc["visibility"] = "private"
                elif n % 4 == 1:
                    side["private_documents"].append({"user_id": user, "id": str(doc["id"])})
        if n % 8 == 0:
            q["share"] = False
        elif n % 4 == 0:
            side["users"][user] = {"share": False}

    edit_questions(root, edit)
    return hidden, {u for u in hidden if int(u[1:]) % 4 == 0}


def _columns(con) -> dict[str, dict[str, str]]:
    rows = con.execute("SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main'")
    out: dict[str, dict[str, str]] = {}
    for table, column, kind in rows.fetchall():
        out.setdefault(table, {})[column] = kind
    return out


def _leaks(con, hidden: dict[str, set[str]]) -> list[str]:
    """Every row that shows a marker or a hidden document to a user other than its owner."""
    samples = dict(con.execute("SELECT sample_id, user_id FROM lamp_samples").fetchall())
    asked = con.execute("SELECT input, user_id FROM lamp_samples UNION SELECT query, user_id FROM lamp_samples")
    questions = asked.fetchall()
    found = []
    for table, cols in _columns(con).items():
        viewer_col = "user_id" if "user_id" in cols else "sample_id" if "sample_id" in cols else None
        for col in [c for c, kind in cols.items() if kind == "VARCHAR"]:
            sql = f'SELECT * FROM "{table}" WHERE "{col}" LIKE \'%zqmark%\''
            for row in con.execute(sql).df().to_dict("records"):
                if viewer_col == "user_id":
                    viewers = {row["user_id"]}
                elif viewer_col == "sample_id":
                    viewers = {samples.get(row["sample_id"])}
                else:  # an answer cache: the prompt shows the question (or query) it answers
                    viewers = {u for text, u in questions if text in str(row.get("prompt", ""))}
                for owner in set(MARK.findall(str(row[col]))):
                    if viewers != {owner}:
                        found.append(f"{table}.{col}: marker of {owner} seen by {sorted(map(str, viewers))}")
        if {"source_user_id", "doc_id"} <= set(cols):
            for row in con.execute(f'SELECT * FROM "{table}" WHERE source_user_id <> coalesce(user_id, \'\')'
                                   if "user_id" in cols else f'SELECT * FROM "{table}"').df().to_dict("records"):
                viewer = row.get("user_id") or samples.get(row.get("sample_id"))
                if row["doc_id"] in hidden.get(row["source_user_id"], set()) and viewer != row["source_user_id"]:
                    found.append(f"{table}: {row['source_user_id']}/{row['doc_id']} shown to {viewer}")
    return found


def _user_rows(con, user: str) -> list[str]:
    out = []
    for table, cols in _columns(con).items():
        named = [c for c in ("user_id", "source_user_id", "neighbour_id") if c in cols]
        if table == "erasure_audit" or not named:
            continue
        n = con.execute(f'SELECT count(*) FROM "{table}" WHERE ' + " OR ".join(f"{c} = ?" for c in named),
                        [user] * len(named)).fetchall()[0][0]  # fmt: skip
        out += [f"{table}: {n}"] if n else []
        for col in [c for c, kind in cols.items() if kind == "VARCHAR"]:
            n = con.execute(f'SELECT count(*) FROM "{table}" WHERE "{col}" LIKE ?', [f"%zqmark{user}q%"]).fetchall()
            out += [f"{table}.{col} holds the marker"] if n[0][0] else []
    return out


def _cached_questions(con, user: str) -> set[str]:
    """Hashes of the user's questions (no other user asks them) held by the embedding cache."""
    from prag_models.storage.hashing import SQL_HASH

    question = SQL_HASH.format("query")
    sql = (f"SELECT {question} FROM lamp_samples WHERE user_id = ? EXCEPT SELECT {question} FROM lamp_samples "
           "WHERE user_id <> ?")  # fmt: skip
    mine = {h for (h,) in con.execute(sql, [user, user]).fetchall()}
    return mine & {h for (h,) in con.execute("SELECT content_hash FROM embedding_cache").fetchall()}


def test_markers_never_reach_another_user_and_forget_leaves_nothing(tmp_path, monkeypatch) -> None:
    config = write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                          data={"tasks": [TASK]}, cfrag=CFRAG)  # fmt: skip
    settings = load_settings(config)
    hidden, non_sharing = _plant(demo_root(settings))
    result = materialize_graph(config, [TASK])
    assert result.success
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        consent = dict(con.execute("SELECT user_id, share FROM user_sharing").fetchall())
        assert {u for u, s in consent.items() if not s} == non_sharing
        neighbours = {n for (n,) in con.execute("SELECT neighbour_id FROM similar_users").fetchall()}
        assert neighbours & set(hidden), "no marker owner is anyone's neighbour: the test would prove nothing"
        shared = con.execute("SELECT count(*) FROM clusterrag_retrievals WHERE source_user_id <> user_id").fetchall()
        assert shared[0][0] > 0  # other users' shareable documents do flow
        assert _leaks(con, hidden) == []
        # teeth: with every document shareable, the same retrieval WOULD show hidden documents to other users
        index, samples, nbs = load_task_inputs(con, TASK, default_share=True)
        everyone = index.with_shareable(np.ones(len(index.doc_ids), dtype=bool))
        rows, _ = run_clusterrag(settings, TASK, everyone, samples, nbs)
        assert [r for r in rows if r[6] != r[3] and r[5] in hidden.get(r[6], set())]
        from prag_models.methods.cfrag.feedback import load_feedback_inputs

        inputs = load_feedback_inputs(con, TASK, settings)  # the retriever's and reranker's training candidates
        user_of = dict(zip(inputs.samples["sample_id"], inputs.samples["user_id"], strict=True))
        batches = [(user_of[s], c) for s, cands in inputs.candidates.items() for c in cands]
        assert batches and not [c for u, c in batches if c.doc_id in hidden.get(c.source_user_id, set())
                                and c.source_user_id != u]  # fmt: skip
        evaluated = {m for (m,) in con.execute("SELECT DISTINCT method FROM lamp_retrieval_evaluation").fetchall()}
        assert "clusterrag_collaborative@consent50" in evaluated
    from prag_assets.cli.forget import run_forget

    monkeypatch.setenv("PRAG_CONFIG", str(config))
    erased = sorted(non_sharing)[0]
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:  # the erased user's question vectors
        questions = _cached_questions(con, erased)
    assert questions, "the erased user's questions are not in the embedding cache: the check would prove nothing"
    assert run_forget(erased, TASK) == 0
    assert run_forget(erased, TASK) == 0  # idempotent
    assert run_forget("u9999", TASK) == 1  # unknown
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        assert _user_rows(con, erased) == []
        assert _leaks(con, hidden) == []
        held = con.execute("SELECT count(*) FROM embedding_cache WHERE content_hash IN (SELECT unnest(?))",
                           [sorted(questions)]).fetchall()[0][0]  # fmt: skip
        assert held == 0, f"{held} of the erased user's {len(questions)} question vectors stay in embedding_cache"
        audit = con.execute("SELECT user_id, rows_deleted, models_flagged_json FROM erasure_audit").fetchall()
    assert len(audit) == 1 and audit[0][0] == erased and audit[0][1] > 0 and json.loads(audit[0][2])
    # loading the source files again does not bring the erased user back (the audit is the suppression list)
    again = materialize_graph(config, [TASK], selection=["lamp_samples", "profile_documents"])
    assert partition_metadata(again, "lamp_samples")[TASK]["erased_users_skipped"] == 1
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        assert _user_rows(con, erased) == []
        assert con.execute("SELECT count(*) FROM lamp_samples").fetchall()[0][0] > 0
