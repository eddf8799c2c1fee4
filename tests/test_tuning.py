"""Per-task tuning of ClusterRAG's knobs on train samples (docs/methods.md §3.9): in the graph, never on dev, its
values reach the retrieval stage, the untuned default stays as its own row, MLflow and the metadata carry it."""

from __future__ import annotations

import json

import duckdb
import pandas as pd
import pytest
from conftest import EVALUATED_DEV, EVALUATED_TASK, poison_dev, store_copy

from prag_models.config.settings import Settings, load_settings
from prag_models.evaluation.tuning import read_tuned, tune_task
from prag_models.stages.retrieval import clusterrag_rows

TASK = EVALUATED_TASK


@pytest.fixture
def graph(evaluated_graph):
    """The retrieval evaluation and everything upstream (tuned_settings included) for one task: the session's
    (tests/session_graphs.py `evaluated_graph`); (config, home, result)."""
    return evaluated_graph


def _settings(config) -> Settings:
    return load_settings(config)


def test_tuned_values_are_stored_logged_and_shown(graph) -> None:
    config, home, result = graph
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        tuned = read_tuned(con, TASK)
        n = con.execute("SELECT DISTINCT n_samples FROM tuned_settings WHERE task = ?", [TASK]).fetchall()
        n_train = con.execute("SELECT count(*) FROM lamp_samples WHERE task = ? AND split = 'train'", [TASK]).fetchone()
    # item_cf is not in this run's retrieval.methods: a method the run does not retrieve with is not tuned
    assert set(tuned) == {"clusterrag_collaborative", "clusterrag_community"}
    assert "clustering.similar_users" in tuned["clusterrag_collaborative"]
    assert n == [(min(n_train[0], 300),)]
    mat = [m for m in result.asset_materializations_for_node("tuned_settings")][0]
    assert "clusterrag_community" in mat.metadata["tuning"].value and "train score" in mat.metadata["tuning"].value
    # the chosen values' user clusters and their ARI against the demo's planted communities, per tuned method
    import re

    assert len(re.findall(r"\| \d+ \((-?[01]\.\d\d)\) \|$", mat.metadata["tuning"].value, re.M)) == 2
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], f"attributes.run_name = 'tuning-{TASK}'"
    )
    assert len(runs) == 1
    assert runs[0].data.params["clusterrag_collaborative.clustering.similar_users"] == json.dumps(
        tuned["clusterrag_collaborative"]["clustering.similar_users"]
    )
    assert len(client.get_metric_history(runs[0].info.run_id, "clusterrag_community.trial_score")) >= 2
    assert [a.path for a in client.list_artifacts(runs[0].info.run_id, "tuning")] == ["tuning/trials.csv"]


def test_the_default_keeps_its_own_row_with_a_paired_comparison(graph) -> None:
    _, home, _ = graph
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        methods = {m for (m,) in con.execute("SELECT DISTINCT method FROM lamp_retrieval_evaluation").fetchall()}
        pairs = con.execute(
            "SELECT method, baseline, n_samples FROM lamp_retrieval_comparisons WHERE baseline LIKE '%@default'"
        ).fetchall()
    assert {"clusterrag_community", "clusterrag_community@default", "clusterrag_collaborative@default"} <= methods
    assert {(m, b) for m, b, _ in pairs} >= {("clusterrag_community", "clusterrag_community@default")}
    assert all(n == EVALUATED_DEV for _, _, n in pairs)  # every dev sample


def test_the_search_never_reads_dev(graph, tmp_path) -> None:
    """Poisoning every dev sample's relevance and gold leaves the search, its scores and its samples unchanged."""
    config, home, _ = graph
    settings = _settings(config)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        before_values, before_trials, before = tune_task(con, TASK, settings)
        dev = con.execute("SELECT sample_id FROM lamp_samples WHERE task = ? AND split = 'dev'", [TASK]).fetchall()
        poison_dev(con, TASK)
        after_values, after_trials, after = tune_task(con, TASK, settings)
    assert dev and not set(before["sample_ids"]) & {str(s) for (s,) in dev}
    assert before["sample_ids"] == after["sample_ids"]
    assert before_values.equals(after_values)
    for m in before["methods"].values():  # a knob moves only on a train gain whose interval is above 0
        assert m["kept_default"] or m["best_train_gain"][1] > 0
    assert before_trials["score"].tolist()[:3] == after_trials["score"].tolist()[:3]


