"""item_cf served by the MLflow pyfunc (docs/methods.md §5.2, prag_models/mlops/served_item_cf.py): a registered CFRAG
version, logged by the graph into a real MLflow sqlite store and loaded by alias, serves item_cf when the request's
parameter ``method`` asks for it, as `prag answer --method item_cf` does, with counted agreement (identical documents
collapsed, each with the number of writers the asker may see) and the privacy rules.

One tiny world of the tagging family (items recur across users: identical documents), LaMP-2 materialized up to
cfrag_retrievals and clusterrag_retrievals with tuning on (the fake generator, the real packaged embedder), once for the
module; every test serves a copy of its DuckDB file (``PRAG_HOME``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from conftest import materialize_graph, store_copy, write_config

from prag_models.config.settings import load_settings
from prag_models.mlops import registry

TASK = "LaMP-2"
DATA = {"tasks": [TASK], "demo_family": "tagging", "demo_users": 32, "demo_communities": 4, "demo_dev_samples": 8}
CFRAG = {"epochs": 2, "reranker_layers": 1, "reranker_max_length": 64}
METHODS = ["dense_global", "dense", "clusterrag_community", "cfrag", "item_cf"]
RERANKER = f"models:/{registry.registered_name('reranker', TASK)}@champion"
ITEM_CF = {"method": "item_cf"}


@pytest.fixture(scope="module")
def tagging_graph(tmp_path_factory) -> tuple[Path, object]:
    """(config, settings) of the tagging world materialized up to the CFRAG versions and clusterrag_retrievals."""
    tmp = tmp_path_factory.mktemp("pyfunc-item-cf")
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake", data=DATA, cfrag=CFRAG,
                          retrieval={"k": 3, "methods": METHODS},
                          tuning={"enabled": True, "budget_s": 2.0, "max_trials": 3})  # fmt: skip
    selection = dg.AssetSelection.assets("cfrag_retrievals", "clusterrag_retrievals").upstream()
    assert materialize_graph(config, [TASK], selection=selection).success
    return config, load_settings(config)


def _home(settings, tmp_path: Path) -> Path:
    """A copy of the graph's DuckDB file under a new prag home (what the served model reads, ``PRAG_HOME``)."""
    home = tmp_path / "served-home"
    home.mkdir(parents=True)
    shutil.copy(settings.duckdb_path, home / "prag.duckdb")
    return home


