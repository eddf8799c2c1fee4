"""Lineage both ways between Dagster and MLflow: a training materialization links its MLflow run and model version
(pages of the MLflow UI); the run and the version carry the Dagster run id, asset key and partition; the run spans the
fit and holds the training dataset and the logged model. Checked in-process and through a real `mlflow server`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
from conftest import materialize_graph, write_config
from test_mlflow_serving import _free_port, _stop, _wait_ready

from prag_models.config.settings import load_settings
from prag_models.mlops import registry
from prag_models.mlops.runs import Lineage

TASK = "LaMP-2"
CFRAG = {"epochs": 2, "train_epochs": 2, "reranker_layers": 1, "reranker_max_length": 64, "max_feedback_samples": 8}
TRAINING_ASSETS = {"cfrag_user_encoder": "user_encoder", "cfrag_retriever": "retriever"}
UI = "http://127.0.0.1:5999"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """LaMP-2 materialized up to cfrag_retriever (user encoder + retriever registered); (settings, result)."""
    tmp = tmp_path_factory.mktemp("lineage")
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake", data={"tasks": [TASK]},
                          cfrag=CFRAG, mlflow={"ui_url": UI})  # fmt: skip
    result = materialize_graph(config, [TASK], selection=dg.AssetSelection.assets("cfrag_retriever").upstream())
    assert result.success
    return load_settings(config), result


def _materialization(result, asset: str) -> dict:
    found = [m.metadata for m in result.asset_materializations_for_node(asset)]
    assert found, asset
    return found[-1]


def test_training_materializations_link_run_and_version_and_mlflow_carries_dagster_lineage(trained) -> None:
    """Each training asset's metadata has URL links to the MLflow UI's run page and model-version page (at
    mlflow.ui_url); that run and version carry dagster.run_id / asset_key / partition, the task and kind (also on the
    registered model), the training rows as dataset input, the LoggedModel as output, a duration spanning the fit."""
    settings, result = trained
    client = registry.make_client(registry.MlflowTarget(settings.mlflow_uri))
    experiment = client.get_experiment_by_name(settings.mlflow.experiment).experiment_id
    for asset, kind in TRAINING_ASSETS.items():
        meta = _materialization(result, asset)
        name = registry.registered_name(kind, TASK)
        stats = {k: v.value for k, v in meta.items()}
        version = int(stats["registered"].split("/")[-1])
        run_id = stats["mlflow_run_id"]
        run_link, version_link = meta[f"mlflow_run {TASK}"], meta[f"mlflow_version {TASK}"]
        assert isinstance(run_link, dg.UrlMetadataValue) and isinstance(version_link, dg.UrlMetadataValue)
        assert run_link.url == f"{UI}/#/experiments/{experiment}/runs/{run_id}"
        assert version_link.url == f"{UI}/#/models/{name}/versions/{version}"

        lineage = {"dagster.run_id": result.run_id, "dagster.asset_key": asset, "dagster.partition": TASK}
        run = client.get_run(run_id)
        mv = client.get_model_version(name, str(version))
        assert mv.run_id == run_id
        assert lineage.items() <= run.data.tags.items() and lineage.items() <= mv.tags.items()
        assert run.data.tags["mlflow.source.name"] == f"dagster asset {asset}"
        assert {"task": TASK, "kind": kind}.items() <= client.get_registered_model(name).tags.items()
        # the run spans the fit (opened before it), holds the training rows and the logged model
        assert run.info.status == "FINISHED"
        assert (run.info.end_time - run.info.start_time) / 1000 >= stats["train_seconds"] - 0.01
        inputs = run.inputs.dataset_inputs
        assert len(inputs) == 1 and inputs[0].dataset.name == f"{name} training rows"
        assert {t.key: t.value for t in inputs[0].tags}["mlflow.data.context"] == "training"
        assert json.loads(inputs[0].dataset.profile)["num_rows"] > 0
        (output,) = run.outputs.model_outputs
        logged = client.get_logged_model(output.model_id)
        assert mv.source == logged.artifact_location and logged.source_run_id == run_id
        assert json.loads(logged.tags["mlflow.modelVersions"]) == [{"name": name, "version": version}]


def test_a_fit_that_fails_leaves_a_failed_run(tmp_path) -> None:
    """A run opened around a fit is FAILED when the fit raises, and fail_unfinished ends one never registered."""
    target = registry.MlflowTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "t", str(tmp_path / "artifacts"))
    track = registry.tracker(target, TASK, Lineage("r1", "cfrag_retriever", TASK))
    with pytest.raises(RuntimeError), track("retriever"):
        raise RuntimeError("fit failed")
    with track("reranker") as left_open:
        pass
    client = registry.make_client(target)
    failed = client.get_run(track.opened[0])
    assert failed.info.status == "FAILED" and failed.data.tags["dagster.run_id"] == "r1"
    assert track.fail_unfinished() == [left_open] and client.get_run(left_open).info.status == "FAILED"


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def test_mlflow_server_rest_api_shows_the_dagster_tags(trained, tmp_path) -> None:
    """A real `mlflow server` on 127.0.0.1 over the graph's store: its REST API returns the run and the model version
    with the Dagster run id, asset key and partition, and the UI answers at the root the links point to."""
    settings, result = trained
    port, log = _free_port(), tmp_path / "server.log"
    bin_dir = Path(sys.executable).parent
    cmd = [str(bin_dir / "mlflow"), "server", "--backend-store-uri", settings.mlflow_uri, "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]  # fmt: skip
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(f"{base}/health", proc, log)
        stats = {k: v.value for k, v in _materialization(result, "cfrag_retriever").items()}
        name, version = stats["registered"].rsplit("/", 1)
        run = _get(f"{base}/api/2.0/mlflow/runs/get?run_id={stats['mlflow_run_id']}")["run"]
        query = urllib.parse.urlencode({"name": name, "version": version})
        mv = _get(f"{base}/api/2.0/mlflow/model-versions/get?{query}")["model_version"]
        with urllib.request.urlopen(f"{base}/", timeout=30) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
    finally:
        _stop(proc)
    expected = {"dagster.run_id": result.run_id, "dagster.asset_key": "cfrag_retriever", "dagster.partition": TASK}
    assert expected.items() <= {t["key"]: t["value"] for t in run["data"]["tags"]}.items()
    assert expected.items() <= {t["key"]: t["value"] for t in mv["tags"]}.items()
    assert mv["run_id"] == stats["mlflow_run_id"]
