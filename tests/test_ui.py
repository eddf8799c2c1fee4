"""The real Dagster UI: `dagster dev` with the project's workspace.yaml and dagster.yaml on a copy of the session's
demo home (tests/session_graphs.py `demo_home`: the job prag_demo run over LaMP-2 and LaMP-3, its runs in the copied
Dagster storage).

Pages are rendered by headless Chromium (install it with scripts/install_chromium.sh; the tests skip without it);
a materialization is launched through the webserver's GraphQL API and runs through the daemon's run queue.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import duckdb
import pytest
from conftest import DEMO_TASKS, ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
STARTUP_S = 240
RUN_S = 300

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="headless Chromium is not installed (run scripts/install_chromium.sh)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(base: str, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{base}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        data = json.loads(response.read())
    assert "errors" not in data, data["errors"]
    return data["data"]


LOCATIONS = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def _wait_until_loaded(base: str, proc: subprocess.Popen, log: Path) -> None:
    """Wait (bounded) until the webserver answers and the code location 'prag' is loaded."""
    deadline = time.monotonic() + STARTUP_S
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dagster dev exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            entries = _graphql(base, LOCATIONS)["workspaceOrError"]["locationEntries"]
            entry = next(e for e in entries if e["name"] == "prag")
            error = entry["locationOrLoadError"] or {}
            if error.get("__typename") == "PythonError":
                pytest.fail(f"code location prag failed to load: {error['message']}")
            if entry["loadStatus"] == "LOADED" and error.get("__typename") == "RepositoryLocation":
                return
            last = entry["loadStatus"]
        except (urllib.error.URLError, ConnectionError, TimeoutError, StopIteration) as exc:
            last = repr(exc)
        time.sleep(1)
    pytest.fail(f"dagster dev not ready after {STARTUP_S} s (last: {last}):\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def ui(tmp_path_factory, demo_home):
    """`dagster dev` on a free port over a copy of the demo home; its process group is killed at the end."""
    tmp = tmp_path_factory.mktemp("ui")
    demo = demo_home.copy(tmp / "demo")
    config, storage = demo.config, demo.storage
    (storage / "logs").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DAGSTER_HOME": str(ROOT), "PRAG_HOME": str(demo.home), "PRAG_CONFIG": str(config),
           "PRAG_DAGSTER_STORAGE": str(storage), "PRAG_DAGSTER_LOGS": str(storage / "logs"), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "GX_ANALYTICS_ENABLED": "false",
           "MLFLOW_DISABLE_TELEMETRY": "true", "DAGSTER_DISABLE_TELEMETRY": "true"}
    port = _free_port()
    log = tmp / "dagster_dev.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_until_loaded(base, proc, log)
        yield {"base": base, "config": config, "tmp": tmp, "log": log, "home": demo.home, "run_id": demo.run_id}
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the whole process group: SIGTERM, then SIGKILL after a grace period."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            os.killpg(proc.pid, 0)  # children left in the group?
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _dom(ui: dict, path: str, expected: list[str], attempts: int = 3) -> str:
    """The rendered DOM of a UI page (headless Chromium), retried until every expected text appears."""
    dom = ""
    for attempt in range(attempts):
        profile = ui["tmp"] / f"chrome-{abs(hash(path))}-{attempt}"
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--window-size=2400,1600", f"--user-data-dir={profile}",
             f"--virtual-time-budget={20000 * (attempt + 1)}", "--dump-dom", ui["base"] + path],
            capture_output=True, text=True, timeout=180)
        dom = proc.stdout
        if all(text in dom for text in expected):
            return dom
    missing = [t for t in expected if t not in dom]
    pytest.fail(f"{path}: {missing} not rendered (DOM of {len(dom)} chars)")


def test_asset_graph_lists_groups_assets_and_checks(ui):
    """The lineage pages show every group, the users and history assets, and the incremental check."""
    _dom(ui, "/asset-groups", ["lamp_data", "embeddings", "users", "history", "retrieval", "generation", "evaluation"])
    _dom(ui, "/locations/prag/asset-groups/users",
         ["user_embeddings", "user_clusters", "similar_users", "cluster_drift", "cluster_state"])
    _dom(ui, "/locations/prag/asset-groups/history",
         ["profile_history", "incremental_user_clusters", "incremental_similar_users"])
    _dom(ui, "/assets/incremental_user_clusters?view=checks", ["every_user_one_cluster"])
    dom = _dom(ui, "/assets/incremental_user_clusters", ["incremental_user_clusters"])
    assert "approximate prediction" in dom  # the asset's description


LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } ... on InvalidSubsetError { message }
  ... on RunConfigValidationInvalid { errors { message } } ... on UnauthorizedError { message } } }"""
