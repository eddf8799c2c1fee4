"""MLflow registry round trips for the CFRAG models: log + register + load by version or alias, scores identical."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prag_models.config.settings import CfragSettings  # noqa: E402
from prag_models.methods.cfrag.retriever import PersonalizedRetriever, retriever_scores  # noqa: E402
from prag_models.methods.cfrag.serialization import save_model, state_dicts_equal  # noqa: E402
from prag_models.mlops import registry  # noqa: E402


@pytest.fixture
def target(tmp_path) -> registry.MlflowTarget:
    """A sqlite tracking/registry store and a local artifact folder under tmp."""
    return registry.MlflowTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "test", str(tmp_path / "artifacts"))


def _retriever(seed: int) -> PersonalizedRetriever:
    torch.manual_seed(seed)
    model = PersonalizedRetriever(user_dim=6, doc_dim=5, alpha=0.3)
    model.eval()
    return model


def _inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(3, 5)), rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 6))


def _register(target, tmp_path, model, name: str, curve: list[float], tag: str = "v"):
    folder = save_model(model, tmp_path / f"saved-{name}-{len(registry.version_numbers(target, name))}")
    return registry.log_and_register(target, folder, name, {"alpha": 0.3, "seed": 1}, curve, tag, {"task": "LaMP-2"})


def test_log_register_load_round_trip_scores_identical(target, tmp_path) -> None:
    model = _retriever(1)
    curve = [1.0, 0.7, 0.5]
    entry = _register(target, tmp_path, model, "prag-retriever-LaMP-2", curve, "abc123")
    assert entry.version == 1 and set(entry.aliases) == {"champion", "challenger"}

    loaded, got = registry.load_registered(target, "prag-retriever-LaMP-2", version=1)
    assert got.version == 1 and got.run_id == entry.run_id
    q, d, u = _inputs()
    assert np.array_equal(retriever_scores(model, q, d, u), retriever_scores(loaded, q, d, u))

    # the run holds the training record: params, loss by step, final loss, data version, the safetensors folder
    client = registry.make_client(target)
    run = client.get_run(entry.run_id)
    assert run.data.params["alpha"] == "0.3" and run.data.tags["data_version"] == "abc123"
    assert run.data.metrics["final_loss"] == 0.5
    assert registry.run_metric_history(target, entry.run_id) == curve
    # the model is the run's LoggedModel (the experiment's Models tab) and the version's source
    outputs = run.outputs.model_outputs
    assert len(outputs) == 1
    logged = client.get_logged_model(outputs[0].model_id)
    assert logged.source_run_id == entry.run_id and str(logged.status) in ("READY", "LoggedModelStatus.READY")
    assert entry.source == logged.artifact_location
    files = {f.path for f in client.list_logged_model_artifacts(logged.model_id)}
    assert files == {"config.json", "model.safetensors"}
    assert logged.tags["mlflow.modelVersions"] == '[{"name": "prag-retriever-LaMP-2", "version": 1}]'
    assert client.get_model_version("prag-retriever-LaMP-2", "1").tags["data_version"] == "abc123"


def test_aliases_champion_stays_challenger_moves(target, tmp_path) -> None:
    name = "prag-retriever-LaMP-3"
    first, second = _retriever(1), _retriever(2)
    _register(target, tmp_path, first, name, [1.0, 0.9])
    entry = _register(target, tmp_path, second, name, [1.0, 0.8])
    assert entry.version == 2 and entry.aliases == ("challenger",)
    assert registry.model_aliases(target, name) == {"champion": 1, "challenger": 2}
    q, d, u = _inputs()
    champion, info = registry.load_registered(target, name, alias="champion")
    challenger, _ = registry.load_registered(target, name, alias="challenger")
    assert info.version == 1 and "champion" in info.aliases
    assert np.array_equal(retriever_scores(champion, q, d, u), retriever_scores(first, q, d, u))
    assert np.array_equal(retriever_scores(challenger, q, d, u), retriever_scores(second, q, d, u))
    assert registry.version_numbers(target, name) == [1, 2]
    with pytest.raises(ValueError):
        registry.get_version(target, name)


def test_loading_never_unpickles(target, tmp_path, monkeypatch) -> None:
    """A cut-down reranker goes through the registry with torch.load / pickle disabled: safetensors only."""
    import pickle

    from prag_models.methods.cfrag.reranker import rerank_scores
    from prag_models.methods.cfrag.training_set import new_reranker

    model = new_reranker(CfragSettings(reranker_layers=1, reranker_max_length=32), user_dim=4)
    assert len(model.encoder.encoder.layer) == 1
    entry = _register(target, tmp_path, model, "prag-reranker-LaMP-2", [0.4])

    def refuse(*args, **kwargs):
        raise AssertionError("a model load must not unpickle")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    loaded, _ = registry.load_registered(target, entry.name, version=entry.version)
    queries, docs = ["a query", "another query"], ["some document text", "more text here"]
    users, base = np.ones((2, 4), dtype=np.float32), np.array([0.3, 0.1], dtype=np.float32)
    assert len(loaded.encoder.encoder.layer) == 1 and loaded.residual
    assert np.array_equal(
        rerank_scores(model, queries, docs, users, base), rerank_scores(loaded, queries, docs, users, base)
    )


def test_data_version_is_stable_and_sensitive() -> None:
    import pandas as pd

    frame = pd.DataFrame({"sample_id": ["1", "2"], "score": [0.5, 1.0]})
    assert registry.data_version(frame, "enc/1") == registry.data_version(frame.copy(), "enc/1")
    assert registry.data_version(frame, "enc/1") != registry.data_version(frame, "enc/2")
    assert registry.data_version(frame) != registry.data_version(frame.assign(score=[0.5, 0.0]))
    assert registry.registered_name("user_encoder", "LaMP-7") == "prag-user-encoder-LaMP-7"


# ---------------------------------------------------------------- pyfunc packaging, descriptions, bundles


def _register_pyfunc(target, tmp_path, model, kind: str, task: str = "LaMP-2"):
    """Register a saved model as the CFRAG pyfunc model of ``kind`` (what MlflowResource does for the assets)."""
    from functools import partial

    from prag_models.config.settings import Settings
    from prag_models.mlops import pyfunc as pyfunc_model

    name = registry.registered_name(kind, task)
    folder = save_model(model, tmp_path / f"saved-{kind}-{len(registry.version_numbers(target, name))}")
    config = pyfunc_model.model_config(task, kind, name, Settings(home=str(tmp_path / "home")), target.tracking_uri)
    package = partial(pyfunc_model.save_pyfunc, weights=folder, config=config)
    tags = {"task": task, "kind": kind, "training.improved": "true"}
    epochs = {"val_kl": [0.9, 0.5], "val_ndcg": [0.4, float("nan")]}
    return registry.log_and_register(target, folder, name, {}, [1.0, 0.25], "dv9", tags, "", epochs, package=package)


def test_pyfunc_version_has_mlmodel_signature_example_descriptions(target, tmp_path, monkeypatch) -> None:
    """A packaged version is a pyfunc model logged from code (no pickle), with signature, input example, pinned pip
    requirements and the weights as an artifact that load_registered reads; descriptions and the experiment kind."""
    import mlflow
    from mlflow.models import Model

    from prag_models.methods.cfrag.user_encoder import UserEncoder

    torch.manual_seed(0)
    encoder = UserEncoder(12, 6)
    entry = _register_pyfunc(target, tmp_path, encoder, "user_encoder")
    local = registry.download_version(target, entry, tmp_path / "dl")
    meta = Model.load(str(local))
    flavor = meta.flavors["python_function"]
    assert flavor["model_code_path"] and not list(local.rglob("*.pkl"))  # models-from-code: nothing pickled
    assert [c.name for c in meta.signature.inputs] == ["task", "user_id", "query"]
    assert {c.name for c in meta.signature.outputs} >= {"doc_ids", "scores", "source_user_ids"}
    assert meta.load_input_example(str(local)).columns.tolist() == ["task", "user_id", "query"]
    requirements = (local / "requirements.txt").read_text()
    assert f"mlflow=={mlflow.__version__}" in requirements and "torch==" in requirements
    weights = registry.weights_folder(local)
    assert {p.name for p in weights.iterdir()} == {"config.json", "model.safetensors"}
    loaded, _ = registry.load_registered(target, entry.name, version=entry.version)
    assert state_dicts_equal(encoder, loaded)

    client = registry.make_client(target)
    model_text = client.get_registered_model(entry.name).description
    assert "user encoder" in model_text and "LaMP-2" in model_text and "mlflow models serve" in model_text
    version_text = client.get_model_version(entry.name, str(entry.version)).description
    # short, human, rounded: the key figures; the rest stays in the tags
    assert "data version dv9" in version_text and "loss 1 -> 0.25 over 2 steps" in version_text
    assert "Validation NDCG 0.4" in version_text and len(version_text.splitlines()) <= 6
    assert client.get_model_version(entry.name, str(entry.version)).tags["training.improved"] == "true"
    tags = client.get_registered_model(entry.name).tags  # + champion.status: what the champion alias holds
    assert {k: tags[k] for k in ("task", "kind")} == {"task": "LaMP-2", "kind": "user_encoder"}
    assert client.get_experiment_by_name("test").tags["mlflow.experimentKind"] == "custom_model_development"

    monkeypatch.setenv("MLFLOW_TRACKING_URI", target.tracking_uri)
    served = mlflow.pyfunc.load_model(f"models:/{entry.name}@champion")  # no DuckDB needed until predict
    assert served.metadata.get_input_schema() == meta.signature.inputs


def test_resolve_bundle_by_alias_then_eval_bundle(target, tmp_path) -> None:
    """The retriever's companions: the user encoder holding the same alias, else the recorded eval.bundle version."""
    from prag_models.methods.cfrag.user_encoder import UserEncoder

    torch.manual_seed(0)
    _register_pyfunc(target, tmp_path, UserEncoder(12, 6), "user_encoder")  # v1 champion + challenger
    first = _register_pyfunc(target, tmp_path, _retriever(1), "retriever")
    _register_pyfunc(target, tmp_path, UserEncoder(12, 6), "user_encoder")  # v2 challenger
    bundle, how = registry.resolve_bundle(target, first.name, first.run_id, "retriever", "LaMP-2", ["user_encoder"])
    assert how == "alias champion" and bundle["user_encoder"].version == 1 and bundle["retriever"].version == 1

    second = _register_pyfunc(target, tmp_path, _retriever(2), "retriever")  # challenger -> encoder v2
    bundle, how = registry.resolve_bundle(target, second.name, second.run_id, "retriever", "LaMP-2", ["user_encoder"])
    assert how == "alias challenger" and bundle["user_encoder"].version == 2

    third = _register_pyfunc(target, tmp_path, _retriever(3), "retriever")  # takes challenger: v2 has no alias
    with pytest.raises(LookupError, match="holds no alias and no eval.bundle"):
        registry.resolve_bundle(target, second.name, second.run_id, "retriever", "LaMP-2", ["user_encoder"])
    client = registry.make_client(target)
    client.set_model_version_tag(second.name, "2", "eval.bundle", "retriever:2,user_encoder:1")
    bundle, how = registry.resolve_bundle(target, second.name, second.run_id, "retriever", "LaMP-2", ["user_encoder"])
    assert how == "eval.bundle tag" and bundle["user_encoder"].version == 1 and third.version == 3
