"""MLflow registry round trips for the CFRAG models: log + register + load by version or alias, scores identical."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mlflow")

from prag_models import registry  # noqa: E402
from prag_models.config import CfragSettings  # noqa: E402
from prag_models.methods.cfrag.retriever import PersonalizedRetriever, retriever_scores  # noqa: E402
from prag_models.methods.cfrag.serialization import save_model  # noqa: E402


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
    files = {f.path for f in client.list_artifacts(entry.run_id, registry.ARTIFACT_PATH)}
    assert files == {"model/config.json", "model/model.safetensors"}
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

    from prag_models.methods.cfrag.pipeline import new_reranker
    from prag_models.methods.cfrag.reranker import rerank_scores

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
