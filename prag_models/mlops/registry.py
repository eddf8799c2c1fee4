"""MLflow tracking and model registry for the CFRAG models: log, register and load safetensors model folders. A trained
model is saved with ``prag_models.methods.cfrag.serialization.save_model`` (``config.json`` + ``model.safetensors``,
never a pickle). :func:`log_and_register` ends the run opened around the fit (:func:`tracker`, ``mlops.runs``; else a
new run): params, the loss curve as metric ``loss`` by step, ``final_loss``, the data version and the Dagster lineage
as tags, the training rows as dataset input; the model folder is logged as the run's MLflow LoggedModel (the
experiment's Models tab) and registered as a new version of a registered model. Given a ``package``
(``mlops.pyfunc.save_pyfunc``), that folder is an MLflow pyfunc model (``MLmodel``, signature, input example) holding
the weights under ``artifacts/``. Registered models get a description (``mlops.descriptions``) and ``task`` /
``kind`` tags; versions a short description with the key figures (4 significant digits), the rest as tags. The
experiment gets tag ``mlflow.experimentKind = custom_model_development`` (MLflow < 3.17; 3.17's UI chooses by its
workflow switch, which ``runs.experiment_url`` sets to machine learning). New versions get alias ``challenger``; the
first version of a model that has no ``champion`` yet also becomes ``champion`` (promotion rules live elsewhere).
:func:`load_registered` downloads a version's folder and loads its weights with ``load_model`` (safetensors only).

Every call goes through an explicit ``MlflowClient`` (no global tracking URI is set). mlflow and torch are imported
inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prag_models.mlops.champion import CHAMPION_STATUS_TAG as CHAMPION_STATUS_TAG  # re-exported
from prag_models.mlops.champion import TRAINING_STATE_TAG, mark_champion, training_state, untrained_reason
from prag_models.mlops.descriptions import model_description, version_description
from prag_models.mlops.relocation import relocate
from prag_models.mlops.runs import (
    Lineage,
    RunTracker,
    log_training_dataset,
    run_url,
    start_run,
    version_url,
)
from prag_models.mlops.runs import run_tags as prag_run_tags
from prag_models.storage.hashing import data_version as data_version  # re-exported: the version a run is tagged with

if TYPE_CHECKING:
    import pandas as pd
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
#: Experiment tag that makes the MLflow 3 UI open the experiment in classic ML (custom model development) mode.
EXPERIMENT_KIND_TAG = ("mlflow.experimentKind", "custom_model_development")
#: A ``log_and_register`` packager: (run id, scratch folder) -> the folder to log as the version's model.
Packager = Callable[[str, Path], Path]


@dataclass(frozen=True)
class MlflowTarget:
    """Where runs and models go: tracking/registry URI, experiment name, artifact location of a new experiment; and
    who writes there (``lineage``: the Dagster step, whose tags every run written through the target carries)."""

    tracking_uri: str
    experiment: str = "prag"
    artifact_location: str = ""  # folder or URI; "" = the tracking server's default
    lineage: Lineage = Lineage()


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


#: (sqlite store, artifact folder) pairs this process has relocated (relocation.relocate: once per process).
_RELOCATED: set[tuple[str, str]] = set()


def make_client(target: MlflowTarget) -> MlflowClient:
    """An MlflowClient for the target (telemetry and progress bars off; the sqlite folder created; a store whose home
    was moved or copied pointed at its own artifact folder, prag_models/mlops/relocation.py)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if target.tracking_uri.startswith("sqlite:///"):
        db = Path(target.tracking_uri[len("sqlite:///") :])
        db.parent.mkdir(parents=True, exist_ok=True)
        local = target.artifact_location and "://" not in target.artifact_location
        if local and (str(db), target.artifact_location) not in _RELOCATED:
            relocate(db, Path(target.artifact_location))
            _RELOCATED.add((str(db), target.artifact_location))
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=target.tracking_uri, registry_uri=target.tracking_uri)


def experiment_id(client: MlflowClient, target: MlflowTarget) -> str:
    """The id of the target's experiment, created (with its artifact location) if missing."""
    found = client.get_experiment_by_name(target.experiment)
    key, value = EXPERIMENT_KIND_TAG
    if found is not None:
        if key not in found.tags:  # a kind chosen in the UI is left alone
            client.set_experiment_tag(found.experiment_id, key, value)
        return found.experiment_id
    location = target.artifact_location
    if location and "://" not in location:
        Path(location).mkdir(parents=True, exist_ok=True)
        location = Path(location).resolve().as_uri()
    return client.create_experiment(target.experiment, artifact_location=location or None, tags={key: value})


