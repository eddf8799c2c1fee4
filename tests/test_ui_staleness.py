"""No false "Unsynced" in the Dagster UI (issue 50.2): after a run as `prag materialize` launches it (a child process
with the home's Dagster instance and the run.* settings its budget cut), Dagster's own staleness machinery, over the
code locations of workspace.yaml loaded with the environment scripts/ui.sh gives them (the home's prag.toml, no run.*
variable, data.real_data_dir where scripts/real_data.sh finds ../shared/data), marks no asset partition stale; after
one setting changes in the home's prag.toml, exactly the assets whose rows depend on it are."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from conftest import ROOT, write_config

from prag_models.config.settings import load_settings

TASK = "LaMP-2"
#: What a budget that cannot pay the LLM work whole passes the run (prag_assets/cli/budget.py child_env): run
#: configuration, which must move no code version.
CUT = {"generation_samples": 0, "llm_budget_s": 12.5, "feedback_budget_s": 3.0}
#: The groups whose rows depend on the clustering settings (tests/test_code_versions.py MUST_CHANGE).
CLUSTERING_GROUPS = {"users", "history", "retrieval", "cfrag"}


def _asset_versions(environ: dict[str, str]) -> dict[str, tuple[str, str]]:
    """asset -> (group, code version) as prag_assets.definitions derives them under these environment variables."""
    import dagster as dg

    from prag_assets.builders.code_versions import versioned
    from prag_assets.definitions import ASSET_MODULES

    settings = load_settings(environ={"PRAG_HOME": "/nonexistent", **environ})
    assets = versioned(dg.load_assets_from_modules(ASSET_MODULES), ASSET_MODULES, settings)
    return {k.to_user_string(): (s.group_name, s.code_version) for a in assets for k, s in a.specs_by_key.items()}


def test_budget_cuts_and_the_real_data_folder_move_no_lamp_code_version() -> None:
    """The run.* values `prag materialize` passes its run move no version; data.real_data_dir (set by
    scripts/ui.sh where ../shared/data exists, not by a bare `prag materialize`) moves group retrieval_eval's only."""
    from prag_assets.cli.budget import child_env

    settings = load_settings(environ={"PRAG_HOME": "/nonexistent"})
    cut = child_env(settings.model_copy(update={"run": settings.run.model_copy(update=CUT)}))
    base = _asset_versions({})
    assert _asset_versions(cut) == base
    real = _asset_versions({"PRAG__DATA__REAL_DATA_DIR": "/data/shared"})
    moved = {asset for asset, (_, version) in real.items() if version != base[asset][1]}
    assert moved and moved == {asset for asset, (group, _) in base.items() if group == "retrieval_eval"}


def _ran_home(root: Path, extra_env: dict[str, str] | None = None) -> Path:
    """A home holding its prag.toml (where the UIs find it) in which the job prag_demo ran over LaMP-2 as `prag
    materialize` launches it: prag_assets/cli/run_graph.py in a child process, the home's Dagster instance, the
    run.* settings of a budget that deferred the generated outputs in its environment (and no real-data folder),
    plus ``extra_env`` (settings given to that run alone)."""
    from prag_assets.automation.demo_job import PRAG_DEMO_JOB, launch_tags
    from prag_assets.cli.budget import child_env
    from prag_assets.cli.commands import dagster_env, run_command

    home = root / "home"
    home.mkdir()
    write_config(home / "prag.toml", home, generator_backend="fake", data={"tasks": [TASK]})
    settings = load_settings(environ={"PRAG_HOME": str(home)})
    cut = settings.model_copy(update={"run": settings.run.model_copy(update=CUT)})
    env = {k: v for k, v in dagster_env(settings, warn=False).items() if not k.startswith("PRAG__")}
    env = env | child_env(cut) | {"PRAG_HOME": str(home), "HF_HUB_OFFLINE": "1"} | (extra_env or {})
    env.pop("PRAG_CONFIG", None)
    cmd = run_command("", f"{TASK}...{TASK}", "test", job=PRAG_DEMO_JOB, tags=launch_tags(cut, "test", ROOT))
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    return home


