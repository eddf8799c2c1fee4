"""CFRAG's knobs tuned per task on train samples before its training (docs/methods.md §2.9): stored, checked and
logged; the similar users, the registered versions' inference settings and the retrieval use them; the untuned
row stays as cfrag@default; the search never reads dev."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml
from conftest import materialize_graph, poison_dev, store_copy, write_config

from prag_models.config.settings import load_settings
from prag_models.evaluation.tuning import tune_cfrag
from prag_models.methods.cfrag.tables import similar_user_lists
from prag_models.methods.cfrag.tuning import read_cfrag_tuned, tuned_cfrag_settings
from prag_models.methods.knobs import CFRAG_KNOB_SPACE

TASK = "LaMP-2"
CFRAG = {"epochs": 4, "reranker_layers": 1, "reranker_max_length": 64, "max_feedback_samples": 8}


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory):
    """CFRAG up to its retrieval on a world where each user's own history is what matters (no_community)."""
    tmp = tmp_path_factory.mktemp("cfrag_tuning")
    home = tmp / "home"
    data = {"demo_users": 24, "demo_communities": 3, "demo_dev_samples": 8, "tasks": [TASK],
            "demo_family": "no_community"}  # fmt: skip
    config = write_config(tmp / "prag.toml", home, generator_backend="fake", data=data, cfrag=CFRAG,
                          tuning={"enabled": True, "budget_s": 20.0, "max_trials": 16})  # fmt: skip
    result = materialize_graph(config, [TASK], selection=dg.AssetSelection.assets("cfrag_retrievals").upstream())
    assert result.success
    return config, home, result


def test_tuned_values_are_stored_checked_and_logged(graph) -> None:
    config, home, result = graph
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        tuned = read_cfrag_tuned(con, TASK)
        scores = con.execute("SELECT score, default_score, n_trials FROM cfrag_tuned_settings").fetchall()
    assert set(tuned) == set(CFRAG_KNOB_SPACE)
    assert all(tuned[k] in CFRAG_KNOB_SPACE[k] for k in tuned)
    assert all(s >= d and n >= 2 for s, d, n in scores)
    checks = {e.event_specific_data.check_name: e.event_specific_data.passed for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"}  # fmt: skip
    assert checks["cfrag_tuned_settings_valid"] and checks["cfrag_neighbours_valid"]
    mat = list(result.asset_materializations_for_node("cfrag_tuned_settings"))[0]
    assert "| cfrag |" in mat.metadata["tuning"].value
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], f"attributes.run_name = 'cfrag-tuning-{TASK}'"
    )
    assert len(runs) == 1
    assert runs[0].data.params["cfrag.cfrag.top_m_users"] == json.dumps(tuned["cfrag.top_m_users"])


def test_neighbours_and_registered_versions_use_the_tuned_values(graph) -> None:
    config, home, _ = graph
    import mlflow

    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        tuned = read_cfrag_tuned(con, TASK)
        widths = {n for (n,) in con.execute("SELECT count(*) FROM cfrag_similar_users GROUP BY user_id").fetchall()}
        name, version = con.execute("SELECT registered_name, version FROM cfrag_models WHERE kind = 'retriever'"
                                    ).fetchone()  # fmt: skip
    assert widths == {tuned["cfrag.top_m_users"]}
    uri = f"sqlite:///{home / 'mlflow.db'}"  # a client of its own: a global tracking URI would leak into later tests
    source = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version_download_uri(name, version)
    folder = mlflow.artifacts.download_artifacts(source, tracking_uri=uri)
    stored = yaml.safe_load(Path(folder, "MLmodel").read_text())["flavors"]["python_function"]["config"]
    served = stored["settings"]["cfrag"]
    for knob, value in tuned.items():  # serving answers with the values the evaluation used
        assert served[knob.split(".")[1]] == value


