"""The CFRAG assets materialized in-process for one task on a tiny demo: tables, blocking checks, MLflow versions,
and feedback labels that survive an interrupted run."""

from __future__ import annotations

import dagster as dg
import duckdb
import pytest
from conftest import materialize_graph, partition_metadata, write_config

from prag_models.config.settings import load_settings
from prag_models.methods.cfrag.variants import CFRAG_METHODS

TASK = "LaMP-2"
#: Fast CFRAG settings: a 1-layer reranker on short pairs; feedback labels for 8 of the 12 train samples (6 similar
#: users x 1 doc each), the other 4 test the kept epoch on the truth.
# reranker_user_rank = 0: the paper's MLP reranker. With the default user × pair term the 2-sample validation KL of
# this 8-sample world rises from the first epoch (the term fits the labelled samples' users; the gate then keeps the
# initialisation); that the term learns from a teacher with something to teach: benchmarks/cfrag_teacher.py.
CFRAG = {"epochs": 10, "reranker_layers": 1, "reranker_max_length": 64, "max_feedback_samples": 8,
         "reranker_user_rank": 0}
CFRAG_CHECKS = {
    "cfrag_user_encoder:encoder_trained",
    "cfrag_user_embeddings:cfrag_user_vectors_valid",
    "cfrag_similar_users:cfrag_neighbours_valid",
    "feedback_labels:feedback_not_degenerate",
    "cfrag_retriever:retriever_trained",
    "cfrag_reranker:reranker_trained",
    "cfrag_retrievals:retrieved_docs_allowed",
}
KINDS = {
    "user_encoder": "prag-user-encoder-LaMP-2",
    "retriever": "prag-retriever-LaMP-2",
    "reranker": "prag-reranker-LaMP-2",
    "reranker_no_eu": "prag-reranker-no-eu-LaMP-2",
}


@pytest.fixture
def cfrag_config(tmp_path):
    """One task, the fake generator, the real packaged embedder."""
    return write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                        data={"tasks": [TASK]}, cfrag=CFRAG)


