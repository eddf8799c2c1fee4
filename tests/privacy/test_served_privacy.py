"""The served champion keeps prag's privacy promises (issue 26): opt-in (``privacy.default_share = false``) honoured by
the pyfunc, a consent withdrawn while a run holds the DuckDB file, the user encoder's document-row map, what private
documents may influence, and the same checks through a real `mlflow models serve` process.

One LaMP-2 demo with the fake generator, materialized once for the module with ``default_share = false`` and taste
similarity (``clustering.user_similarity = taste``: similar users by how users label items): every user
states consent in sharing.json except that OPTED does not share, PRIVATE makes every second document private (both
carry a marker unique to their owner in the hidden documents). Each test serves a copy of the DuckDB file
(``PRAG_HOME``), so the graph's file stays as built."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pytest
from conftest import hold_writer, materialize_graph, write_config

from prag_models.config.settings import load_settings
from prag_models.data.source import demo_root
from prag_models.mlops import registry
from privacy.helpers import MARK, edit_questions, mark

TASK = "LaMP-2"
CFRAG = {"epochs": 2, "reranker_layers": 1, "reranker_max_length": 64}
PRIVACY = {"default_share": False}
CLUSTERING = {"similar_users": 2, "user_similarity": "taste"}
OPTED, PRIVATE = "u0005", "u0002"
RERANKER = f"models:/{registry.registered_name('reranker', TASK)}@champion"


def _plant(root: Path) -> dict[str, set[str]]:
    """Everyone shares (sharing.json) except OPTED; every second document of PRIVATE is private. Hidden documents
    carry their owner's marker. Returns owner -> hidden doc ids."""
    hidden: dict[str, set[str]] = {}

    def edit(q: dict, side: dict) -> None:
        user = q["user_id"]
        side["users"][user] = {"share": user != OPTED}
        for j, doc in enumerate(q["profile"]):
            if user == OPTED or (user == PRIVATE and j % 2 == 0):
                mark(doc, user, hidden)
                if user == PRIVATE:
                    side["private_documents"].append({"user_id": user, "id": str(doc["id"])})

    edit_questions(root, edit)
    return hidden


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(settings, hidden documents) of the planted demo materialized up to cfrag_retrievals."""
    tmp = tmp_path_factory.mktemp("served-privacy")
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake", data={"tasks": [TASK]},
                          cfrag=CFRAG, privacy=PRIVACY, clustering=CLUSTERING)  # fmt: skip
    settings = load_settings(config)
    hidden = _plant(demo_root(settings))
    result = materialize_graph(config, [TASK], selection=dg.AssetSelection.assets("cfrag_retrievals").upstream())
    assert result.success
    return settings, hidden


def _served_home(planted, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the graph's DuckDB file under a new home, with a config for `prag` commands on it."""
    settings, _ = planted
    home = tmp_path / "served-home"
    home.mkdir()
    shutil.copy(settings.duckdb_path, home / "prag.duckdb")
    config = write_config(tmp_path / "served.toml", home, generator_backend="fake", data={"tasks": [TASK]},
                          cfrag=CFRAG, privacy=PRIVACY, clustering=CLUSTERING)  # fmt: skip
    return home, config


def _requests(path: Path):
    """One (task, user_id, query) request per user of the task (the query of its first sample)."""
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT ? AS task, user_id, first(query ORDER BY sample_id) AS query FROM lamp_samples "
                           "WHERE task = ? GROUP BY user_id ORDER BY user_id", [TASK, TASK]).df()  # fmt: skip