def _load(settings, home: Path, monkeypatch):
    """The champion reranker of the task as a pyfunc model, loaded from the MLflow sqlite store, serving ``home``."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", settings.mlflow_uri)
    monkeypatch.setenv("PRAG_HOME", str(home))
    return mlflow.pyfunc.load_model(RERANKER)


def _requests(path: Path) -> list[tuple[str, str, str]]:
    """(sample id, user id, input) of every dev sample."""
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT sample_id, user_id, input FROM lamp_samples WHERE task = ? AND split = 'dev' "
                           "ORDER BY sample_id", [TASK]).fetchall()  # fmt: skip


def _frame(requests: list[tuple[str, str, str]]):
    import pandas as pd

    return pd.DataFrame([{"task": TASK, "user_id": u, "query": text} for _, u, text in requests])


def test_the_pyfunc_serves_item_cf_as_prag_answer_does(tagging_graph, tmp_path, monkeypatch) -> None:
    """For every dev sample of the tagging world and a new user, the champion's pyfunc with ``method = item_cf``
    returns what `prag answer --method item_cf` (answer_once) retrieves: the same documents, source users, scores and
    writer counts (some texts written by several users), the user's cold start alike, both with the task's tuned
    knobs (set here to other values than the configured ones); without the parameter it still serves CFRAG."""
    from prag_models.mlops.answer_once import answer_once

    config, settings = tagging_graph
    home = _home(settings, tmp_path)
    with duckdb.connect(str(home / "prag.duckdb")) as con:  # tuned knobs that differ from the configured ones
        for knob, value in (("item_cf.sharpness", "1.0"), ("clustering.user_similarity", '"taste"')):
            con.execute("UPDATE tuned_settings SET value = ? WHERE task = ? AND method = 'item_cf' AND knob = ?",
                        [value, TASK, knob])  # fmt: skip
    requests = _requests(home / "prag.duckdb")
    requests.append(("new", "someone-new", requests[0][2]))
    model = _load(settings, home, monkeypatch)
    served = model.predict(_frame(requests), params=ITEM_CF)
    with store_copy(home / "prag.duckdb", tmp_path) as con:  # answer_once writes the generation cache
        answers = [answer_once(con, load_settings(config), TASK, user, "item_cf", text) for _, user, text in requests]
    assert set(served["method"]) == {"item_cf"} and len(served) == len(requests)
    for row, answer in zip(served.itertuples(), answers, strict=True):
        assert list(row.doc_ids) == [r.doc_id for r in answer.retrieved] and row.doc_ids, row.user_id
        assert list(row.source_user_ids) == [r.source_user_id for r in answer.retrieved]
        assert list(row.writers) == [r.writers for r in answer.retrieved]
        assert list(row.scores) == pytest.approx([r.score for r in answer.retrieved], abs=1e-5)
        assert row.cold_start == answer.user.cold_start
    assert max(w for ws in served["writers"] for w in ws) > 1  # agreement was counted: the test can tell
    assert served["cold_start"].tolist() == [False] * (len(requests) - 1) + [True]
    assert "sharpness 1, shortlist 64, taste user similarity" in served["models"].iloc[0]
    cfrag = model.predict(_frame(requests[:2]))
    assert set(cfrag["method"]) == {"cfrag"} and set(w for ws in cfrag["writers"] for w in ws) == {1}
    with pytest.raises(ValueError, match="serves method 'cfrag'.*'item_cf'"):
        model.predict(_frame(requests[:1]), params={"method": "clusterrag_hybrid"})


def test_a_version_logged_before_item_cf_settings_were_stored_refuses_item_cf(tagging_graph, tmp_path,
                                                                             monkeypatch) -> None:  # fmt: skip
    """A version whose model_config lacks item_cf's settings (logged before they were stored) refuses an item_cf
    request rather than serve the default knobs; its own CFRAG ranking still serves."""
    from prag_models.mlops.pyfunc import UnknownSettingsError, inference_settings, unknown_sections

    _, settings = tagging_graph
    home = _home(settings, tmp_path)
    served = _load(settings, home, monkeypatch).unwrap_python_model()
    served.config["settings"].pop("item_cf")
    served.settings, served.unknown = inference_settings(served.config), unknown_sections(served.config)
    requests = _frame(_requests(home / "prag.duckdb")[:1])
    with pytest.raises(UnknownSettingsError, match="before its item_cf settings were stored"):
        served.predict(None, requests, ITEM_CF)
    assert served.predict(None, requests)["doc_ids"].iloc[0]


def test_a_document_the_asker_may_not_see_is_never_counted_nor_shown(tagging_graph, tmp_path, monkeypatch) -> None:
    """A user's copy of a text several users wrote, shown to another user with its count, is made private: the loaded
    model (it re-reads the changed DuckDB file) shows it to no other user and no longer counts it — the viewer's count
    of that text drops by one —, and every other user's item_cf ranking (documents, source users, scores, counts)
    equals the one served from a file without that document at all."""
    _, settings = tagging_graph
    hidden, gone = _home(settings, tmp_path / "hidden"), _home(settings, tmp_path / "gone")
    requests = _requests(hidden / "prag.duckdb")
    model = _load(settings, hidden, monkeypatch)
    before = model.predict(_frame(requests), params=ITEM_CF)
    counted = [(r.Index, d, s, w) for r in before.itertuples()
               for d, s, w in zip(r.doc_ids, r.source_user_ids, r.writers, strict=True) if w > 1 and s != r.user_id]
    assert counted, "no counted text shown to another user: the test would prove nothing"
    at, doc, owner, writers = counted[0]
    with duckdb.connect(str(hidden / "prag.duckdb")) as con:
        con.execute("INSERT INTO document_visibility (task, user_id, doc_id, visibility) VALUES (?, ?, ?, 'private')",
                    [TASK, owner, doc])  # fmt: skip
        text_of = {(u, d): t for u, d, t in con.execute("SELECT user_id, doc_id, text FROM profile_documents "
                                                        "WHERE task = ?", [TASK]).fetchall()}  # fmt: skip
    with duckdb.connect(str(gone / "prag.duckdb")) as con:
        for table in ("profile_documents", "document_embeddings"):
            con.execute(f"DELETE FROM {table} WHERE task = ? AND user_id = ? AND doc_id = ?", [TASK, owner, doc])
    after = model.predict(_frame(requests), params=ITEM_CF)
    without = _load(settings, gone, monkeypatch).predict(_frame(requests), params=ITEM_CF)
    viewer = after.iloc[at]
    counts = {text_of[(s, d)]: w for d, s, w in zip(viewer["doc_ids"], viewer["source_user_ids"], viewer["writers"],
                                                    strict=True)}  # fmt: skip
    assert counts.get(text_of[(owner, doc)]) == writers - 1, (counts, writers)
    others = [i for i, (_, user, _) in enumerate(requests) if user != owner]
    assert at in others
    for i in others:
        row, expected = after.iloc[i], without.iloc[i]
        assert (owner, doc) not in set(zip(row["source_user_ids"], row["doc_ids"], strict=True))
        for column in ("doc_ids", "source_user_ids", "writers"):
            assert list(row[column]) == list(expected[column]), (row["user_id"], column)
        assert list(row["scores"]) == pytest.approx(list(expected["scores"]), abs=1e-6)