def _checks(result) -> dict[str, bool]:
    return {
        f"{e.event_specific_data.asset_check_key.asset_key.to_user_string()}:{e.event_specific_data.check_name}":
        e.event_specific_data.passed
        for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def _upto(asset: str) -> dg.AssetSelection:
    return dg.AssetSelection.assets(asset).upstream()


def _db(config):
    return duckdb.connect(str(load_settings(config).duckdb_path), read_only=True)


def test_cfrag_assets_tables_checks_and_registered_versions(cfrag_config) -> None:
    from prag_models.mlops import registry

    result = materialize_graph(cfrag_config, [TASK], selection=_upto("cfrag_retrievals"))
    assert result.success
    checks = _checks(result)
    assert set(checks) >= CFRAG_CHECKS and all(checks.values()), checks

    with _db(cfrag_config) as con:
        n_users = con.execute("SELECT count(DISTINCT user_id) FROM lamp_samples").fetchone()[0]
        n_dev = con.execute("SELECT count(*) FROM lamp_samples WHERE split = 'dev'").fetchone()[0]
        n_train = con.execute("SELECT count(*) FROM lamp_samples WHERE split = 'train'").fetchone()[0]
        assert con.execute("SELECT count(*) FROM cfrag_user_embeddings").fetchone()[0] == n_users
        neighbours = con.execute("SELECT user_id, neighbour_id, rank FROM cfrag_similar_users").df()
        labels = con.execute("SELECT * FROM feedback_labels").df()
        retrieved = con.execute("SELECT * FROM cfrag_retrievals").df()
        models = con.execute("SELECT * FROM cfrag_models ORDER BY kind").df()
    c = load_settings(cfrag_config).cfrag
    assert (c.top_m_users, c.docs_per_user) == (6, 1)  # the authors' m = 6 (self + 5), one labelled doc per user
    assert len(neighbours) == c.top_m_users * n_users
    assert (neighbours[neighbours["rank"] == 1]["user_id"] == neighbours[neighbours["rank"] == 1]["neighbour_id"]).all()
    # 8 of the 12 train samples (cfrag.max_feedback_samples) x 6 similar users x 1 doc, each a gold log-likelihood
    assert n_train == 12 and len(labels) == 8 * 6 and labels["sample_id"].nunique() == 8
    assert (labels["score"] < 0).all() and set(labels["generator_id"]) == {"fake:v1"}
    spread = labels.groupby("sample_id")["score"].agg(lambda x: x.max() - x.min())
    assert (spread > 0).mean() > 0.5  # gold log-likelihood labels discriminate between candidates
    consent = retrieved[retrieved["method"].str.contains("@")]  # CFRAG with half the users opted out
    assert set(consent["method"]) == {"cfrag@consent50"} and consent["sample_id"].nunique() == n_dev
    retrieved = retrieved[~retrieved["method"].str.contains("@")]
    assert set(retrieved["method"]) == set(CFRAG_METHODS)
    assert len(retrieved) == len(CFRAG_METHODS) * n_dev * 2  # final k = retrieval.k = 2
    own = retrieved[retrieved["method"] == "cfrag_no_user_retrieval"]
    assert (own["source_user_id"] == own["user_id"]).all()

    # one registered version per model, champion + challenger, loaded back by the evaluation stage by number
    target = load_settings(cfrag_config)
    target = registry.MlflowTarget(target.mlflow_uri, target.mlflow.experiment, str(target.mlflow_artifacts_path))
    assert dict(zip(models["kind"], models["registered_name"], strict=True)) == KINDS
    for row in models.itertuples():
        assert row.version == 1
        assert registry.model_aliases(target, row.registered_name) == {"champion": 1, "challenger": 1}
        assert registry.run_metric_history(target, row.run_id) == pytest.approx(list(row.loss_curve))
    # training trains: per-epoch validation KL and relevance NDCG logged; the reranker's validation KL falls; the
    # kept epoch is chosen on the demo's truth and is never below the untrained initialisation (epoch 0)
    for kind in ("retriever", "reranker"):
        meta = partition_metadata(result, f"cfrag_{kind}")[TASK]  # the rerankers' task partition: one block a model
        fit = meta if kind == "retriever" else {k[9:]: v for k, v in meta.items() if k.startswith("reranker/")}
        assert fit["epochs_run"] >= 1 and fit["validation_samples"] == 2 and fit["selected_by"] == "relevance"
        assert fit["truth_validation_samples"] == 4  # the 4 unlabelled train samples test the kept epoch
        assert fit["val_relevance_best"] >= fit["val_relevance_init"]
        assert fit["improved"] == (fit["val_relevance_best"] > fit["val_relevance_init"])
        run_id = models.set_index("kind").loc[kind, "run_id"]
        assert len(registry.run_metric_history(target, run_id, "val_kl")) == fit["epochs_run"] + 1
        assert len(registry.run_metric_history(target, run_id, "val_relevance_ndcg")) == fit["epochs_run"] + 1
    reranker_run = models.set_index("kind").loc["reranker", "run_id"]
    # the optimiser works: the KL on the training samples falls (on this world's 2 validation samples the fake
    # teacher's KL can rise from the first epoch, which is what selection and the gate are for)
    train_kl = registry.run_metric_history(target, reranker_run, "train_loss")
    assert min(train_kl[1:]) < train_kl[0], train_kl
    # the champion reranker, loaded from MLflow by alias, gives different documents different scores (no collapse)
    import numpy as np

    from prag_models.methods.cfrag.reranker import rerank_scores

    champion, _ = registry.load_registered(target, KINDS["reranker"], alias="champion")
    with _db(cfrag_config) as con:
        docs = con.execute("SELECT text FROM profile_documents ORDER BY user_id, position LIMIT 6").fetchall()
    texts = [t for (t,) in docs]
    users = np.ones((6, champion.user_dim), dtype=np.float32)
    scores = rerank_scores(champion, ["a heist movie"] * 6, texts, users, np.linspace(0.1, 0.3, 6, dtype=np.float32))
    assert len(set(np.round(scores, 6))) == 6, scores
    used = partition_metadata(result, "cfrag_retrievals")[TASK]
    assert {k: used[f"models/{k}"] for k in KINDS if k != "user_encoder"} == {
        k: f"{KINDS[k]}/1" for k in ("retriever", "reranker", "reranker_no_eu")}
    assert partition_metadata(result, "cfrag_user_embeddings")[TASK]["encoder"] == f"{KINDS['user_encoder']}/1"
    assert (load_settings(cfrag_config).home_path / "models" / TASK / "user_encoder" / "model.safetensors").is_file()

    # benchmarks/cfrag_learning_curve.py (the README's evidence that training has little to teach) runs on this home
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("learning_curve", ROOT / "benchmarks" / "cfrag_learning_curve.py")
    learning_curve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learning_curve)
    with _db(cfrag_config) as con:
        values, held = learning_curve.curve(con, TASK, load_settings(cfrag_config), epochs=2)
    assert held == 4 and len(values) == 3 and all(0.0 <= v <= 1.0 for v in values)

    # retraining registers version 2 as challenger; champion stays on 1; the feedback labels are all reused
    again = materialize_graph(cfrag_config, [TASK], selection=dg.AssetSelection.assets("feedback_labels",
                                                                                       "cfrag_retriever"))
    assert again.success and all(_checks(again).values())
    stats = partition_metadata(again, "feedback_labels")[TASK]
    assert stats["reused"] == len(labels) and stats["labelled_now"] == 0
    assert registry.model_aliases(target, KINDS["retriever"]) == {"champion": 1, "challenger": 2}
    assert partition_metadata(again, "cfrag_retriever")[TASK]["registered"] == f"{KINDS['retriever']}/2"