def _load(planted, home: Path, monkeypatch):
    """The champion reranker as a pyfunc model serving the home's DuckDB file."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", planted[0].mlflow_uri)
    monkeypatch.setenv("PRAG_HOME", str(home))
    return mlflow.pyfunc.load_model(RERANKER)


def _shown(predictions) -> set[tuple[str, str, str]]:
    """(viewer, owner, doc id) of every document shown to a user other than its owner."""
    return {(row["user_id"], s, d) for row in predictions for d, s in
            zip(row["doc_ids"], row["source_user_ids"], strict=True) if s != row["user_id"]}  # fmt: skip


def _records(frame) -> list[dict]:
    return [{"user_id": r.user_id, "doc_ids": list(r.doc_ids), "source_user_ids": list(r.source_user_ids)}
            for r in frame.itertuples()]  # fmt: skip


def _sharing_owner(shown: set[tuple[str, str, str]]) -> str:
    """A sharing user whose documents the served model shows to someone else."""
    owners = sorted({o for _, o, _ in shown} - {OPTED, PRIVATE})
    assert owners, "no other user's document is served: the test would prove nothing"
    return owners[0]


def test_private_documents_shape_nothing_another_user_gets(planted) -> None:
    """docs/privacy.md: z_u (clusters, neighbours) is the mean of the user's shareable documents only; a user who
    shares nothing gets the cold start; the CFRAG user encoder's document table holds shareable documents only."""
    settings, hidden = planted
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        sql = "SELECT user_id, embedding FROM user_embeddings WHERE task = ?"
        z = {u: np.asarray(e, dtype=np.float32) for u, e in con.execute(sql, [TASK]).fetchall()}
        docs = con.execute("SELECT doc_id, embedding FROM document_embeddings WHERE task = ? AND user_id = ?",
                           [TASK, PRIVATE]).fetchall()  # fmt: skip
        opted = con.execute("SELECT n_docs, cold_start FROM user_embeddings WHERE task = ? AND user_id = ?",
                            [TASK, OPTED]).fetchone()  # fmt: skip
        shareable = con.execute("SELECT count(*) FROM document_embeddings WHERE task = ? AND user_id <> ?",
                                [TASK, OPTED]).fetchone()[0] - len(hidden[PRIVATE])  # fmt: skip
    vectors = np.asarray([e for d, e in docs if d not in hidden[PRIVATE]], dtype=np.float32)
    assert 0 < len(vectors) < len(docs)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert np.allclose(z[PRIVATE], vectors.mean(axis=0), atol=1e-5)
    assert opted == (0, True)
    encoder, _ = registry.load_registered(registry.MlflowTarget(settings.mlflow_uri),
                                          registry.registered_name("user_encoder", TASK), alias="champion")  # fmt: skip
    rows = list(zip(encoder.doc_rows["user_id"].to_pylist(), encoder.doc_rows["doc_id"].to_pylist(), strict=True))
    assert len(rows) == encoder.num_docs == shareable
    assert not [(u, d) for u, d in rows if u == OPTED or d in hidden.get(u, set())]


def test_served_model_honours_opt_in(planted, tmp_path, monkeypatch) -> None:
    """With default_share = false, a user without a stated consent (no user_sharing row: e.g. added by `prag ingest`
    without a share field) is never shown to others by the served pyfunc."""
    home, _ = _served_home(planted, tmp_path)
    requests = _requests(home / "prag.duckdb")
    never = _sharing_owner(_shown(_records(_load(planted, home, monkeypatch).predict(requests))))
    with duckdb.connect(str(home / "prag.duckdb")) as con:
        con.execute("DELETE FROM user_sharing WHERE user_id = ?", [never])
    after = _shown(_records(_load(planted, home, monkeypatch).predict(requests)))
    assert after and never not in {o for _, o, _ in after}


def _release(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=30)


def test_withdrawn_consent_is_not_served_while_a_run_holds_the_file(planted, tmp_path, monkeypatch) -> None:
    """`prag ingest` of a record with share = false republishes the readers' snapshot, so the served model stops
    showing the user's documents even while another process holds the live file; a statement the snapshot lacks
    (written without republishing) makes the served model refuse rather than serve the older snapshot."""
    from prag_assets.cli import main
    from prag_models.data.history import ingest_files
    from prag_models.storage.store import connect, publish_snapshot

    home, config = _served_home(planted, tmp_path)
    live = home / "prag.duckdb"
    publish_snapshot(live)
    requests = _requests(live)
    model = _load(planted, home, monkeypatch)
    before = _shown(_records(model.predict(requests)))
    withdrawn = _sharing_owner(before)
    record = {"user_id": withdrawn, "id": "withdrawal", "date": "2024-01-01", "description": "a note",
              "tag": "comedy", "share": False}  # fmt: skip
    (tmp_path / "withdraw.json").write_text(json.dumps([record]), encoding="utf-8")
    monkeypatch.setenv("PRAG_CONFIG", str(config))
    assert main(["ingest", str(tmp_path / "withdraw.json"), "--task", TASK]) == 0
    holder = hold_writer(live)
    try:
        after = _shown(_records(model.predict(requests)))
    finally:
        _release(holder)
    assert after and withdrawn not in {o for _, o, _ in after}
    # a statement the snapshot lacks (written without republishing, e.g. a crash before it): the snapshot is refused
    other = _sharing_owner(after)
    (tmp_path / "other.json").write_text(json.dumps([{**record, "user_id": other}]), encoding="utf-8")
    with connect(live) as con:
        ingest_files(con, [tmp_path / "other.json"], TASK)
    holder = hold_writer(live)
    try:
        with pytest.raises(LookupError, match="predates the consent statement"):
            model.predict(requests)
    finally:
        _release(holder)