def test_the_time_budget_counts_trials_not_the_user_vectors_computed_once(graph, tmp_path, monkeypatch) -> None:
    """Computing a user similarity's vectors (taste: seconds on a real user base) is a one-time cost of the search,
    not of a trial: with it slower than the whole time budget every method still runs its max_trials (the demo's
    first search stopped after 2 trials on a loaded machine, so its chosen knobs depended on the load)."""
    import time

    import prag_models.users.taste as taste

    config, home, _ = graph
    settings = _settings(config)
    settings = settings.model_copy(update={"tuning": settings.tuning.model_copy(update={"budget_s": 1.0,
                                                                                          "max_trials": 5}),
                                           "retrieval": settings.retrieval.model_copy(
                                               update={"methods": [*settings.retrieval.methods, "item_cf"]})})
    real = taste.similarity_vectors

    def slow(*args, **kwargs):
        time.sleep(1.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(taste, "similarity_vectors", slow)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        _, _, stats = tune_task(con, TASK, settings)
    assert {m: s["trials"] for m, s in stats["methods"].items()} == {
        "clusterrag_collaborative": 5, "clusterrag_community": 5, "item_cf": 5}
    assert all(s["stopped_by"] == "max_trials" for s in stats["methods"].values())


def test_tuned_values_reach_the_retrieval_stage(graph, tmp_path) -> None:
    """A tuned neighbour count of 1 changes clusterrag_collaborative's rows and leaves @default the untuned ones."""
    config, home, _ = graph
    settings = _settings(config)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        con.execute("DELETE FROM tuned_settings")
        con.execute(
            "INSERT INTO tuned_settings (task, method, knob, value) VALUES "
            "(?, 'clusterrag_collaborative', 'clustering.similar_users', '1'), "
            "(?, 'clusterrag_collaborative', 'clustering.user_similarity', '\"content\"')", [TASK, TASK]
        )
        frame, stats = clusterrag_rows(con, TASK, settings)
        default_frame, _ = clusterrag_rows(con, TASK, settings.model_copy(
            update={"tuning": settings.tuning.model_copy(update={"enabled": False})}))  # fmt: skip
    assert stats["tuned"] == {"clusterrag_collaborative": {"clustering.similar_users": 1,
                                                           "clustering.user_similarity": "content"}}  # fmt: skip
    tuned = frame[frame["method"] == "clusterrag_collaborative"]
    untuned = frame[frame["method"] == "clusterrag_collaborative@default"]
    reference = default_frame[default_frame["method"] == "clusterrag_collaborative"]
    assert untuned["doc_id"].tolist() == reference["doc_id"].tolist()
    assert "clusterrag_community@default" not in set(frame["method"])  # only tuned methods get a default row
    # one neighbour: every sample's documents come from a single other user (the default has 2 neighbours)
    assert tuned.groupby("sample_id")["source_user_id"].nunique().max() == 1
    assert reference.groupby("sample_id")["source_user_id"].nunique().max() == 2


def test_a_tuned_minimum_cluster_size_reclusters_for_retrieval_and_its_check(graph, tmp_path) -> None:
    """HDBSCAN's minimum cluster size is a knob: at the configured size the user_clusters table's clusters, at another
    a fit of the same vectors; clusterrag_community's tuned rows draw from the re-clustered pool and the retrieval
    check accepts them (it judged them by user_clusters before)."""
    from prag_models.methods.knobs import UserSpace, method_space, with_knobs
    from prag_models.stages.table_rules import retrieval_extra

    config, home, _ = graph
    settings = _settings(config)
    assert "clustering.min_cluster_size" in method_space(settings, "clusterrag_community")
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        space = UserSpace(con, TASK, settings)
        table = dict(con.execute("SELECT user_id, cluster FROM user_clusters WHERE task = ?", [TASK]).fetchall())
        assert space.groups(settings) == table
        bigger = with_knobs(settings, {"clustering.min_cluster_size": 16})
        groups = space.groups(bigger)
        assert len(set(groups.values())) < len(set(table.values()))  # fewer, larger clusters
        con.execute("DELETE FROM tuned_settings")
        con.execute(
            "INSERT INTO tuned_settings (task, method, knob, value) VALUES "
            "(?, 'clusterrag_community', 'clustering.min_cluster_size', '16'), "
            "(?, 'clusterrag_community', 'clustering.community_top_n', '0')", [TASK, TASK]
        )  # fmt: skip
        frame, stats = clusterrag_rows(con, TASK, settings)
        con.execute("DELETE FROM clusterrag_retrievals WHERE task = ?", [TASK])
        con.execute("INSERT INTO clusterrag_retrievals BY NAME SELECT * FROM frame")
        problems = retrieval_extra("clusterrag_retrievals")(con, TASK, frame, settings)
    assert stats["tuned"]["clusterrag_community"]["clustering.min_cluster_size"] == 16
    tuned = frame[frame["method"] == "clusterrag_community"]
    assert (tuned["source_user_id"].map(groups) == tuned["user_id"].map(groups)).all()
    assert not (tuned["source_user_id"].map(table) == tuned["user_id"].map(table)).all()  # the pool did change
    assert problems == [], problems


def test_the_tuned_settings_check_refuses_values_outside_the_search_space(graph, tmp_path) -> None:
    """The graph's tuned_settings pass the check; a minimum cluster size of 0, an unknown knob or a chosen score below
    the default's is named."""
    from prag_models.stages.table_rules import tuned_settings_extra

    config, home, _ = graph
    settings = _settings(config)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        rows = con.execute("SELECT * FROM tuned_settings WHERE task = ?", [TASK]).df()
        assert tuned_settings_extra(con, TASK, rows, settings) == []
        bad = rows.copy()
        size = bad["knob"] == "clustering.min_cluster_size"
        bad.loc[size, "value"] = "0"
        bad.loc[0, "score"] = bad.loc[0, "default_score"] - 0.1
        extra = bad.iloc[[0]].assign(knob="clustering.no_such_knob")
        problems = tuned_settings_extra(con, TASK, pd.concat([bad, extra]), settings)
    text = " ".join(problems)
    assert "clustering.min_cluster_size = 0" in text and "clustering.no_such_knob" in text
    assert "below the default" in text