@pytest.fixture(scope="module")
def ran_home(tmp_path_factory) -> Path:
    """The demo job's run over LaMP-2 with a budget's cuts (see _ran_home)."""
    return _ran_home(tmp_path_factory.mktemp("staleness"))


def _ui_environment(home: Path) -> dict[str, str]:
    """The environment scripts/ui.sh starts `dagster dev` with: scripts/env.sh, run_settings.sh and real_data.sh
    sourced in a shell with no PRAG_ or DAGSTER_ variable but the home (and a real-data folder, as real_data.sh sets
    it where ../shared/data exists: a bare `prag materialize` ran without it)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PRAG_", "DAGSTER_"))}
    real = home.parent / "real_data"
    real.mkdir(exist_ok=True)
    base |= {"PRAG_HOME": str(home), "PRAG__DATA__REAL_DATA_DIR": str(real)}
    script = "source scripts/env.sh && source scripts/run_settings.sh && source scripts/real_data.sh && env -0"
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, env=base, capture_output=True, check=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def _ui_statuses(monkeypatch: pytest.MonkeyPatch, home: Path) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """'asset[partition]' -> (stale status, group, causes) of every materialized asset partition, as the Dagster UI
    computes them: workspace.yaml's code locations loaded in code servers with scripts/ui.sh's environment, the
    instance of its DAGSTER_HOME, the request context's CachingStaleStatusResolver."""
    import dagster as dg
    from dagster._core.definitions.data_version import StaleStatus
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    for name in [n for n in os.environ if n.startswith(("PRAG_", "DAGSTER_"))]:
        monkeypatch.delenv(name)
    for name, value in _ui_environment(home).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT)
    out = {}
    target = WorkspaceFileTarget([str(ROOT / "workspace.yaml")])
    with dg.DagsterInstance.get() as instance, WorkspaceProcessContext(instance, target) as process:
        context = process.create_request_context()
        entries = context.get_code_location_entries()
        assert not [e.load_error for e in entries.values() if e.load_error], "a code location failed to load"
        graph, resolver = context.asset_graph, context.stale_status_loader
        for key in graph.get_all_asset_keys():
            node = graph.get(key)
            for partition in node.partitions_def.get_partition_keys() if node.partitions_def else [None]:
                status = resolver.get_status(key, partition)
                if status != StaleStatus.MISSING:
                    causes = tuple(c.reason for c in resolver.get_stale_causes(key, partition))
                    out[f"{key.to_user_string()}[{partition or ''}]"] = (status.value, node.group_name, causes)
    return out


@pytest.mark.models  # materializes the graph with the real embedder (the fast tier leaves it out)
def test_the_ui_marks_nothing_unsynced_after_a_run_with_budget_cuts(ran_home, monkeypatch) -> None:
    """Every asset partition the run materialized is fresh in the UI's eyes, though the run had run.* variables the
    UI has not and the UI a real-data folder the run had not."""
    statuses = _ui_statuses(monkeypatch, ran_home)
    ran = {"user_clusters[LaMP-2]", "generations[LaMP-2]", "lamp_evaluation[LaMP-2]", "lamp_evaluation_report[]"}
    assert ran <= set(statuses)
    stale = {asset: causes for asset, (status, _, causes) in statuses.items() if status != "FRESH"}
    assert not stale, f"Unsynced in the UI right after the run: {stale}"


