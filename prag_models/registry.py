"""MLflow tracking and model registry for the CFRAG models: log, register and load safetensors model folders.

A trained model is saved with ``prag_models.methods.cfrag.serialization.save_model`` (``config.json`` +
``model.safetensors``, never a pickle). :func:`log_and_register` logs that folder with ``log_artifacts`` in a new run
(params, the loss curve as metric ``loss`` by step, ``final_loss``, the data version as a tag) and registers it as a
new version of a registered model. New versions get alias ``challenger``; the first version of a model that has no
``champion`` yet also becomes ``champion`` (promotion rules live elsewhere). :func:`load_registered` downloads a
version's folder and loads it with ``load_model`` (safetensors only).

Every call goes through an explicit ``MlflowClient`` (no global tracking URI is set). mlflow and torch are imported
inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from torch import nn

CHAMPION = "champion"
CHALLENGER = "challenger"
#: Run-relative folder that holds the model files.
ARTIFACT_PATH = "model"
#: Registered-model base names by model kind; the task is appended (a model only serves the task it was trained on).
MODEL_NAMES: dict[str, str] = {
    "user_encoder": "prag-user-encoder",
    "retriever": "prag-retriever",
    "reranker": "prag-reranker",
    "reranker_no_eu": "prag-reranker-no-eu",
}


@dataclass(frozen=True)
class MlflowTarget:
    """Where runs and models go: tracking/registry URI, experiment name, artifact location of a new experiment."""

    tracking_uri: str
    experiment: str = "prag"
    artifact_location: str = ""  # folder or URI; "" = the tracking server's default


@dataclass(frozen=True)
class RegisteredVersion:
    """One registered model version."""

    name: str
    version: int
    run_id: str
    source: str
    aliases: tuple[str, ...] = ()


def registered_name(kind: str, task: str = "") -> str:
    """The registered-model name of a model kind, per task (e.g. ``prag-retriever-LaMP-2``)."""
    base = MODEL_NAMES.get(kind, f"prag-{kind.replace('_', '-')}")
    return f"{base}-{task}" if task else base


def data_version(*parts: Any) -> str:
    """A short sha256 over DataFrames (their rows), arrays, strings or numbers: the version of a model's input."""
    import numpy as np
    import pandas as pd

    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, pd.DataFrame):
            digest.update(",".join(map(str, part.columns)).encode())
            digest.update(pd.util.hash_pandas_object(part, index=False).to_numpy().tobytes())
        elif isinstance(part, np.ndarray):
            digest.update(str(part.shape).encode() + np.ascontiguousarray(part).tobytes())
        else:
            digest.update(repr(part).encode())
        digest.update(b"|")
    return digest.hexdigest()[:16]


def make_client(target: MlflowTarget) -> MlflowClient:
    """An MlflowClient for the target (telemetry and progress bars off; the sqlite folder created)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if target.tracking_uri.startswith("sqlite:///"):
        Path(target.tracking_uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=target.tracking_uri, registry_uri=target.tracking_uri)


def experiment_id(client: MlflowClient, target: MlflowTarget) -> str:
    """The id of the target's experiment, created (with its artifact location) if missing."""
    found = client.get_experiment_by_name(target.experiment)
    if found is not None:
        return found.experiment_id
    location = target.artifact_location
    if location and "://" not in location:
        Path(location).mkdir(parents=True, exist_ok=True)
        location = Path(location).resolve().as_uri()
    return client.create_experiment(target.experiment, artifact_location=location or None)


