"""Incremental user updates (docs/methods.md §3.7): the sensor's run requests and cursor, the update, drift of a full
run."""

import json
import shutil
from datetime import UTC, datetime

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest
from conftest import materialize_graph, write_config

from prag_assets.automation.sensors import (
    RANGE_END,
    RANGE_START,
    full_reclustering_schedule,
    incremental_update_job,
    profile_history_sensor,
)
from prag_assets.resources.resource_set import default_resources
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import ClusteringSettings, load_settings
from prag_models.data.history import inbox_dir, ingest_files
from prag_models.stages.users import similar_user_rows
from prag_models.storage.store import connect
from prag_models.users.incremental import assign_to_reference, clustering_drift, merge_documents

TASKS = ["LaMP-2", "LaMP-3"]
BASE = ["lamp_samples", "profile_documents", "document_embeddings", "query_embeddings", "user_embeddings",
        "user_clusters", "similar_users", "cluster_drift", "cluster_state"]
INCREMENTAL = ["profile_history", "incremental_user_clusters", "incremental_similar_users"]
USER_TABLES = ["profile_documents", "document_embeddings", "user_embeddings", "user_clusters"]


@pytest.fixture(scope="module")
def base_home(tmp_path_factory):
    """A tiny demo (LaMP-2, LaMP-3) materialized up to similar users and the clustering snapshot, once per module."""
    root = tmp_path_factory.mktemp("base")
    config = write_config(root / "prag.toml", root / "home", generator_backend="fake", data={"tasks": TASKS})
    assert materialize_graph(config, TASKS, selection=BASE).success
    return root / "home"


@pytest.fixture
def config(base_home, tmp_path):
    """A private copy of the materialized home."""
    shutil.copytree(base_home, tmp_path / "home")
    return write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake", data={"tasks": TASKS})


def _sensor(config, cursor=None):
    context = dg.build_sensor_context(
        instance=dg.DagsterInstance.ephemeral(), cursor=cursor,
        resources={"prag_settings": PragSettingsResource(config_file=str(config))})
    return profile_history_sensor(context)


def _requests(result) -> list[dg.RunRequest]:
    return list(result.run_requests or []) if isinstance(result, dg.SensorResult) else []


def _docs_like(config, task: str, source_user: str, user: str, prefix: str, n: int = 3) -> list[dict]:
    """n history records for user copied from another user's documents (fresh ids; cycled if it has fewer)."""
    with connect(load_settings(config).duckdb_path, read_only=True) as con:
        rows = con.execute("SELECT date, fields_json FROM profile_documents WHERE task = ? AND user_id = ? "
                           "ORDER BY position", [task, source_user]).fetchall()
    assert rows, f"{source_user} has no documents"
    return [{"user_id": user, "id": f"{prefix}{i}", "date": rows[i % len(rows)][0],
             **json.loads(rows[i % len(rows)][1])} for i in range(n)]


def _ingest(config, task: str, records: list[dict], name: str) -> None:
    path = load_settings(config).home_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    with connect(load_settings(config).duckdb_path) as con:
        ingest_files(con, [path], task)


def _table(config, sql: str) -> pd.DataFrame:
    with duckdb.connect(str(load_settings(config).duckdb_path), read_only=True) as con:
        return con.execute(sql).df()


def _run(config, request: dg.RunRequest, selection=INCREMENTAL):
    """Execute a run request in-process, as the daemon would (same selection, partition and tags)."""
    from prag_assets.definitions import defs

    tags = dict(request.tags)
    if request.partition_key:
        tags["dagster/partition"] = request.partition_key
    return dg.materialize(list(defs.assets) + list(defs.asset_checks), selection=selection, tags=tags,
                          resources=default_resources(config_file=str(config)), raise_on_error=False)


