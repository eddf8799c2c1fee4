"""The LaMP asset graph with the fake generator: plumbing, failure isolation, the Dagster CLI."""


import duckdb
from conftest import check_results, materialize_graph, read_tables, write_config

from prag_models.config.settings import load_settings

METHODS = set(load_settings(environ={}).retrieval.methods)


def _checks(result) -> dict[str, bool]:
    return {name: passed for name, (passed, _) in check_results(result).items()}




def test_graph_plumbing_with_fake_generator(demo_home):
    """The session's demo (two tasks, the deterministic fake LLM, the job prag_demo): every stage wrote, every check
    passed."""
    import dagster as dg

    instance = demo_home.instance()
    checks = [e.dagster_event.event_specific_data for e in
              instance.all_logs(demo_home.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)]  # fmt: skip
    assert instance.get_run_by_id(demo_home.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert checks and all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]
    with read_tables(demo_home.config) as con:
        n_dev = con.execute("SELECT count(*) FROM lamp_samples WHERE split = 'dev' AND task = 'LaMP-2'").fetchone()[0]
        per_method = con.execute(
            "SELECT method, count(*) FROM generations WHERE task = 'LaMP-2' GROUP BY method").fetchall()
        # user-only ClusterRAG ranks the own profile by cosine: identical to dense retrieval by construction.
        diff = con.execute(
            "SELECT count(*) FROM (SELECT sample_id, rank, doc_id FROM clusterrag_retrievals WHERE method = "
            "'clusterrag_user_only' EXCEPT SELECT sample_id, rank, doc_id FROM baseline_retrievals WHERE method = "
            "'dense')").fetchone()[0]
        collab_own = con.execute(
            "SELECT count(*) FROM clusterrag_retrievals WHERE method = 'clusterrag_collaborative' "
            "AND source_user_id = user_id").fetchone()[0]
    assert n_dev == 4 and dict(per_method) == {m: n_dev for m in METHODS}
    assert diff == 0 and collab_own == 0


def test_failing_check_stops_everything_downstream(tiny_config, monkeypatch):
    """A sample with an empty query fails the blocking samples check: nothing downstream is written."""
    import prag_assets.assets.lamp_data as lamp_data

    original = lamp_data.samples_frame

    def broken(task, splits):
        frame = original(task, splits)
        frame.loc[0, "query"] = None
        return frame

    monkeypatch.setattr(lamp_data, "samples_frame", broken)
    result = materialize_graph(tiny_config, ["LaMP-2"], raise_on_error=False)
    assert not result.success
    assert _checks(result)["lamp_samples:samples_valid"] is False
    with read_tables(tiny_config) as con:
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert "lamp_samples" in tables
    assert not tables & {"profile_documents", "query_embeddings", "user_clusters", "generations", "lamp_evaluation"}


def test_malformed_lamp_folder_writes_nothing(tmp_path):
    """A LaMP folder with invalid JSON stops the first stage with a message naming the file."""
    for split in ("train", "dev"):
        folder = tmp_path / "lamp" / "LaMP_2_time" / split
        folder.mkdir(parents=True)
        (folder / f"{split}_questions.json").write_text('[{"id": "1", "input": "x", ', encoding="utf-8")
        (folder / f"{split}_outputs.json").write_text('{"task": "LaMP_2", "golds": []}', encoding="utf-8")
    config = write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                          data={"source": "lamp", "lamp_dir": str(tmp_path / "lamp"), "tasks": ["LaMP-2"]})
    result = materialize_graph(config, ["LaMP-2"], raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.to_string()
    assert "train_questions.json" in message and "invalid JSON" in message
    db = load_settings(config).duckdb_path
    if db.exists():
        with duckdb.connect(str(db), read_only=True) as con:
            tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            assert not tables & {"lamp_samples", "profile_documents", "document_embeddings", "generations"}
