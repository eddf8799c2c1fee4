"""Issue 41 point 2: a model kept at its initialisation is said to be untrained — with the feedback probe's figures —
in its MLflow version's description, its run's description and its asset metadata (no null losses); the registered
model no longer says every version was "trained from LLM feedback" (real MLflow sqlite store, a real saved model)."""

from __future__ import annotations

import json

import torch

from prag_assets.builders.cfrag_registry import model_metadata
from prag_models.methods.cfrag.retriever import PersonalizedRetriever
from prag_models.methods.cfrag.serialization import save_model
from prag_models.methods.cfrag.training import Trained
from prag_models.mlops import registry

TASK = "LaMP-2"
WHY = "no teacher headroom over cosine: truth NDCG +0.012, 95 % CI [-0.04, +0.07] (n=4)"


def test_an_untrained_model_says_so_everywhere(tmp_path) -> None:
    """Failed first: the description said nothing of it, the registered model said "trained from LLM feedback", and
    the metadata held loss_first/loss_last/loss_start_mean/loss_end_mean = null."""
    torch.manual_seed(0)
    model = PersonalizedRetriever(user_dim=4, doc_dim=3)
    folder = save_model(model, tmp_path / "saved")
    target = registry.MlflowTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "test", str(tmp_path / "artifacts"))
    trained = Trained("retriever", model, [], {"alpha": 0.5}, "d1", 0.25, skipped=WHY)
    name = registry.registered_name("retriever", TASK)
    entry = registry.log_and_register(target, folder, name, trained.params, trained.curve, "d1",
                                      tags=trained.registry_tags(TASK))  # fmt: skip
    client = registry.make_client(target)
    version = client.get_model_version(name, str(entry.version))
    assert version.description.startswith("**Untrained**: registered at its initialisation")
    assert WHY in version.description and version.tags["training.skipped"] == WHY
    assert WHY in client.get_run(entry.run_id).data.tags["mlflow.note.content"]  # the run says it too
    assert "trained from LLM feedback" not in client.get_registered_model(name).description

    meta = model_metadata(trained, entry)
    assert None not in json.loads(json.dumps(meta)).values()
    assert meta["training"] == f"untrained: registered at its initialisation ({WHY})" and meta["steps"] == 0
    assert not any(key.startswith("loss_") for key in meta)

    taught = Trained("retriever", model, [0.9, 0.7, 0.5], {}, "d1", 1.0)
    shown = model_metadata(taught, entry)
    assert shown["loss_first"] == 0.9 and shown["loss_last"] == 0.5 and "training" not in shown