def _ensure_registered_model(client: MlflowClient, name: str) -> None:
    """Create the registered model if it does not exist."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name)


def model_aliases(target: MlflowTarget, name: str) -> dict[str, int]:
    """Alias → version of a registered model."""
    aliases = make_client(target).get_registered_model(name).aliases
    return {alias: int(version) for alias, version in aliases.items()}


def assign_new_version_aliases(client: MlflowClient, name: str, version: int) -> tuple[str, ...]:
    """``challenger`` → the new version; also ``champion`` when the model has none yet. Returns the aliases set."""
    client.set_registered_model_alias(name, CHALLENGER, str(version))
    aliases: tuple[str, ...] = (CHALLENGER,)
    if CHAMPION not in client.get_registered_model(name).aliases:
        client.set_registered_model_alias(name, CHAMPION, str(version))
        aliases = (CHAMPION, CHALLENGER)
    return aliases


def log_and_register(
    target: MlflowTarget,
    model_dir: str | Path,
    name: str,
    params: Mapping[str, Any],
    loss_curve: Sequence[float],
    data_version: str,
    tags: Mapping[str, str] | None = None,
    run_name: str = "",
    epoch_metrics: Mapping[str, Sequence[float]] | None = None,
) -> RegisteredVersion:
    """Log a saved model folder with its training record in a new run and register it as a new version of ``name``.

    ``epoch_metrics`` (e.g. train_loss, val_kl, val_ndcg) are logged with step = epoch (0 = before training)."""
    from mlflow.entities import Metric, Param, RunTag

    folder = Path(model_dir)
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"{folder} holds no model.safetensors: save the model with save_model first")
    client = make_client(target)
    run_tags = {"data_version": data_version, **dict(tags or {})}
    run = client.create_run(experiment_id(client, target), run_name=run_name or name, tags=run_tags)
    run_id = run.info.run_id
    try:
        now = int(time.time() * 1000)
        curve = [float(v) for v in loss_curve]
        metrics = [Metric("loss", v, now, step) for step, v in enumerate(curve)]
        if curve:
            metrics += [Metric("final_loss", curve[-1], now, 0), Metric("initial_loss", curve[0], now, 0)]
        metrics.append(Metric("steps", float(len(curve)), now, 0))
        for key, values in (epoch_metrics or {}).items():
            metrics += [Metric(key, float(v), now, epoch) for epoch, v in enumerate(values) if v == v]  # skip NaN
        param_list = [Param(str(k), str(v)[:6000]) for k, v in sorted(params.items())]
        for start in range(0, len(param_list), 100):  # MLflow's per-batch limits: 100 params, 1000 metrics
            client.log_batch(run_id, params=param_list[start : start + 100])
        for start in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[start : start + 1000])
        client.log_artifacts(run_id, str(folder), ARTIFACT_PATH)
        source = f"{client.get_run(run_id).info.artifact_uri.rstrip('/')}/{ARTIFACT_PATH}"
        _ensure_registered_model(client, name)
        version_tags = {"data_version": data_version, **dict(tags or {})}
        mv = client.create_model_version(name, source=source, run_id=run_id, tags=version_tags)
        version = int(mv.version)
        aliases = assign_new_version_aliases(client, name, version)
        client.log_batch(run_id, tags=[RunTag("registered_model", f"{name}/{version}")])
    except Exception:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return RegisteredVersion(name, version, run_id, source, aliases)


def get_version(target: MlflowTarget, name: str, version: int | None = None, alias: str = "") -> RegisteredVersion:
    """A registered version by number or by alias (exactly one of them)."""
    if (version is None) == (not alias):
        raise ValueError("give exactly one of version or alias")
    client = make_client(target)
    mv = client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, str(version))
    aliases = tuple(sorted(getattr(mv, "aliases", ()) or ()))
    return RegisteredVersion(name, int(mv.version), mv.run_id or "", mv.source, aliases)


def download_version(target: MlflowTarget, entry: RegisteredVersion, dst: str | Path) -> Path:
    """Download a registered version's model folder into ``dst``; returns the folder."""
    import mlflow.artifacts

    make_client(target)  # environment and sqlite folder
    path = mlflow.artifacts.download_artifacts(
        artifact_uri=entry.source, dst_path=str(dst), tracking_uri=target.tracking_uri
    )
    return Path(path)


def load_registered(
    target: MlflowTarget, name: str, version: int | None = None, alias: str = ""
) -> tuple[nn.Module, RegisteredVersion]:
    """Download a registered version (by number or alias) and load it with safetensors (never unpickles)."""
    from prag_models.methods.cfrag.serialization import load_model

    entry = get_version(target, name, version, alias)
    with tempfile.TemporaryDirectory(prefix="prag-model-") as tmp:
        model = load_model(download_version(target, entry, tmp))
    return model, entry


def run_metric_history(target: MlflowTarget, run_id: str, key: str = "loss") -> list[float]:
    """The values of a run's metric in step order (e.g. the logged loss curve)."""
    history = make_client(target).get_metric_history(run_id, key)
    return [m.value for m in sorted(history, key=lambda m: m.step)]


def version_numbers(target: MlflowTarget, name: str) -> list[int]:
    """All version numbers of a registered model, ascending."""
    found: Iterable[Any] = make_client(target).search_model_versions(f"name = '{name}'")
    return sorted(int(mv.version) for mv in found)
