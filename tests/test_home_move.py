"""A prag home can be moved or copied (issue 50.5): its MLflow store (real sqlite store, absolute artifact URIs) is
pointed at the home's own artifact folder, by any prag command that opens it or by `prag relocate`, so a moved home
loads its models after the original folder is gone and a copy never reads its original's artifacts."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from prag_models.config.settings import load_settings
from prag_models.methods.cfrag.retriever import PersonalizedRetriever, retriever_scores
from prag_models.methods.cfrag.serialization import save_model
from prag_models.mlops import registry
from prag_models.mlops.promotion import mlflow_target

NAME = "prag-retriever-LaMP-2"


def _target(home: Path) -> registry.MlflowTarget:
    """The MLflow target prag builds for a home (default store: home/mlflow.db, home/mlflow-artifacts)."""
    return mlflow_target(load_settings(environ={"PRAG_HOME": str(home)}))


def _scores(model: PersonalizedRetriever) -> np.ndarray:
    """The model's scores of fixed inputs."""
    rng = np.random.default_rng(0)
    return retriever_scores(model, rng.normal(size=(3, 5)), rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 6)))


@pytest.fixture
def trained_home(tmp_path) -> tuple[Path, np.ndarray]:
    """A home whose MLflow store holds one registered version of a retriever; (home, that model's scores)."""
    torch.manual_seed(1)
    model = PersonalizedRetriever(user_dim=6, doc_dim=5, alpha=0.3).eval()
    home = tmp_path / "first" / "home"
    folder = save_model(model, tmp_path / "saved")
    registry.log_and_register(_target(home), folder, NAME, {"alpha": 0.3}, [1.0, 0.5], "v1", {"task": "LaMP-2"})
    return home, _scores(model)


def _stored_locations(home: Path) -> list[str]:
    """Every artifact URI the home's store records (read with MLflow's own client, as its UI and `mlflow models
    serve` read them, not through prag)."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{home / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name("prag")
    runs = client.search_runs([experiment.experiment_id])
    versions = client.search_model_versions(f"name = '{NAME}'")
    return [experiment.artifact_location, *(r.info.artifact_uri for r in runs), *(v.source for v in versions)]


def test_a_moved_home_loads_its_models_once_the_original_folder_is_gone(trained_home, tmp_path) -> None:
    """shutil.move to another folder: the champion loads from the new place with the same scores, and every
    location the store records is under the new home."""
    home, scores = trained_home
    moved = tmp_path / "second" / "home"
    moved.parent.mkdir()
    shutil.move(home, moved)
    assert not home.exists()
    model, entry = registry.load_registered(_target(moved), NAME, alias="champion")
    assert np.array_equal(_scores(model), scores)
    locations = _stored_locations(moved)
    assert len(locations) == 3 and all(u.startswith((moved / "mlflow-artifacts").as_uri()) for u in locations)


def test_prag_relocate_rewrites_the_store_for_mlflows_own_readers(trained_home, tmp_path, monkeypatch, capsys) -> None:
    """After a move, `prag relocate` (scripts/mlflow_ui.sh runs it) rewrites what MLflow's UI and server read; a
    second call finds nothing to do."""
    from prag_assets.cli.commands import main

    home, _ = trained_home
    moved = tmp_path / "moved"
    shutil.move(home, moved)
    assert all(str(home) in u for u in _stored_locations(moved))  # as moved: the original's paths
    monkeypatch.setenv("PRAG_HOME", str(moved))
    assert main(["relocate"]) == 0
    said = capsys.readouterr().out
    assert f"rewritten to {(moved / 'mlflow-artifacts').as_uri()}" in said
    assert f"from {(home / 'mlflow-artifacts').as_uri()}" in said
    assert all(u.startswith((moved / "mlflow-artifacts").as_uri()) for u in _stored_locations(moved))
    assert main(["relocate"]) == 0
    assert "nothing to rewrite" in capsys.readouterr().out


def test_a_copied_home_reads_its_own_artifacts_and_leaves_the_original_alone(trained_home, tmp_path) -> None:
    """A copy loads from its own artifact folder (the original's removed), while the original's store keeps
    pointing at the original."""
    home, scores = trained_home
    copy = tmp_path / "copy"
    shutil.copytree(home, copy)
    shutil.rmtree(home / "mlflow-artifacts")
    model, entry = registry.load_registered(_target(copy), NAME, alias="champion")
    assert np.array_equal(_scores(model), scores) and entry.source.startswith(copy.as_uri() + "/")
    assert all(u.startswith((home / "mlflow-artifacts").as_uri()) for u in _stored_locations(home))
