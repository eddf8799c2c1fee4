"""Every MLflow run prag writes links back to the Dagster run that wrote it, and the registry list says which champions
are untrained (issue 50): the tuning searches carry the same Dagster tags as the trainings (run id, job, asset,
partition, the run's page at run.dagster_ui_url's port); MLflow's registered-models list shows the champion tag first.
In-process materialization of a named job with a real MLflow sqlite store; the list page rendered by headless
Chromium in a real `mlflow server` (skipped without Chromium)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import dagster as dg
import pytest
import torch
from graph_helpers import range_tags, write_config
from test_lineage import _text
from test_mlflow_serving import running_mlflow_server
from test_ui import CHROMIUM, _dom

from prag_assets.cli.ui_port import configured_port
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import load_settings
from prag_models.methods.cfrag.retriever import PersonalizedRetriever
from prag_models.methods.cfrag.serialization import save_model
from prag_models.mlops import registry
from prag_models.mlops.runs import Lineage

pytestmark = pytest.mark.models  # the graph embeds with the real embedder

TASKS = ["LaMP-2", "LaMP-3"]  # a range of two: one step of each asset searches both tasks
DAGSTER_UI = "http://127.0.0.1:3917"  # not the default port
JOB = "prag_links"
#: MLflow run name prefix -> the asset that writes the run.
ASSETS = {"tuning": "tuned_settings", "cfrag-tuning": "cfrag_tuned_settings", "prag-user-encoder": "cfrag_user_encoder"}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Both tuning assets and everything upstream (the user encoder's training included) of LaMP-2 and LaMP-3 in one
    run of a named job; (config, settings, run id)."""
    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources

    tmp = tmp_path_factory.mktemp("links")
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake", data={"tasks": TASKS},
                          tuning={"enabled": True, "budget_s": 2.0, "max_trials": 3},
                          run={"dagster_ui_url": DAGSTER_UI})  # fmt: skip
    job = dg.define_asset_job(JOB, selection=dg.AssetSelection.assets("tuned_settings", "cfrag_tuned_settings")
                              .upstream())  # fmt: skip
    job_defs = dg.Definitions(assets=list(defs.assets), asset_checks=list(defs.asset_checks), jobs=[job],
                              resources=default_resources(config_file=str(config)),
                              executor=dg.in_process_executor)  # fmt: skip
    result = job_defs.resolve_job_def(JOB).execute_in_process(tags=range_tags(TASKS))
    assert result.success
    return config, load_settings(config), result.run_id


def test_every_mlflow_run_links_its_dagster_run_at_the_configured_port(tuned, monkeypatch) -> None:
    """Failed first: the tuning runs carried only kind and task. Every run of the experiment — the tuning searches
    of both tasks and the trainings — has the Dagster run id, job, asset and partition, and the run's page at the
    port scripts/ui.sh starts the Dagster UI on (run.dagster_ui_url), as a tag and as a link in its description."""
    config, settings, run_id = tuned
    client = registry.make_client(registry.MlflowTarget(settings.mlflow_uri))
    experiment = client.get_experiment_by_name(settings.mlflow.experiment).experiment_id
    runs = client.search_runs([experiment], max_results=1000)
    expected = {f"{prefix}-{task}" for prefix in ASSETS for task in TASKS}
    assert {r.info.run_name for r in runs} == expected
    monkeypatch.setenv("PRAG_CONFIG", str(config))
    url = f"{DAGSTER_UI}/runs/{run_id}"
    assert urlsplit(url).port == configured_port("dagster") == 3917
    for run in runs:
        tags, task = run.data.tags, run.data.tags["task"]
        asset = ASSETS[run.info.run_name.removesuffix(f"-{task}")]
        lineage = {"dagster.run_id": run_id, "dagster.job": JOB, "dagster.asset_key": asset,
                   "dagster.partition": task, "dagster.run_url": url, "mlflow.source.name": f"dagster asset {asset}"}
        assert {k: tags.get(k) for k in lineage} == lineage, run.info.run_name
        assert f"Dagster run: [{run_id[:8]}]({url})." in tags["mlflow.note.content"], run.info.run_name


def test_a_target_outside_a_dagster_step_carries_no_lineage(tuned) -> None:
    """The command line and the checks write no Dagster tags they do not have."""
    config, _, _ = tuned
    resource = MlflowResource(settings=PragSettingsResource(config_file=str(config)))
    assert resource.target().lineage == Lineage()


needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="headless Chromium is not installed (run scripts/install_chromium.sh)"
)


@needs_chromium
def test_the_registered_models_list_shows_which_champions_are_untrained(tuned, tmp_path) -> None:
    """Failed first: no tag said it (only the version's description). MLflow's registered-models list shows each
    model's tags in the order first set, cut at 1,280 px after about 24 characters: the first is ``champion``, for the
    trained user encoders and for a retriever registered at its initialisation (the feedback probe stopped), each
    with its version."""
    _, settings, _ = tuned
    torch.manual_seed(0)
    folder = save_model(PersonalizedRetriever(user_dim=4, doc_dim=3), tmp_path / "saved")
    elsewhere = registry.MlflowTarget(settings.mlflow_uri, "untrained", str(settings.mlflow_artifacts_path))
    untrained = registry.registered_name("retriever", TASKS[0])
    tags = {"task": TASKS[0], "kind": "retriever", "training.skipped": "no headroom"}  # the probe stopped
    registry.log_and_register(elsewhere, folder, untrained, {}, [], "d1", tags=tags)
    with running_mlflow_server(settings.mlflow_uri, tmp_path / "server.log") as base:
        text = _text(_dom({"base": base, "tmp": tmp_path}, "/#/models", [untrained, "untrained"]))
    names = [registry.registered_name("user_encoder", t) for t in TASKS] + [untrained]
    rows = {name: text.split(f"\n{name}\n", 1)[1] for name in names}
    for name, row in rows.items():
        row = row.split("\nprag-", 1)[0]  # up to the next model's row
        said = "v1 untrained" if name == untrained else "v1 trained"
        assert f"\nchampion\n: {said}\ntask\n" in row, (name, row)  # the first tag of the row
