"""Lineage both ways between Dagster and MLflow: a training materialization links its MLflow run and model version
(pages of the MLflow UI); the run and the version carry the Dagster run id, asset key and partition; the run spans the
fit and holds the training dataset and the logged model. Checked in-process, through a real `mlflow server`'s REST API
and in the MLflow UI itself (pages rendered by headless Chromium, tests/test_ui.py; those tests skip without it)."""

from __future__ import annotations

import html
import json
import math
import re
import urllib.parse
import urllib.request
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import dagster as dg
import pytest
from conftest import materialize_graph, write_config
from test_mlflow_serving import _post, running_mlflow_server
from test_ui import CHROMIUM, _dom

from prag_models.config.settings import load_settings
from prag_models.mlops import registry
from prag_models.mlops.promotion import IMPROVED_TAG, PROMOTED
from prag_models.mlops.runs import Lineage, experiment_url

TASK = "LaMP-2"
CFRAG = {"epochs": 2, "train_epochs": 2, "reranker_layers": 1, "reranker_max_length": 64, "max_feedback_samples": 8}
TRAINING_ASSETS = {"cfrag_user_encoder": "user_encoder", "cfrag_retriever": "retriever"}
UI = "http://127.0.0.1:5999"
DAGSTER_UI = "http://127.0.0.1:3999"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """LaMP-2 materialized up to cfrag_retriever (user encoder + retriever registered); (settings, result)."""
    tmp = tmp_path_factory.mktemp("lineage")
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake", data={"tasks": [TASK]},
                          cfrag=CFRAG, mlflow={"ui_url": UI}, run={"dagster_ui_url": DAGSTER_UI})  # fmt: skip
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
        # issue 41 point 3 (failed first: no view parameter): the classic model-training view, not MLflow 3's GenAI
        assert run_link.url == f"{UI}/#/experiments/{experiment}/runs/{run_id}?workflowType=machine_learning"
        assert version_link.url == f"{UI}/#/models/{name}/versions/{version}?workflowType=machine_learning"

        dagster_url = f"{DAGSTER_UI}/runs/{result.run_id}"
        lineage = {"dagster.run_id": result.run_id, "dagster.asset_key": asset, "dagster.partition": TASK,
                   "dagster.run_url": dagster_url}  # fmt: skip
        run = client.get_run(run_id)
        mv = client.get_model_version(name, str(version))
        link = f"Dagster run: [{result.run_id[:8]}]({dagster_url})."  # Markdown: clickable in the MLflow UI
        assert link in mv.description and link in run.data.tags["mlflow.note.content"]
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


def test_links_open_the_configured_mlflow_ui() -> None:
    """Issue 41 point 3 (failed first: every link went to port 5000): mlflow.ui_url, else a tracking server's own
    address, else `mlflow ui`'s default."""
    base = {"PRAG_HOME": "/nonexistent"}
    assert load_settings(environ=base).mlflow_ui_url == "http://127.0.0.1:5000"
    server = load_settings(environ={**base, "PRAG__MLFLOW__TRACKING_URI": "http://mlflow.internal:8080/"})
    assert server.mlflow_ui_url == "http://mlflow.internal:8080"
    chosen = load_settings(environ={**base, "PRAG__MLFLOW__TRACKING_URI": "http://mlflow.internal:8080",
                                    "PRAG__MLFLOW__UI_URL": "https://ml.example.org/"})  # fmt: skip
    assert chosen.mlflow_ui_url == "https://ml.example.org"
    assert experiment_url(chosen.mlflow_ui_url, "3") == "https://ml.example.org/#/experiments/3?workflowType=machine_learning"


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


@pytest.fixture(scope="module")
def mlflow_server(trained, tmp_path_factory):
    """One real `mlflow server` on 127.0.0.1 over the graph's store for the whole module: {"base", "tmp"} (tmp holds
    its log and Chromium's profiles); its process group is stopped at the end."""
    settings, _ = trained
    tmp = tmp_path_factory.mktemp("mlflow_server")
    with running_mlflow_server(settings.mlflow_uri, tmp / "server.log") as base:
        yield {"base": base, "tmp": tmp}


def _stats(result) -> dict:
    return {k: v.value for k, v in _materialization(result, "cfrag_retriever").items()}


def test_mlflow_server_rest_api_shows_the_dagster_tags(trained, mlflow_server) -> None:
    """A real `mlflow server` on 127.0.0.1 over the graph's store: its REST API returns the run and the model version
    with the Dagster run id, asset key and partition, and the UI answers at the root the links point to."""
    _, result = trained
    base, stats = mlflow_server["base"], _stats(result)
    name, version = stats["registered"].rsplit("/", 1)
    run = _get(f"{base}/api/2.0/mlflow/runs/get?run_id={stats['mlflow_run_id']}")["run"]
    query = urllib.parse.urlencode({"name": name, "version": version})
    mv = _get(f"{base}/api/2.0/mlflow/model-versions/get?{query}")["model_version"]
    with urllib.request.urlopen(f"{base}/", timeout=30) as page:
        assert page.status == 200 and b"<html" in page.read().lower()
    expected = {"dagster.run_id": result.run_id, "dagster.asset_key": "cfrag_retriever", "dagster.partition": TASK}
    assert expected.items() <= {t["key"]: t["value"] for t in run["data"]["tags"]}.items()
    assert expected.items() <= {t["key"]: t["value"] for t in mv["tags"]}.items()
    assert mv["run_id"] == stats["mlflow_run_id"]