def test_cfrag_default_row_uses_the_configured_knobs(graph) -> None:
    config, home, _ = graph
    settings = load_settings(config)
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT method, user_id, sample_id, source_user_id FROM cfrag_retrievals").df()
        default_users = similar_user_lists(con, TASK, settings)
        tuned_users = similar_user_lists(con, TASK, tuned_cfrag_settings(con, TASK, settings))
    default = rows[rows["method"] == "cfrag@default"]
    assert len(default) and default["sample_id"].nunique() == rows[rows["method"] == "cfrag"]["sample_id"].nunique()
    assert all(r.source_user_id in default_users[r.user_id] for r in default.itertuples())
    assert all(len(v) == settings.cfrag.top_m_users for v in default_users.values())
    tuned = rows[rows["method"] == "cfrag"]
    assert all(r.source_user_id in tuned_users[r.user_id] for r in tuned.itertuples())


def test_the_search_never_reads_dev(graph, tmp_path) -> None:
    """Poisoning every dev sample's relevance and gold leaves CFRAG's search and its scores unchanged."""
    config, home, _ = graph
    settings = load_settings(config)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        before_values, before_trials, before = tune_cfrag(con, TASK, settings)
        poison_dev(con, TASK)
        after_values, after_trials, _ = tune_cfrag(con, TASK, settings)
    assert before["train_samples"] > 0
    assert before_values.equals(after_values)
    assert before_trials["score"].tolist()[:3] == after_trials["score"].tolist()[:3]
    m = before["methods"]["cfrag"]  # a knob moves only on a train gain whose interval is above 0
    assert m["kept_default"] or m["best_train_gain"][1] > 0


def test_the_searched_cfrag_is_cfrag_inference_before_training(graph) -> None:
    """The search's fast path (cosines computed once) retrieves what prag_models.methods.cfrag.inference retrieves
    with the untrained retriever, for several knob values."""
    import numpy as np
    import torch

    from prag_models.evaluation.tuning import train_samples
    from prag_models.methods.cfrag import inference
    from prag_models.methods.cfrag.feedback import projection_targets
    from prag_models.methods.cfrag.retriever import PersonalizedRetriever, init_projection
    from prag_models.methods.cfrag.tuning import UntrainedCfrag
    from prag_models.methods.cfrag.variants import Variant
    from prag_models.methods.knobs import with_knobs
    from prag_models.methods.task_tables import read_profile_index
    from prag_models.storage.store import column_to_matrix, read_rows

    config, home, _ = graph
    settings = load_settings(config)
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        index = read_profile_index(con, TASK, default_share=True)
        samples = train_samples(con, TASK, index.vectors.shape[1], 0, 0)
        users = read_rows(con, "cfrag_user_embeddings", {"task": TASK})
        e_u = dict(zip(users["user_id"], column_to_matrix(users["embedding"].tolist()), strict=True))
        queries = [inference.CfragQuery(s.sample_id, s.user_id, "", np.asarray(s.embedding, dtype=np.float32),
                                        e_u[s.user_id]) for s in samples.itertuples()]  # fmt: skip
        e, z = projection_targets(con, TASK)
        fast = UntrainedCfrag(index, queries, settings, e, z)
        for values in ({}, {"cfrag.top_m_users": 2, "cfrag.alpha": 0.7, "cfrag.inference_docs_per_user": 8},
                       {"cfrag.top_m_users": 4, "cfrag.alpha": 0.3, "cfrag.user_vectors": "mean"}):  # fmt: skip
            s = with_knobs(settings, values)
            neighbours = similar_user_lists(con, TASK, s)
            torch.manual_seed(s.cfrag.seed)
            model = PersonalizedRetriever(e.shape[1], z.shape[1], s.cfrag.alpha, s.cfrag.retriever_projection)
            init_projection(model, e, z)
            slow = inference.retrieve(index, queries, {"encoder": neighbours}, {"retriever": model}, s,
                                      [Variant("cfrag", "encoder", "trained", "initial")])  # fmt: skip
            got = fast.retrieve(neighbours, s)
            for q, docs in zip(queries, got, strict=True):
                assert [d.doc_id for d in docs] == [d.doc_id for d in slow[(q.sample_id, "cfrag")]], values
                assert np.allclose([d.score for d in docs], [d.score for d in slow[(q.sample_id, "cfrag")]],
                                   atol=1e-5)  # fmt: skip