STATUS = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"
EVENTS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { eventConnection { events { __typename
  ... on MessageEvent { message } ... on ExecutionStepFailureEvent { error { message } }
  ... on EngineEvent { error { message } } } } } } }"""


def test_graphql_launches_a_materialization(ui):
    """launchRun for lamp_samples + profile_documents of LaMP-2 (fake generator) reaches SUCCESS through the queue."""
    params = {
        "selector": {"repositoryLocationName": "prag", "repositoryName": "__repository__", "jobName": "__ASSET_JOB",
                     "assetSelection": [{"path": ["lamp_samples"]}, {"path": ["profile_documents"]}],
                     "assetCheckSelection": []},
        "runConfigData": "{}",
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "LaMP-2"}]},
    }
    launched = _graphql(ui["base"], LAUNCH, {"p": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline, status = time.monotonic() + RUN_S, "?"
    while time.monotonic() < deadline:
        status = _graphql(ui["base"], STATUS, {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(2)
    if status != "SUCCESS":
        events = _graphql(ui["base"], EVENTS, {"id": run_id})["runOrError"]["eventConnection"]["events"]
        errors = [(e.get("message"), (e.get("error") or {}).get("message")) for e in events if e.get("error")]
        pytest.fail(f"run {run_id} ended {status} after at most {RUN_S} s: {errors}")
    home = ui["home"] / "prag.duckdb"
    with duckdb.connect(str(home), read_only=True) as con:
        n = con.execute("SELECT count(*) FROM profile_documents WHERE task = 'LaMP-2'").fetchall()[0][0]
    assert n > 0


MATERIALIZATION = """query($key: AssetKeyInput!, $partition: String!) { assetOrError(assetKey: $key) { ... on Asset {
  assetMaterializations(partitions: [$partition], limit: 1) { partition metadataEntries { label __typename
    ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue }
    ... on TableMetadataEntry { table { records } } } } } } }"""


def test_task_partition_of_the_retrieval_evaluation_shows_only_that_task(ui):
    """The LaMP-2 partition of lamp_retrieval_evaluation: its table holds LaMP-2 rows only, its row count is LaMP-2's
    (the run covered LaMP-2 and LaMP-3), and the partition page renders them."""
    task, other = DEMO_TASKS
    found = _graphql(ui["base"], MATERIALIZATION, {"key": {"path": ["lamp_retrieval_evaluation"]}, "partition": task})
    (materialization,) = found["assetOrError"]["assetMaterializations"]
    entries = {e["label"]: e for e in materialization["metadataEntries"]}
    tasks = {json.loads(r)["task"] for r in entries["table"]["table"]["records"]}
    with duckdb.connect(str(ui["home"] / "prag.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT count(*) FROM lamp_retrieval_evaluation WHERE task = ?", [task]).fetchone()[0]
    assert tasks == {task} and entries["dagster/row_count"]["intValue"] == rows and "per_task" not in entries
    dom = _dom(ui, f"/assets/lamp_retrieval_evaluation?view=partitions&partition={task}",
               ["primary_metric", "best_method", "reference"])
    assert f"{other} " not in dom.split("primary_metric", 1)[1][:20000]  # no column of the other task


def test_the_gain_per_task_is_charted_in_the_plots_tab(ui):
    """Issue 50.4, the chart where it shows: each task partition of lamp_retrieval_evaluation reports the verdict's
    gain over dense_global, its 95 % interval and n as numbers (the report's own figures), and the asset's Plots tab
    charts them across the partitions, no "Show Markdown" click."""
    from prag_models.config.settings import load_settings
    from prag_models.evaluation.verdict import verdicts_for
    from prag_models.evaluation.verdict_view import GAIN_KEYS

    with duckdb.connect(str(ui["home"] / "prag.duckdb"), read_only=True) as con:
        report = verdicts_for(con, load_settings(ui["config"]), list(DEMO_TASKS)).set_index("task")
    for task in DEMO_TASKS:
        found = _graphql(ui["base"], MATERIALIZATION, {"key": {"path": ["lamp_retrieval_evaluation"]},
                                                       "partition": task})  # fmt: skip
        (materialization,) = found["assetOrError"]["assetMaterializations"]
        numbers = {e["label"]: e.get("floatValue") for e in materialization["metadataEntries"]}
        for column, label in GAIN_KEYS.items():
            assert numbers[label] == pytest.approx(float(report.at[task, column])), (task, label, numbers)
    plots = _evaluate(ui, "/assets/lamp_retrieval_evaluation?view=overview", PLOTS, width=1280)
    assert plots is not None, "the Plots toggle did not chart the partitions' numbers"
    assert set(plots["titles"]) == {GAIN_KEYS["gain"], GAIN_KEYS["gain_low"], GAIN_KEYS["gain_high"]}, plots
    assert plots["charts"] >= 3, plots


#: Clicks the "Plots" toggle of the Overview tab's metadata once, then reports the charts drawn and their gain titles.
PLOTS = """(() => {
  const text = document.body ? document.body.innerText : '';
  if (window.__pragPlots) {
    const charts = document.querySelectorAll('canvas').length;
    const titles = ['verdict gain over dense_global', 'verdict gain, 95 % low', 'verdict gain, 95 % high']
      .filter(t => text.includes(t));
    return charts ? {charts, titles} : null;
  }
  const toggle = [...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Plots');
  if (toggle) { toggle.click(); window.__pragPlots = true; }
  return null;
})()"""


def test_report_opens_with_the_verdict(ui):
    """The report asset's page shows the short verdict first, then every verdict column (markdown), the chart of the
    verdict's gain (a markdown image; its PNG's path below), then the compact method x task table. The short verdict
    is a table rendered inline (its headers in the page, not behind "Show Markdown")."""
    dom = _dom(ui, "/assets/lamp_evaluation_report", ["primary_metric", "chart", "every_column", "verdict_gain.png",
                                                       "gain [95 % CI]", "LLM evidence"])  # fmt: skip
    positions = [dom.find(f">{label}<") for label in ("verdict", "every_column", "chart", "primary_metric")]
    assert -1 not in positions and positions == sorted(positions), positions


SHORT_VERDICT_BOX = """(() => {
  const th = [...document.querySelectorAll('th')].find(e => e.textContent.trim() === 'LLM evidence');
  const table = th && th.closest('table');
  if (!table || table.querySelectorAll('tr').length < 2) return null;
  const box = table.getBoundingClientRect();
  const tables = [...document.querySelectorAll('table')].map(t => [t.querySelector('th, td').textContent.slice(0, 30),
    Math.round(t.getBoundingClientRect().left), Math.round(t.getBoundingClientRect().width)]);
  return {left: box.left, right: box.right, viewport: window.innerWidth, page: document.documentElement.scrollWidth,
          tables};
})()"""


def test_short_verdict_fits_at_1280_px(ui):
    """Issue 50.4: on the report asset's Events tab (its latest materialization), as Dagster opens it (navigation
    shown) in a window 1,280 px wide, the short verdict table's six columns all lie inside the window: no metadata
    entry widens the metadata column past it, and the page does not scroll sideways."""
    box = _evaluate(ui, "/assets/lamp_evaluation_report?view=events", SHORT_VERDICT_BOX, width=1280)
    assert box is not None, "the short verdict table was not rendered"
    assert 0 < box["left"] < box["right"] <= box["viewport"] == 1280 and box["page"] == 1280, json.dumps(box)


def _evaluate(ui: dict, path: str, expression: str, width: int, height: int = 900, timeout_s: int = 120):
    """The value of a JavaScript ``expression`` on a UI page in headless Chromium ``width`` px wide (over the DevTools
    pipe, fds 3 and 4), evaluated every second until it is not null; None if it stays null for ``timeout_s``."""
    to_chrome, from_chrome = os.pipe(), os.pipe()

    def _pipe_fds() -> None:
        os.dup2(to_chrome[0], 3)
        os.dup2(from_chrome[1], 4)

    profile = ui["tmp"] / f"chrome-devtools-{abs(hash(path))}-{width}"
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         "--hide-scrollbars", f"--window-size={width},{height}", f"--user-data-dir={profile}",
         "--remote-debugging-pipe", "about:blank"],
        pass_fds=(3, 4), preexec_fn=_pipe_fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)  # fmt: skip
    os.close(to_chrome[0])
    os.close(from_chrome[1])
    received, ids = b"", iter(range(1, 1_000_000))

    def call(method: str, session: str | None = None, **params) -> dict:
        nonlocal received
        number = next(ids)
        message = {"id": number, "method": method, "params": params} | ({"sessionId": session} if session else {})
        os.write(to_chrome[1], json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in received:
                chunk = os.read(from_chrome[0], 1 << 16)
                assert chunk, "Chromium closed the DevTools pipe"
                received += chunk
            reply, received = received.split(b"\0", 1)
            answer = json.loads(reply)
            if answer.get("id") == number:
                assert "error" not in answer, answer
                return answer["result"]

    try:
        target = call("Target.createTarget", url="about:blank")["targetId"]
        session = call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        call("Emulation.setDeviceMetricsOverride", session, width=width, height=height, deviceScaleFactor=1,
             mobile=False)  # fmt: skip
        call("Page.navigate", session, url=ui["base"] + path)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = call("Runtime.evaluate", session, expression=expression, returnByValue=True)["result"].get("value")
            if value is not None:
                return value
            time.sleep(1)
        return None
    finally:
        os.close(to_chrome[1])
        os.close(from_chrome[0])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_runs_are_listed_under_the_named_job(ui):
    """The runs list filtered by the job prag_demo shows the demo's run with its data, tasks and settings tags, and
    so does the job's own page in the code location (issue 50.1: an in-process run tagged with the location's
    repository label, as `prag materialize` tags its runs)."""
    _dom(ui, "/runs?q%5B0%5D=job%3Aprag_demo",
         [ui["run_id"][:8], "prag/tasks: LaMP-2,LaMP-3", "prag/data_source: demo", "prag/settings_hash"])
    _dom(ui, "/locations/prag/jobs/prag_demo/runs", [ui["run_id"][:8]])


LINKS = """query($key: AssetKeyInput!, $partition: String!) { assetOrError(assetKey: $key) { ... on Asset {
  assetMaterializations(partitions: [$partition], limit: 1) { metadataEntries { label
    ... on UrlMetadataEntry { url } } } } } }"""


def test_training_asset_links_its_mlflow_run_and_version(ui):
    """Lineage from Dagster to MLflow in the UI: the LaMP-2 partition of cfrag_retriever renders links that open the
    MLflow UI on the run that trained the registered version and on that version (ids from cfrag_models)."""
    task = DEMO_TASKS[0]
    found = _graphql(ui["base"], LINKS, {"key": {"path": ["cfrag_retriever"]}, "partition": task})
    (materialization,) = found["assetOrError"]["assetMaterializations"]
    urls = {e["label"]: e.get("url") for e in materialization["metadataEntries"]}
    with duckdb.connect(str(ui["home"] / "prag.duckdb"), read_only=True) as con:
        run_id, name, version = con.execute("SELECT run_id, registered_name, version FROM cfrag_models "
                                            "WHERE task = ? AND kind = 'retriever'", [task]).fetchone()  # fmt: skip
    run_url, version_url = urls[f"mlflow_run {task}"], urls[f"mlflow_version {task}"]
    assert all(u.endswith("?workflowType=machine_learning") for u in (run_url, version_url))  # MLflow's classic view
    assert run_url.split("?")[0].endswith(f"/runs/{run_id}")
    assert version_url.split("?")[0].endswith(f"/models/{name}/versions/{version}")
    dom = _dom(ui, f"/assets/cfrag_retriever?view=partitions&partition={task}", [f"mlflow_run {task}"])
    for url in (run_url, version_url):
        assert f'href="{url.replace("&", "&amp;")}"' in dom, f"{url} is not a link on the partition page"