# --- the MLflow UI (a React single-page app) as rendered by headless Chromium ---------------------------------------

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="headless Chromium is not installed (run scripts/install_chromium.sh)"
)


def _text(dom: str) -> str:
    """The visible text of a rendered page, one text node a line (tags dropped, entities and no-break spaces plain)."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S)
    lines = (html.unescape(part).replace("\xa0", " ").strip() for part in re.split(r"<[^>]*>", dom))
    return "\n".join(line for line in lines if line)


def _ui_duration(ms: int) -> str:
    """A duration as the MLflow UI writes it (Utils.formatDuration: JavaScript's toFixed(1), ties rounded up)."""
    if ms < 500:
        return f"{ms}ms"
    for unit, size, limit in (("s", 1e3, 6e4), ("min", 6e4, 3.6e6), ("h", 3.6e6, 8.64e7), ("d", 8.64e7, math.inf)):
        if ms < limit:
            return f"{Decimal(ms / size).quantize(Decimal('0.1'), ROUND_HALF_UP)}{unit}"
    raise AssertionError(ms)


def _shown(text: str, expected: list[str], page: str) -> None:
    """Fail naming the fragments of ``expected`` that the page's text (or DOM) does not contain."""
    missing = [fragment for fragment in expected if fragment not in text]
    if missing:
        pytest.fail(f"{page} does not show {missing}")


def _page(mlflow_server: dict, link: str, expected: list[str]) -> tuple[str, str]:
    """(DOM, visible text) of the UI page of a link written for mlflow.ui_url, opened on the test's server."""
    assert link.startswith(f"{UI}/#/"), link
    dom = _dom(mlflow_server, link.removeprefix(UI), expected)
    return dom, _text(dom)


@needs_chromium
def test_mlflow_ui_run_page_shows_lineage_duration_dataset_and_logged_model(trained, mlflow_server) -> None:
    """The run page the cfrag_retriever materialization links to renders the Dagster run id, asset key and partition
    tags, the run's real duration (at least the fit's seconds: opened around it), its source, the training rows as
    dataset input (context training), its LoggedModel and the registered version; the experiment's training view
    lists both runs."""
    _, result = trained
    base, stats = mlflow_server["base"], _stats(result)
    run_id, (name, version) = stats["mlflow_run_id"], stats["registered"].rsplit("/", 1)
    run = _get(f"{base}/api/2.0/mlflow/runs/get?run_id={run_id}")["run"]
    ms = int(run["info"]["end_time"]) - int(run["info"]["start_time"])
    # the run spans the fit (opened before it, ended by the registration), not a run logged after the fact
    assert run["info"]["status"] == "FINISHED" and ms >= 1000 * stats["train_seconds"] - 10, (ms, stats)
    ((dataset, context),) = [(d["dataset"], {t["key"]: t["value"] for t in d["tags"]}) for d in
                             run["inputs"]["dataset_inputs"]]  # fmt: skip
    assert context == {"mlflow.data.context": "training"}
    (output,) = run["outputs"]["model_outputs"]
    experiment = run["info"]["experiment_id"]

    loaded = [result.run_id, ">Duration<", dataset["digest"], output["model_id"], f"/versions/{version}"]
    dom, text = _page(mlflow_server, _materialization(result, "cfrag_retriever")[f"mlflow_run {TASK}"].url, loaded)
    shown = [f"dagster.run_id\n: {result.run_id}", "dagster.asset_key\n: cfrag_retriever",
             f"dagster.partition\n: {TASK}", f"task\n: {TASK}", "kind\n: retriever",
             f"Duration\n{_ui_duration(ms)}", "Source\ndagster asset cfrag_retriever",
             f"Datasets\n{dataset['name']} ({dataset['digest']})\ntraining", "Logged models (1)",
             f"Registered models\n{name}\nv{version}"]  # fmt: skip
    _shown(text, shown, "the run page")
    model_link = f'href="#/experiments/{experiment}/models/{output["model_id"]}"'  # the run's LoggedModel
    links = [model_link, f'href="#/models/{name}/versions/{version}"']
    _shown(dom, links, "the run page (links)")

    # the experiment's training view (the UI's default is GenAI: experiment_url asks for machine learning)
    runs = _post(f"{base}/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment]})["runs"]
    assert len(runs) == len(TRAINING_ASSETS)
    digests = [i["dataset"]["digest"] for r in runs for i in r["inputs"]["dataset_inputs"]]
    loaded = [*(r["info"]["run_id"] for r in runs), *digests, "matching runs"]
    text = _text(_dom(mlflow_server, experiment_url("", experiment), loaded))
    _shown(text, [f"\n{len(runs)}\nmatching runs"], "the experiment page")
    for r in runs:  # its row: dataset and context, the cell's overflow button ("+1", or "…" before layout), duration,
        # source, registered version
        tags = {t["key"]: t["value"] for t in r["data"]["tags"]}
        (d,) = [i["dataset"] for i in r["inputs"]["dataset_inputs"]]
        duration = _ui_duration(int(r["info"]["end_time"]) - int(r["info"]["start_time"]))
        registered = tags["registered_model"].replace("/", "\nv")
        row = re.escape(f"\n{d['name']} ({d['digest']})\ntraining\n") + r"(?:(?:\+\d+|…)\n)?"
        row += re.escape(f"{duration}\ndagster asset {tags['dagster.asset_key']}\n{registered}\n")
        grid = text[text.find("\nRun Name\n") : text.find("matching runs")]
        assert re.search(row, text), f"the experiment page has no row {row!r}; its runs table:\n{grid}"


@needs_chromium
def test_mlflow_ui_version_page_shows_the_aliases_and_the_gate_explains_the_champion(trained, mlflow_server) -> None:
    """The version page the cfrag_retriever materialization links to shows exactly the aliases the REST API gives that
    version, its Dagster tags and its source run; the champion alias sits on a version that passed the promotion gate
    (its promotion.* tags) or the registered model's champion.status says what it is (the first version, or the
    untrained initialisation when training.improved = false), and the registered model's page shows that tag."""
    _, result = trained
    base, stats = mlflow_server["base"], _stats(result)
    run_id, (name, version) = stats["mlflow_run_id"], stats["registered"].rsplit("/", 1)
    model = _get(f"{base}/api/2.0/mlflow/registered-models/get?{urllib.parse.urlencode({'name': name})}")
    model = model["registered_model"]
    aliases = {a["alias"]: a["version"] for a in model.get("aliases", [])}
    model_tags = {t["key"]: t["value"] for t in model.get("tags", [])}

    def version_tags(number: str) -> dict[str, str]:
        query = urllib.parse.urlencode({"name": name, "version": number})
        return {t["key"]: t["value"] for t in _get(f"{base}/api/2.0/mlflow/model-versions/get?{query}")["model_version"]
                ["tags"]}  # fmt: skip

    at_version = {a for a, v in aliases.items() if v == version}
    loaded = [f"Version {version}", ">Aliases<", "dagster.run_id", *(f"@&nbsp;{a}<" for a in sorted(at_version))]
    dom, text = _page(mlflow_server, _materialization(result, "cfrag_retriever")[f"mlflow_version {TASK}"].url, loaded)
    section = text.split("\nAliases\n:\n", 1)[1].split("\nStage (deprecated)", 1)[0].splitlines()
    shown = {line.removeprefix("@ ") for line in section if line.startswith("@ ")}
    assert shown == at_version and registry.CHALLENGER in shown, (shown, aliases)
    tags = version_tags(version)
    lineage = [f"dagster.run_id\n{result.run_id}", "dagster.asset_key\ncfrag_retriever", f"dagster.partition\n{TASK}",
               f"{IMPROVED_TAG}\n{tags[IMPROVED_TAG]}"]  # fmt: skip
    _shown(text, lineage, "the version page")
    experiment = _get(f"{base}/api/2.0/mlflow/runs/get?run_id={run_id}")["run"]["info"]["experiment_id"]
    _shown(dom, [f'href="#/experiments/{experiment}/runs/{run_id}"'], "the version page (its source run)")

    champion = aliases[registry.CHAMPION]
    status = model_tags[registry.CHAMPION_STATUS_TAG]
    assert status.startswith(f"v{champion}: "), status
    champion_tags = version_tags(champion)
    if champion_tags.get("promotion.action") == PROMOTED and champion_tags.get("promotion.to_version") == champion:
        assert "promoted" in status and champion_tags["promotion.message"], (status, champion_tags)
    else:  # never promoted: the first version, champion as such, and the registry says what it is
        assert champion == "1" and "promotion.action" not in champion_tags, champion_tags
        untrained = champion_tags.get(IMPROVED_TAG) == "false"
        assert ("the untrained initialisation" in status) == untrained and ("the first version" in status) != untrained
    text = _text(_dom(mlflow_server, f"/#/models/{name}", [registry.CHAMPION_STATUS_TAG, "Versions"]))
    registered = [f"{registry.CHAMPION_STATUS_TAG}\n{status}", "kind\nretriever", f"task\n{TASK}"]
    _shown(text, registered, "the registered model page")