@pytest.mark.models
def test_a_setting_edited_in_the_homes_prag_toml_makes_its_dependents_unsynced(ran_home, tmp_path, monkeypatch) -> None:
    """clustering.similar_users edited in a copy of the home's prag.toml: every asset of the groups whose rows read
    the clustering settings is "Unsynced" (a new code version), no other (the LaMP data, the embeddings, the
    generated outputs and their evaluation stay fresh)."""
    import tomllib

    home = tmp_path / "home"
    shutil.copytree(ran_home, home)
    config = tomllib.loads((home / "prag.toml").read_text(encoding="utf-8"))
    config["home"] = str(home)
    config["clustering"]["similar_users"] += 1
    (home / "prag.toml").write_text(tomli_w.dumps(config), encoding="utf-8")
    statuses = _ui_statuses(monkeypatch, home)
    stale = {asset for asset, (status, _, _) in statuses.items() if status == "STALE"}
    expected = {asset for asset, (_, group, _) in statuses.items() if group in CLUSTERING_GROUPS}
    assert {"user_clusters[LaMP-2]", "similar_users[LaMP-2]", "clusterrag_retrievals[LaMP-2]"} <= expected
    assert stale == expected
    assert {causes for asset, (_, _, causes) in statuses.items() if asset in stale} == {("has a new code version",)}
    fresh = {asset for asset, (status, _, _) in statuses.items() if status == "FRESH"}
    assert {"lamp_samples[LaMP-2]", "document_embeddings[LaMP-2]", "generations[LaMP-2]",
            "lamp_evaluation_report[]"} <= fresh  # fmt: skip


@pytest.mark.models
def test_a_setting_given_to_the_run_alone_is_the_uis_configuration_too(tmp_path, monkeypatch) -> None:
    """Issue 50.2: `PRAG__CLUSTERING__SIMILAR_USERS=<n+1> prag materialize` (a setting the home's prag.toml does not
    say): the run records it in the home's run_settings.env, scripts/ui.sh loads it, and the UI marks nothing
    Unsynced; without the record (the UI reading prag.toml alone) the clustering groups' assets are Unsynced."""
    similar = load_settings().clustering.similar_users + 1
    home = _ran_home(tmp_path, {"PRAG__CLUSTERING__SIMILAR_USERS": str(similar)})
    recorded = (home / "run_settings.env").read_text(encoding="utf-8")
    assert f"PRAG__CLUSTERING__SIMILAR_USERS={similar}" in recorded and "PRAG__RUN__" not in recorded, recorded
    statuses = _ui_statuses(monkeypatch, home)
    stale = {asset: causes for asset, (status, _, causes) in statuses.items() if status != "FRESH"}
    assert "user_clusters[LaMP-2]" in statuses and not stale, f"Unsynced in the UI right after the run: {stale}"
    (home / "run_settings.env").unlink()
    statuses = _ui_statuses(monkeypatch, home)
    stale = {asset for asset, (status, _, _) in statuses.items() if status == "STALE"}
    assert {"user_clusters[LaMP-2]", "similar_users[LaMP-2]"} <= stale


@pytest.mark.models
def test_a_run_of_prag_materialize_is_a_run_of_the_code_location(ran_home, tmp_path, monkeypatch) -> None:
    """Issue 50.1: the run `prag materialize` launched (the job prag_demo in its child process) carries the origin
    the workspace's code location gives its runs (location "prag", its repository, the job), and the Dagster UI's
    Overview timeline lists it under that job. Failed before: the run had no origin and the timeline said "No runs
    or scheduled ticks in this time period"."""
    import dagster as dg
    from test_ui import CHROMIUM, _dom, _free_port, _stop, _wait_until_loaded

    environment = _ui_environment(ran_home)
    for name in [n for n in os.environ if n.startswith(("PRAG_", "DAGSTER_"))]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with dg.DagsterInstance.get() as instance:
        (run,) = [r for r in instance.get_runs() if r.job_name == "prag_demo"]
    origin = run.remote_job_origin
    assert origin is not None, "the run carries no code-location origin"
    assert (origin.location_name, origin.repository_origin.repository_name, origin.job_name) == (
        "prag", "__repository__", "prag_demo")
    if not Path(CHROMIUM).exists():
        pytest.skip("headless Chromium is not installed (run scripts/install_chromium.sh)")
    port, log = _free_port(), tmp_path / "dagster_dev.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
                                 "-p", str(port)], cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_until_loaded(base, proc, log)
        dom = _dom({"base": base, "tmp": tmp_path}, "/overview/activity/timeline", ["prag_demo"])
        assert "No runs or scheduled ticks" not in dom
    finally:
        _stop(proc)