def _ensure_registered_model(client: MlflowClient, name: str, description: str = "") -> None:
    """Create the registered model if it does not exist, its ``champion`` tag first (mlops.champion: the list page
    shows the first tags); set its description when given and different."""
    from mlflow.exceptions import MlflowException

    from prag_models.mlops.champion import CHAMPION_TRAINING_TAG, NO_CHAMPION

    try:
        found = client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, tags={CHAMPION_TRAINING_TAG: NO_CHAMPION}, description=description or None)
        return
    if description and found.description != description:
        client.update_registered_model(name, description=description)


def model_aliases(target: MlflowTarget, name: str) -> dict[str, int]:
    """Alias → version of a registered model."""
    aliases = make_client(target).get_registered_model(name).aliases
    return {alias: int(version) for alias, version in aliases.items()}


def assign_new_version_aliases(client: MlflowClient, name: str, version: int) -> tuple[str, ...]:
    """``challenger`` → the new version; also ``champion`` when the model has none yet — a first version whose
    training did not beat its initialisation (``training.improved = false``) or that was registered at it
    (``training.skipped``): the kept weights ARE the untrained initialisation) is champion as such, and the registry
    says so (``champion``, ``champion.status``: ``mlops.champion``). Returns the aliases set."""
    client.set_registered_model_alias(name, CHALLENGER, str(version))
    aliases: tuple[str, ...] = (CHALLENGER,)
    if CHAMPION not in client.get_registered_model(name).aliases:
        client.set_registered_model_alias(name, CHAMPION, str(version))
        aliases = (CHAMPION, CHALLENGER)
        why = untrained_reason(client.get_model_version(name, str(version)).tags)
        status = (f"v{version}: the untrained initialisation ({why}; no trained version has passed the gate)" if why
                  else f"v{version}: the first version")  # fmt: skip
        mark_champion(client, name, version, status)
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
    package: Packager | None = None,
    run_id: str = "",
    lineage: Lineage | None = None,
    dataset: tuple[pd.DataFrame, str] | None = None,
) -> RegisteredVersion:
    """Log a saved model folder with its training record in a run and register it as a new version of ``name``.

    ``run_id``: the run opened around the fit (:func:`tracker`), else a new run. ``epoch_metrics`` (e.g. train_loss,
    val_kl, val_ndcg) are logged with step = epoch (0 = before training). ``package(run_id, scratch)`` turns the
    folder into the model folder to log (the CFRAG pyfunc model), logged as the run's MLflow LoggedModel. ``lineage``
    (Dagster run, job, asset, partition; the target's when None) goes to the run's and the version's tags; ``dataset`` =
    (training rows, their source) to the run's dataset inputs; the version's ``training.state`` says whether it is
    trained (``mlops.champion``). The run ends here (FAILED if anything raises)."""
    from mlflow.entities import LoggedModelOutput, Metric, Param, RunTag

    folder = Path(model_dir)
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"{folder} holds no model.safetensors: save the model with save_model first")
    client = make_client(target)
    lineage = lineage or target.lineage.for_task(str((tags or {}).get("task", "")))
    run_tags = {"data_version": data_version, **dict(tags or {}), **lineage.tags()}
    experiment = experiment_id(client, target)
    if run_id:
        client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in run_tags.items()])
    else:
        run_id = start_run(client, experiment, run_name or name, prag_run_tags(lineage, name, run_tags))
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
        if dataset is not None:
            log_training_dataset(client, run_id, dataset[0], f"{name} training rows", dataset[1])
        kind = run_tags.get("kind", "")
        with tempfile.TemporaryDirectory(prefix="prag-package-") as scratch:
            logged = package(run_id, Path(scratch)) if package is not None else folder
            model = client.create_logged_model(
                experiment,
                name=kind or name,
                source_run_id=run_id,
                tags=run_tags,
                params={p.key: p.value for p in param_list},
                model_type=kind or None,
            )
            client.log_model_artifacts(model.model_id, str(logged))
        client.finalize_logged_model(model.model_id, "READY")
        client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=0)])
        source = model.artifact_location
        _ensure_registered_model(client, name, model_description(name, run_tags, package is not None))
        for key in ("task", "kind"):  # model-level tags to filter the registry by
            if run_tags.get(key):
                client.set_registered_model_tag(name, key, run_tags[key])
        text = version_description(name, run_tags, data_version, curve, epoch_metrics, package is not None)
        client.set_tag(run_id, "mlflow.note.content", text)  # the run's description in the UI (Markdown)
        version_tags = run_tags | {TRAINING_STATE_TAG: training_state(run_tags)}
        mv = client.create_model_version(name, source=source, run_id=run_id, tags=version_tags, description=text,
                                         model_id=model.model_id)  # fmt: skip
        version = int(mv.version)
        # the sqlite registry keeps no model_id on the version: the LoggedModel lists its versions (as MLflow does)
        client.set_logged_model_tags(model.model_id, {"mlflow.modelVersions": json.dumps([{"name": name,
                                                                                           "version": version}])})
        aliases = assign_new_version_aliases(client, name, version)
        client.log_batch(run_id, tags=[RunTag("registered_model", f"{name}/{version}")])
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return RegisteredVersion(name, version, run_id, source, aliases)