def _checks(result) -> dict[str, bool]:
    return {e.event_specific_data.check_name: e.event_specific_data.passed
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def test_sensor_launches_one_run_per_batch_and_none_without_changes(config):
    """Nothing changed: no run. Two users in LaMP-2 plus a drop-folder file for LaMP-3: exactly one run."""
    first = _sensor(config)
    assert _requests(first) == [] and json.loads(first.cursor) == {"files": {}, "seq": {}}
    _ingest(config, "LaMP-2", _docs_like(config, "LaMP-2", "u0003", "u0000", "h")
            + _docs_like(config, "LaMP-2", "u0004", "brand-new", "n"), "batch1.json")
    inbox = inbox_dir(load_settings(config).home_path, "LaMP-3")
    inbox.mkdir(parents=True)
    (inbox / "drop.json").write_text(json.dumps(_docs_like(config, "LaMP-3", "u0001", "u0002", "d")), "utf-8")
    result = _sensor(config, first.cursor)
    (request,) = _requests(result)
    assert request.tags[RANGE_START] == "LaMP-2" and request.tags[RANGE_END] == "LaMP-3"
    assert request.tags["prag/changed_users"] == "2" and request.tags["prag/inbox_files"] == "1"
    cursor = json.loads(result.cursor)
    assert cursor["seq"] == {"LaMP-2": 6} and list(cursor["files"]) == ["LaMP-3/drop.json"]
    again = _sensor(config, result.cursor)  # same state: nothing new since the cursor
    assert _requests(again) == [] and json.loads(again.cursor) == cursor

    run = _run(config, request)
    assert run.success and all(_checks(run).values())
    after = _sensor(config, result.cursor)  # the run's own ingestion is already applied: no new run
    assert _requests(after) == [] and json.loads(after.cursor)["seq"] == {"LaMP-2": 6, "LaMP-3": 9}
    assert json.loads(after.cursor)["files"] == {}


def test_single_task_change_requests_one_partition(config):
    """Changes in one task only: a single-partition run request."""
    _ingest(config, "LaMP-3", _docs_like(config, "LaMP-3", "u0005", "u0006", "x"), "b.json")
    (request,) = _requests(_sensor(config))
    assert request.partition_key == "LaMP-3" and RANGE_START not in request.tags
    assert request.job_name in (None, incremental_update_job.name)


def test_sensor_waits_while_a_run_is_in_progress(config):
    """A queued or running run holds back the sensor (one DuckDB writer) without moving the cursor."""
    _ingest(config, "LaMP-2", _docs_like(config, "LaMP-2", "u0003", "u0000", "h"), "b.json")
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.utils import make_new_run_id

    instance = dg.DagsterInstance.ephemeral()
    run = DagsterRun(job_name="__ASSET_JOB", run_id=make_new_run_id(), status=dg.DagsterRunStatus.STARTED)
    instance.add_run(run)
    resources = {"prag_settings": PragSettingsResource(config_file=str(config))}
    result = profile_history_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(result, dg.SkipReason) and "in progress" in result.skip_message


def test_incremental_update_touches_only_changed_users(config):
    """Changed and new users are updated and clustered; every other user's rows stay exactly as they were."""
    before = {t: _table(config, f"SELECT * FROM {t} WHERE task = 'LaMP-2' ORDER BY ALL") for t in USER_TABLES}
    similar_before = _table(config, "SELECT * FROM similar_users WHERE task = 'LaMP-2'")
    _ingest(config, "LaMP-2", _docs_like(config, "LaMP-2", "u0003", "u0000", "h", 4)
            + _docs_like(config, "LaMP-2", "u0004", "brand-new", "n"), "b.json")
    run = _run(config, _requests(_sensor(config))[0])
    assert run.success and _checks(run) == {"every_user_one_cluster": True, "neighbours_in_same_cluster": True,
                                            "inbox_files_valid": True}
    recorded = {(e.asset_key.to_user_string(), e.partition) for e in run.get_asset_materialization_events()}
    assert {(t, "LaMP-2") for t in ("profile_documents", "document_embeddings", "user_embeddings", "user_clusters",
                                    "similar_users")} <= recorded  # the rewritten tables' partitions, for Dagster
    changed = {"u0000", "brand-new"}
    for table, old in before.items():
        new = _table(config, f"SELECT * FROM {table} WHERE task = 'LaMP-2' ORDER BY ALL")
        keep_old, keep_new = old[~old["user_id"].isin(changed)], new[~new["user_id"].isin(changed)]
        pd.testing.assert_frame_equal(keep_old.reset_index(drop=True), keep_new.reset_index(drop=True))
    clusters = _table(config, "SELECT user_id, count(*) n, min(cluster) c FROM user_clusters WHERE task = 'LaMP-2' "
                              "GROUP BY user_id")
    assert (clusters["n"] == 1).all() and (clusters["c"] >= 0).all() and changed <= set(clusters["user_id"])
    docs = _table(config, "SELECT * FROM document_embeddings WHERE task = 'LaMP-2' AND user_id = 'u0000' "
                          "ORDER BY position")
    user = _table(config, "SELECT * FROM user_embeddings WHERE task = 'LaMP-2' AND user_id = 'u0000'")
    assert len(docs) == len(before["profile_documents"].query("user_id == 'u0000'")) + 4
    assert docs["position"].tolist() == list(range(len(docs))) and int(user["n_docs"][0]) == len(docs)
    np.testing.assert_allclose(np.asarray(user["embedding"][0]), np.stack(docs["embedding"]).mean(axis=0), atol=1e-5)
    log = _table(config, "SELECT * FROM incremental_updates")
    assert set(log["user_id"]) == changed and log["neighbours_refreshed"].all()
    assert set(log["reference"]) == {"model"}  # the stored fit with its prediction data, no refit
    assert set(_table(config, "SELECT DISTINCT fit_version FROM user_clusters WHERE task = 'LaMP-2'")["fit_version"]) \
        == set(_table(config, "SELECT fit_version FROM cluster_models WHERE task = 'LaMP-2'")["fit_version"])
    # similar-user lists change only inside the clusters the changed users left or joined
    affected = set(log["old_cluster"].dropna().astype(int)) | set(log["new_cluster"])
    members = set(_table(config, "SELECT user_id FROM user_clusters WHERE task = 'LaMP-2' AND cluster IN "
                                 f"({', '.join(map(str, affected))})")["user_id"]) | changed
    similar_after = _table(config, "SELECT * FROM similar_users WHERE task = 'LaMP-2'")
    untouched = lambda df: df[~df["user_id"].isin(members)].sort_values(["user_id", "rank"]).reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(untouched(similar_before), untouched(similar_after))
    assert set(similar_after.query("user_id == 'brand-new'")["neighbour_id"]) - {"u0004"} <= members
    # ... and the refreshed lists are exactly what a full recomputation over the updated tables gives
    with connect(load_settings(config).duckdb_path) as con:
        full, _ = similar_user_rows(con, "LaMP-2", load_settings(config))
    order = ["user_id", "rank"]
    pd.testing.assert_frame_equal(
        full.to_pandas().sort_values(order).reset_index(drop=True)[["user_id", "neighbour_id", "rank"]],
        similar_after.sort_values(order).reset_index(drop=True)[["user_id", "neighbour_id", "rank"]])


def test_blocking_check_stops_the_neighbour_refresh(config, monkeypatch):
    """A user left without a cluster fails every_user_one_cluster: incremental_similar_users does not run."""
    import prag_assets.assets.history as history

    real = history.update_users

    def broken(con, task, *args, **kwargs):
        report = real(con, task, *args, **kwargs)
        con.execute("DELETE FROM user_clusters WHERE task = ? AND user_id = 'u0000'", [task])
        return report

    monkeypatch.setattr(history, "update_users", broken)
    _ingest(config, "LaMP-2", _docs_like(config, "LaMP-2", "u0003", "u0000", "h"), "b.json")
    run = _run(config, _requests(_sensor(config))[0])
    assert not run.success and _checks(run)["every_user_one_cluster"] is False
    assert not run.asset_materializations_for_node("incremental_similar_users")


def test_full_reclustering_reports_drift(config):
    """The schedule's run request re-clusters every task and records the drift against the previous clustering."""
    assert full_reclustering_schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert profile_history_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    context = dg.build_schedule_context(resources={"prag_settings": PragSettingsResource(config_file=str(config))},
                                        scheduled_execution_time=datetime(2026, 11, 23, 3, tzinfo=UTC))
    request = full_reclustering_schedule(context)
    assert request.tags[RANGE_START] == "LaMP-2" and request.tags[RANGE_END] == "LaMP-3"
    assert request.run_key == "recluster-20261123T0300"
    _ingest(config, "LaMP-2", _docs_like(config, "LaMP-2", "u0003", "u0000", "h", 6), "b.json")
    assert _run(config, _requests(_sensor(config))[0]).success
    run = _run(config, request, selection=["user_embeddings", "user_clusters", "similar_users", "cluster_drift",
                                           "cluster_state"])
    assert run.success and all(_checks(run).values())
    drift = _table(config, "SELECT * FROM cluster_drift ORDER BY computed_at")
    last = drift.groupby("task").tail(1).set_index("task")
    assert set(last.index) == set(TASKS) and (last["users_compared"] > 0).all()
    assert last["changed_share"].between(0, 1).all() and last["adjusted_rand"].between(-1, 1).all()
    assert last.loc["LaMP-3", "changed_share"] == 0 and last.loc["LaMP-3", "adjusted_rand"] == 1


def test_merge_documents_inserts_by_date_and_replaces_ids():
    """New documents go into the date order, an existing id is replaced, undated ones go last."""
    existing = pd.DataFrame({"doc_id": ["a", "b", "c"], "date": ["2020-01-01", "2021-01-01", None]})
    incoming = pd.DataFrame({"doc_id": ["n1", "b", "n2"], "date": ["2020-06-01", "2019-01-01", None]})
    merged = merge_documents(existing, incoming)
    assert merged["doc_id"].tolist() == ["b", "a", "n1", "c", "n2"] and merged["position"].tolist() == [0, 1, 2, 3, 4]


def test_assignment_reproduces_the_reference_clustering():
    """Refitting on the snapshot reproduces its labels; predicted users land in the right blob."""
    rng = np.random.default_rng(0)
    centres = np.array([[5.0, 0.0], [0.0, 5.0], [-5.0, -5.0]])
    ref = np.concatenate([c + 0.3 * rng.standard_normal((10, 2)) for c in centres])
    labels = np.repeat([7, 3, 9], 10)  # stored ids need not match HDBSCAN's numbering
    new = centres + 0.1
    out, agreement = assign_to_reference(ref, labels, new, ClusteringSettings(), next_id=10)
    assert agreement == 1.0 and out.tolist() == [7, 3, 9]


def test_drift_ignores_renumbering():
    """Same partition under other ids: nothing changed; one user moved: 1/n changed."""
    before = {"a": 0, "b": 0, "c": 1, "d": 1}
    assert clustering_drift(before, {"a": 5, "b": 5, "c": 2, "d": 2})["changed_share"] == 0
    moved = clustering_drift(before, {"a": 5, "b": 2, "c": 2, "d": 2, "e": 2})
    assert moved["changed_share"] == 0.25 and moved["new_users"] == 1 and moved["adjusted_rand"] < 1


def test_scan_changes_reads_the_drop_folder_without_dagster(tmp_path):
    """prag_models alone finds a new drop-folder file before any DuckDB file exists, and not again once in the cursor;
    a changed file (new size) is found again."""
    from prag_models.stages.history import HistoryCursor, scan_changes

    settings = load_settings(write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                                          data={"tasks": ["LaMP-2"]}))
    folder = inbox_dir(settings.home_path, "LaMP-2")
    folder.mkdir(parents=True)
    (folder / "batch.json").write_text("[]", encoding="utf-8")
    first = scan_changes(settings, HistoryCursor.parse(None))
    assert first.tasks == ["LaMP-2"] and first.files == {"LaMP-2": ["batch.json"]} and not first.users
    again = scan_changes(settings, HistoryCursor.parse(first.cursor.dump()))
    assert not again.tasks
    (folder / "batch.json").write_text("[ ]", encoding="utf-8")
    assert scan_changes(settings, HistoryCursor.parse(first.cursor.dump())).tasks == ["LaMP-2"]