def test_served_encoder_refuses_documents_it_was_not_trained_on(planted, tmp_path, monkeypatch) -> None:
    """When the served encoder did not make the stored tables (e.g. after a rollback) it re-encodes every user by
    its stored document-row map; after a document is gone (an erasure) it refuses, naming model, version and what to
    retrain, instead of pointing histories at other documents."""
    home, _ = _served_home(planted, tmp_path)
    live = home / "prag.duckdb"
    requests = _requests(live)
    with duckdb.connect(str(live)) as con:  # the tables were made by another encoder version: re-encode
        con.execute("UPDATE cfrag_models SET version = version + 100 WHERE kind = 'user_encoder'")
    served = _load(planted, home, monkeypatch).predict(requests)
    gone = _sharing_owner(_shown(_records(served)))  # served by re-encoding: the map matches
    with duckdb.connect(str(live)) as con:
        (doc,) = con.execute("SELECT doc_id FROM document_embeddings WHERE task = ? AND user_id = ? "
                             "ORDER BY position LIMIT 1", [TASK, gone]).fetchone()  # fmt: skip
        for table in ("document_embeddings", "profile_documents"):
            con.execute(f"DELETE FROM {table} WHERE task = ? AND user_id = ? AND doc_id = ?", [TASK, gone, doc])
    model = _load(planted, home, monkeypatch)
    with pytest.raises(LookupError, match=r"prag-user-encoder-LaMP-2 v1 was trained on .* 1 of its rows are gone"):
        model.predict(requests)
    with pytest.raises(LookupError, match="retrain the user encoder"):
        model.predict(requests)


def _lists(pairs) -> dict[str, list[str]]:
    """user -> neighbours in rank order, from (user_id, neighbour_id) rows already in rank order."""
    out: dict[str, list[str]] = {}
    for user, neighbour in pairs:
        out.setdefault(user, []).append(neighbour)
    return out


def test_reencoded_similar_users_follow_the_versions_user_similarity(planted, tmp_path, monkeypatch) -> None:
    """Issue 39: a version stores its clustering section, so when it must re-encode (the tables were made by another
    encoder, e.g. after a rollback) it ranks similar users by the user similarity it was evaluated with (taste here),
    not by the default (content); a version logged without the section refuses to re-encode."""
    from prag_models.methods.knobs import with_knobs
    from prag_models.mlops import serving
    from prag_models.mlops.pyfunc import inference_settings, unknown_sections

    home, _ = _served_home(planted, tmp_path)
    live = home / "prag.duckdb"
    with duckdb.connect(str(live)) as con:
        stored = _lists(con.execute("SELECT user_id, neighbour_id FROM cfrag_similar_users WHERE task = ? "
                                    "ORDER BY user_id, rank", [TASK]).fetchall())  # fmt: skip
        con.execute("UPDATE cfrag_models SET version = version + 100 WHERE kind = 'user_encoder'")
    served = _load(planted, home, monkeypatch).unwrap_python_model()
    data = served.task_data()
    reencoded = data.similar.sort_values(["user_id", "rank"])
    assert "re-encoded" in data.source
    assert _lists(zip(reencoded["user_id"], reencoded["neighbour_id"], strict=True)) == stored
    assert served.settings.clustering.user_similarity == "taste"
    content = with_knobs(served.settings, {"clustering.user_similarity": "content"})
    with duckdb.connect(str(live), read_only=True) as con:
        _, by_content = serving.encode_task_users(con, TASK, served.models["user_encoder"], content)
    by_content = by_content.sort_values(["user_id", "rank"])
    assert _lists(zip(by_content["user_id"], by_content["neighbour_id"], strict=True)) != stored  # the setting matters
    served.config["settings"].pop("clustering")  # as a version logged before the section was stored
    served.settings, served.unknown = inference_settings(served.config), unknown_sections(served.config)
    served._data = None
    assert served.unknown == ["clustering"] and served.settings.clustering.user_similarity == "content"
    with pytest.raises(LookupError, match="before its clustering settings were stored"):
        served.predict(None, _requests(live))