def tracker(target: MlflowTarget, task: str, lineage: Lineage) -> RunTracker:
    """kind -> a run around that kind's fit for ``task``, to be ended by :func:`log_and_register` with its id."""
    client = make_client(target)
    return RunTracker(client, experiment_id(client, target), task, lineage, lambda kind: registered_name(kind, task))


def ui_links(target: MlflowTarget, ui: str, entry: RegisteredVersion) -> dict[str, str]:
    """The MLflow UI pages of a registered version's run and of the version itself."""
    run = make_client(target).get_run(entry.run_id)
    return {
        "run": run_url(ui, run.info.experiment_id, entry.run_id),
        "version": version_url(ui, entry.name, entry.version),
    }


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


def weights_folder(folder: str | Path) -> Path:
    """The safetensors folder of a downloaded version: the pyfunc model's ``weights`` artifact, or the folder itself."""
    path = Path(folder)
    if not (path / "MLmodel").is_file():
        return path
    from mlflow.models import Model

    artifacts = Model.load(str(path)).flavors.get("python_function", {}).get("artifacts", {})
    return path / artifacts["weights"]["path"]


def find_run_version(target: MlflowTarget, name: str, run_id: str) -> tuple[RegisteredVersion, dict[str, str]]:
    """The version of ``name`` that run ``run_id`` registered, with its tags."""
    client = make_client(target)
    found = [mv for mv in client.search_model_versions(f"name = '{name}'") if mv.run_id == run_id]
    if not found:
        raise LookupError(f"no version of {name} was registered by run {run_id}")
    mv = client.get_model_version(name, found[0].version)  # search results omit aliases
    entry = RegisteredVersion(name, int(mv.version), run_id, mv.source, tuple(sorted(mv.aliases or ())))
    return entry, dict(mv.tags)


def resolve_bundle(
    target: MlflowTarget, name: str, run_id: str, kind: str, task: str, companions: Sequence[str]
) -> tuple[dict[str, RegisteredVersion], str]:
    """The bundle a version belongs to: itself (as ``kind``) and the ``companions`` kinds' versions holding the same
    alias (champion first, then challenger), else those of its ``eval.bundle`` tag. Returns (kind -> version, how)."""
    own, tags = find_run_version(target, name, run_id)
    for alias in (CHAMPION, CHALLENGER):
        if alias in own.aliases:
            found = {k: get_version(target, registered_name(k, task), alias=alias) for k in companions}
            return {kind: own, **found}, f"alias {alias}"
    recorded = dict(part.split(":") for part in tags.get("eval.bundle", "").split(",") if ":" in part)
    if all(recorded.get(k, "").isdigit() for k in companions):
        found = {k: get_version(target, registered_name(k, task), int(recorded[k])) for k in companions}
        return {kind: own, **found}, "eval.bundle tag"
    raise LookupError(f"{name} version {own.version} holds no alias and no eval.bundle tag: its "
                      f"{', '.join(companions)} cannot be chosen; serve it by alias or evaluate it first")  # fmt: skip


def load_registered(
    target: MlflowTarget, name: str, version: int | None = None, alias: str = ""
) -> tuple[nn.Module, RegisteredVersion]:
    """Download a registered version (by number or alias) and load it with safetensors (never unpickles)."""
    from prag_models.methods.cfrag.serialization import load_model

    entry = get_version(target, name, version, alias)
    with tempfile.TemporaryDirectory(prefix="prag-model-") as tmp:
        model = load_model(weights_folder(download_version(target, entry, tmp)))
    return model, entry


def run_metric_history(target: MlflowTarget, run_id: str, key: str = "loss") -> list[float]:
    """The values of a run's metric in step order (e.g. the logged loss curve)."""
    history = make_client(target).get_metric_history(run_id, key)
    return [m.value for m in sorted(history, key=lambda m: m.step)]


def version_numbers(target: MlflowTarget, name: str) -> list[int]:
    """All version numbers of a registered model, ascending."""
    found: Iterable[Any] = make_client(target).search_model_versions(f"name = '{name}'")
    return sorted(int(mv.version) for mv in found)
