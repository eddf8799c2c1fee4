"""The registered CFRAG versions as MLflow pyfunc models: load by alias and predict like evaluation, and the real
`mlflow models serve` process answering (task, user_id, query) on /invocations. One task of a tiny demo with the fake
generator and the real packaged embedder, materialized once for the module."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from conftest import SERVED_TASK

from prag_models.mlops import registry

TASK = SERVED_TASK
#: The cfrag_retrievals method each kind's pyfunc reproduces (the user encoder's variant is not an evaluation row).
EVALUATED = {"reranker": "cfrag", "reranker_no_eu": "cfrag_no_reranker_eu"}
SERVE_TIMEOUT_S = 300


@pytest.fixture
def graph(served_graph):
    """The session's served LaMP-2 graph (tests/session_graphs.py `served_graph`, shared with test_serving_latency)."""
    return served_graph


def _expected(retrievals, method: str, sample_id: str) -> tuple[list[str], list[float]]:
    rows = retrievals[(retrievals["method"] == method) & (retrievals["sample_id"] == sample_id)].sort_values("rank")
    return rows["doc_id"].astype(str).tolist(), rows["score"].astype(float).tolist()


def test_registered_versions_are_pyfunc_models_predicting_like_evaluation(graph, monkeypatch) -> None:
    """Every kind's champion loads with mlflow.pyfunc.load_model by alias; predict equals the evaluation rows that
    the same inference function wrote to cfrag_retrievals (doc ids exactly, scores to float32 precision)."""
    import mlflow

    settings, samples, retrievals, similar = graph
    monkeypatch.setenv("MLFLOW_TRACKING_URI", settings.mlflow_uri)
    request = samples.head(3).rename(columns={"sample_id": "sample"}).assign(task=TASK)
    for kind, method in EVALUATED.items():
        model = mlflow.pyfunc.load_model(f"models:/{registry.registered_name(kind, TASK)}@champion")
        assert [c.name for c in model.metadata.get_input_schema().inputs] == ["task", "user_id", "query"]
        out = model.predict(request[["task", "user_id", "query"]])
        assert len(out) == len(request) and not out["cold_start"].any()
        for row, sample in zip(out.itertuples(), request["sample"], strict=True):
            ids, scores = _expected(retrievals, method, sample)
            assert list(row.doc_ids) == ids and ids, (kind, sample)
            assert list(row.scores) == pytest.approx(scores, abs=1e-5), (kind, sample)
        assert "alias champion" in out["models"].iloc[0]
    # the retriever serves its own ranking (top final_k by S), which no evaluation row holds: its documents come from
    # the user and the user's CFRAG neighbours, best first
    retriever = mlflow.pyfunc.load_model(f"models:/{registry.registered_name('retriever', TASK)}@champion")
    for row in retriever.predict(request[["task", "user_id", "query"]]).itertuples():
        users = {row.user_id} | set(similar.loc[similar["user_id"] == row.user_id, "neighbour_id"])
        assert row.doc_ids and set(row.source_user_ids) <= users
        assert list(row.scores) == sorted(row.scores, reverse=True)
    encoder = mlflow.pyfunc.load_model(f"models:/{registry.registered_name('user_encoder', TASK)}@champion")
    first = encoder.predict(request[["task", "user_id", "query"]].head(1)).iloc[0]
    allowed = set(similar.loc[similar["user_id"] == first["user_id"], "neighbour_id"])
    assert first["doc_ids"] and set(first["source_user_ids"]) <= allowed
    with pytest.raises(ValueError, match="serves LaMP-2 only"):
        encoder.predict(request[["task", "user_id", "query"]].assign(task="LaMP-3"))


def test_reencoding_users_reproduces_the_stored_tables(graph) -> None:
    """The path a version takes when the tables were made by another encoder: e_u and top-m similar users re-encoded
    from the histories equal cfrag_user_embeddings / cfrag_similar_users made by the same encoder."""
    import numpy as np

    from prag_models.mlops import serving

    settings, _, _, similar = graph
    target = registry.MlflowTarget(settings.mlflow_uri)
    encoder, _ = registry.load_registered(target, registry.registered_name("user_encoder", TASK), alias="champion")
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        vectors, found = serving.encode_task_users(con, TASK, encoder, settings)
        stored = con.execute("SELECT user_id, embedding FROM cfrag_user_embeddings WHERE task = ? ORDER BY user_id",
                             [TASK]).df()  # fmt: skip
    assert vectors["user_id"].tolist() == stored["user_id"].tolist()
    assert np.allclose(np.stack(vectors["embedding"]), np.stack(stored["embedding"]), atol=1e-6)
    ranked = similar.assign(rank=similar.groupby("user_id").cumcount())
    assert _neighbour_lists(found) == _neighbour_lists(ranked)