def test_mlflow_models_serve_never_shows_hidden_or_unconsented_documents(planted, tmp_path, monkeypatch) -> None:
    """End to end through `mlflow models serve` on 127.0.0.1: for every user's request, no private document, no
    document of the opted-out user and none of a user without a stated consent (default_share = false) reaches
    another user, and no returned text holds another user's marker; other users' shareable documents do."""
    from test_mlflow_serving import _free_port, _post, _stop, _wait_ready

    settings, hidden = planted
    home, _ = _served_home(planted, tmp_path)
    live = home / "prag.duckdb"
    requests = _requests(live)
    never = _sharing_owner(_shown(_records(_load(planted, home, monkeypatch).predict(requests))))
    with duckdb.connect(str(live)) as con:
        con.execute("DELETE FROM user_sharing WHERE user_id = ?", [never])
    port, log = _free_port(), tmp_path / "serve.log"
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "MLFLOW_TRACKING_URI": settings.mlflow_uri, "PRAG_HOME": str(home),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    cmd = [str(Path(bin_dir) / "mlflow"), "models", "serve", "-m", RERANKER, "--env-manager", "local",
           "-h", "127.0.0.1", "-p", str(port), "-w", "1"]  # fmt: skip
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/ping", proc, log)
        answer = _post(f"http://127.0.0.1:{port}/invocations", {"dataframe_records": requests.to_dict("records")})
    finally:
        _stop(proc)
    assert proc.poll() is not None and time.monotonic() - started < 600
    shown = _shown(answer["predictions"])
    assert shown, "no other user's document is served: the test would prove nothing"
    assert not [s for s in shown if s[1] in (OPTED, never) or s[2] in hidden.get(s[1], set())]
    with duckdb.connect(str(live), read_only=True) as con:
        texts = {(u, d): t for u, d, t in con.execute("SELECT user_id, doc_id, text FROM profile_documents "
                                                      "WHERE task = ?", [TASK]).fetchall()}  # fmt: skip
    leaks = [(v, o, d) for v, o, d in shown if set(MARK.findall(texts[(o, d)])) - {v}]
    assert leaks == []


def test_a_version_flagged_after_an_erasure_is_never_served(planted, tmp_path, monkeypatch, capsys) -> None:
    """Issue 39: once `prag forget` flags the versions (privacy.needs_retraining, here on the champion's user encoder,
    a companion of the served reranker), the pyfunc refuses to load them, a model loaded before refuses requests once
    the DuckDB file changes (as the erasure changes it), and `prag answer` refuses them; each says how to retrain.
    On a copy of the MLflow store (the module's other tests serve the unflagged one)."""
    import mlflow

    from prag_assets.cli import main
    from prag_models.privacy.forget import RETRAIN_TAG

    settings, _ = planted
    store = tmp_path / "mlflow.db"
    shutil.copy(settings.mlflow_uri.removeprefix("sqlite:///"), store)
    home, _ = _served_home(planted, tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    monkeypatch.setenv("PRAG_HOME", str(home))
    requests = _requests(home / "prag.duckdb")
    running = mlflow.pyfunc.load_model(RERANKER)  # loaded before the erasure: serves
    assert len(running.predict(requests)) == len(requests)
    client = registry.make_client(registry.MlflowTarget(f"sqlite:///{store}"))
    encoder = client.get_model_version_by_alias(registry.registered_name("user_encoder", TASK), "champion")
    client.set_model_version_tag(encoder.name, encoder.version, RETRAIN_TAG, "true")
    refused = rf"{encoder.name} v{encoder.version} .*never served.*prag materialize.*prag promote --task {TASK}"
    with pytest.raises(Exception, match=refused):
        mlflow.pyfunc.load_model(RERANKER)
    with duckdb.connect(str(home / "prag.duckdb")) as con:  # the erasure's write: the running model re-reads
        con.execute("DELETE FROM lamp_samples WHERE user_id = ?", [OPTED])
    with pytest.raises(LookupError, match=refused):
        running.predict(requests)
    config = write_config(tmp_path / "answer.toml", home, generator_backend="fake", data={"tasks": [TASK]},
                          cfrag=CFRAG, privacy=PRIVACY, clustering=CLUSTERING,
                          mlflow={"tracking_uri": f"sqlite:///{store}"})  # fmt: skip
    monkeypatch.setenv("PRAG_CONFIG", str(config))
    capsys.readouterr()
    assert main(["answer", "--task", TASK, "--user", PRIVATE, "--input", requests["query"].iloc[0]]) == 2
    assert re.search(refused, capsys.readouterr().err)