@pytest.fixture
def metric_config(tmp_path):
    """As cfrag_config, with the paper's feedback signal: the task metric of a generated answer."""
    return write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                        data={"tasks": [TASK]}, cfrag={**CFRAG, "feedback_signal": "metric"})


def test_interrupted_feedback_keeps_finished_batches(metric_config, monkeypatch) -> None:
    cfrag_config = metric_config
    from prag_models.llm.fake import FakeGenerator

    assert materialize_graph(cfrag_config, [TASK], selection=_upto("cfrag_similar_users")).success
    original = FakeGenerator.generate
    calls = {"n": 0}

    def flaky(self, prompts, max_new_tokens):
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("generator died")
        return original(self, prompts, max_new_tokens)

    monkeypatch.setattr(FakeGenerator, "generate", flaky)
    only_feedback = dg.AssetSelection.assets("feedback_labels")
    failed = materialize_graph(cfrag_config, [TASK], selection=only_feedback, raise_on_error=False)
    assert not failed.success
    batch = load_settings(cfrag_config).generator.batch_size
    with _db(cfrag_config) as con:
        kept = con.execute("SELECT sample_id, doc_id, source_user_id, output FROM feedback_labels").df()
    assert len(kept) == batch

    monkeypatch.setattr(FakeGenerator, "generate", original)
    counted = {"prompts": 0}

    def counting(self, prompts, max_new_tokens):
        counted["prompts"] += len(prompts)
        return original(self, prompts, max_new_tokens)

    monkeypatch.setattr(FakeGenerator, "generate", counting)
    rerun = materialize_graph(cfrag_config, [TASK], selection=only_feedback)
    assert rerun.success
    stats = partition_metadata(rerun, "feedback_labels")[TASK]
    assert stats["reused"] == batch and stats["labelled_now"] == stats["labels"] - batch
    assert counted["prompts"] == stats["labelled_now"]  # only the missing labels were generated
    with _db(cfrag_config) as con:
        labels = con.execute("SELECT sample_id, doc_id, source_user_id, output FROM feedback_labels").df()
    assert len(labels) == stats["labels"] and not labels.duplicated(["sample_id", "doc_id", "source_user_id"]).any()
    assert kept.merge(labels).shape[0] == batch  # the finished batch is unchanged


def test_all_degenerate_feedback_warns_without_blocking(metric_config, monkeypatch) -> None:
    """An LLM that answers the same whatever the doc: the check fails with WARN severity, training still runs."""
    cfrag_config = metric_config
    from prag_models.llm.fake import FakeGenerator

    monkeypatch.setattr(FakeGenerator, "generate", lambda self, prompts, max_new_tokens: ["comedy"] * len(prompts))
    result = materialize_graph(cfrag_config, [TASK], selection=_upto("cfrag_retriever"))
    assert result.success
    evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    evaluation = next(e for e in evaluations if e.check_name == "feedback_not_degenerate")
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.partition == TASK and evaluation.metadata["labels"].value["degenerate_share"] == 1.0
    assert partition_metadata(result, "cfrag_retriever")[TASK]["registered"] == f"{KINDS['retriever']}/1"