def test_reencoded_neighbours_follow_the_configured_user_similarity(graph) -> None:
    """With clustering.user_similarity = blend (taste of how users label similar items mixed in), the re-encoding path
    ranks similar users as cfrag_similar_users would under those settings, not by the encoder's vectors alone."""
    from prag_models.methods.cfrag.tables import similar_user_lists
    from prag_models.mlops import serving

    settings, _, _, _ = graph
    blend = settings.model_copy(update={"clustering": settings.clustering.model_copy(
        update={"user_similarity": "blend", "taste_weight": 0.9})})  # fmt: skip
    target = registry.MlflowTarget(settings.mlflow_uri)
    encoder, _ = registry.load_registered(target, registry.registered_name("user_encoder", TASK), alias="champion")
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        _, found = serving.encode_task_users(con, TASK, encoder, blend)
        _, by_content = serving.encode_task_users(con, TASK, encoder, settings)
        expected = similar_user_lists(con, TASK, blend)
    assert _neighbour_lists(found) == expected
    assert _neighbour_lists(by_content) != expected  # the setting matters on this world


def _neighbour_lists(frame) -> dict[str, list[str]]:
    return frame.sort_values(["user_id", "rank"]).groupby("user_id")["neighbour_id"].apply(list).to_dict()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, payload: dict) -> dict:
    body = json.dumps(payload).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as response:
        return json.loads(response.read())


def _wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"mlflow models serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(1.0)
    pytest.fail(f"mlflow models serve not ready within {SERVE_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the server's whole process group (mlflow -> uvicorn -> worker), SIGKILL after 30 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=30)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # workers left behind by a group leader that already exited


@contextlib.contextmanager
def running_mlflow_server(tracking_uri: str, log: Path) -> Iterator[str]:
    """A real `mlflow server` on 127.0.0.1 over a store, its output in ``log``: yields its base URL; its process
    group is stopped on exit."""
    port, bin_dir = _free_port(), Path(sys.executable).parent
    cmd = [str(bin_dir / "mlflow"), "server", "--backend-store-uri", tracking_uri, "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]  # fmt: skip
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(f"{base}/health", proc, log)
        yield base
    finally:
        _stop(proc)


def test_mlflow_models_serve_answers_invocations(graph, tmp_path) -> None:
    """`mlflow models serve -m models:/prag-reranker-LaMP-2@champion --env-manager local` on 127.0.0.1 answers a
    (task, user_id, query) request with ranked documents of the user and its similar users, scores distinct and
    descending; PRAG_HOME points it at a copy of the DuckDB file."""
    settings, samples, retrievals, similar = graph
    home = tmp_path / "served-home"
    home.mkdir()
    shutil.copy(settings.duckdb_path, home / "prag.duckdb")  # PRAG_HOME overrides the model_config path
    port, log = _free_port(), tmp_path / "serve.log"
    bin_dir = str(Path(sys.executable).parent)  # mlflow runs uvicorn from PATH
    env = {**os.environ, "MLFLOW_TRACKING_URI": settings.mlflow_uri, "PRAG_HOME": str(home),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    cmd = [str(Path(bin_dir) / "mlflow"), "models", "serve", "-m",
           f"models:/{registry.registered_name('reranker', TASK)}@champion", "--env-manager", "local",
           "-h", "127.0.0.1", "-p", str(port), "-w", "1"]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/ping", proc, log)
        sample = samples.iloc[0]
        records = [{"task": TASK, "user_id": sample["user_id"], "query": sample["query"]},
                   {"task": TASK, "user_id": "someone-new", "query": sample["query"]}]  # fmt: skip
        answer = _post(f"http://127.0.0.1:{port}/invocations", {"dataframe_records": records})
    finally:
        _stop(proc)
    known, new = answer["predictions"]
    ids, scores = _expected(retrievals, "cfrag", sample["sample_id"])
    assert known["doc_ids"] == ids and known["scores"] == pytest.approx(scores, abs=1e-5)
    assert len(set(known["scores"])) == len(known["scores"]) > 1 and known["scores"] == sorted(known["scores"])[::-1]
    allowed = set(similar.loc[similar["user_id"] == sample["user_id"], "neighbour_id"])
    assert sample["user_id"] in allowed and set(known["source_user_ids"]) <= allowed
    assert not known["cold_start"] and new["cold_start"] and new["doc_ids"]
    assert "prag-reranker-LaMP-2/1" in known["models"] and "alias champion" in known["models"]
