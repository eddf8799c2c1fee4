"""Graphs materialized once per test session and read by several test files (each one xdist unit: conftest TOGETHER),
and the per-test tiny config (registered as fixtures through conftest)."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from graph_helpers import materialize_graph, range_tags, real_data_dir, write_config

#: The prefixes of a session fixture's folders and files: tests/conftest.py `_module_folders_removed` keeps these.
SESSION_FOLDERS = ("session-", "demo_home")


@pytest.fixture
def tiny_config(tmp_path):
    """A tiny-demo config under a fresh home, with the deterministic fake generator (fast plumbing tests)."""
    home = tmp_path / "home"
    return write_config(tmp_path / "prag.toml", home, generator_backend="fake")


#: The tasks of the session's demo home (two, so that a partition's metadata can be told from the run's).
DEMO_TASKS = ["LaMP-2", "LaMP-3"]


@dataclass(frozen=True)
class DemoHome:
    """A materialized tiny demo: its config, prag home, Dagster storage and the run of the job prag_demo."""

    root: Path
    run_id: str

    @property
    def config(self) -> Path:
        """The demo's prag.toml."""
        return self.root / "prag.toml"

    @property
    def home(self) -> Path:
        """The demo's prag home (DuckDB, MLflow, reports)."""
        return self.root / "home"

    @property
    def storage(self) -> Path:
        """The demo's Dagster storage (runs, event log)."""
        return self.root / "dagster"

    def instance(self):
        """The Dagster instance holding the demo's runs and materializations (sqlite under storage)."""
        import dagster as dg
        from dagster._core.instance.ref import InstanceRef

        return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(self.storage)))

    def copy(self, dest: Path) -> "DemoHome":
        """A private copy for a test that writes (the shared home is read by several modules at once)."""
        shutil.copytree(self.root, dest)
        text = (dest / "prag.toml").read_text(encoding="utf-8").replace(str(self.root), str(dest))
        (dest / "prag.toml").write_text(text, encoding="utf-8")
        return DemoHome(dest, self.run_id)


def build_demo_home(root: Path) -> str:
    """Run the job prag_demo (the main pipeline, fake generator) over DEMO_TASKS into root; returns the run id."""
    import dagster as dg

    from prag_assets.automation.demo_job import PRAG_DEMO_JOB, demo_job, location_tags
    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources
    from prag_models.config.settings import load_settings

    config = write_config(root / "prag.toml", root / "home", generator_backend="fake", data={"tasks": DEMO_TASKS})
    home = DemoHome(root, "")
    (home.storage / "logs").mkdir(parents=True, exist_ok=True)
    # no telemetry: without a DAGSTER_HOME its files would land in the working directory (the repository)
    (home.storage / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    job_defs = dg.Definitions(
        assets=list(defs.assets), asset_checks=list(defs.asset_checks), jobs=[demo_job(load_settings(config))],
        resources=default_resources(config_file=str(config)), executor=dg.in_process_executor,
    )  # fmt: skip
    result = job_defs.resolve_job_def(PRAG_DEMO_JOB).execute_in_process(
        instance=home.instance(),
        tags={**range_tags(DEMO_TASKS), **location_tags()},  # as prag materialize tags its runs
    )
    assert result.success
    return result.run_id


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory) -> DemoHome:
    """One tiny demo per test session, materialized by the job prag_demo; xdist workers share it (the first builds
    it under a file lock). Read it only: a test that writes takes `demo_home.copy(tmp_path / "demo")`.
    PRAG_TEST_DEMO_ROOT=DIR keeps it in DIR across sessions (built there once; delete DIR after changing the code)."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, shared by the workers
    root = Path(os.environ.get("PRAG_TEST_DEMO_ROOT") or root)
    root.mkdir(parents=True, exist_ok=True)
    base = root / "demo_home"
    with FileLock(str(root / "demo_home.lock")):
        built = root / "demo_home.run_id"
        if not built.exists():
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir(parents=True)
            built.write_text(build_demo_home(base), encoding="utf-8")
        return DemoHome(base, built.read_text(encoding="utf-8"))


def poison_dev(con, task: str) -> None:
    """Make every dev sample's relevance labels (all of its asker's documents) and gold wrong: a search that reads dev
    would change."""
    con.execute("DELETE FROM relevance_labels WHERE task = ? AND sample_id IN "
                "(SELECT sample_id FROM lamp_samples WHERE task = ? AND split = 'dev')", [task, task])  # fmt: skip
    con.execute("INSERT INTO relevance_labels SELECT task, sample_id, doc_id FROM "
                "(SELECT s.task, s.sample_id, d.doc_id FROM lamp_samples s JOIN profile_documents d USING (task) "
                "WHERE s.task = ? AND s.split = 'dev' AND d.user_id = s.user_id)", [task])  # fmt: skip
    con.execute("UPDATE lamp_samples SET gold = 'poison' WHERE task = ? AND split = 'dev'", [task])


#: The served graph's task and CFRAG settings (`served_graph`).
SERVED_TASK = "LaMP-2"
SERVED_CFRAG = {"epochs": 10, "reranker_layers": 1, "reranker_max_length": 64}


@pytest.fixture(scope="session")
def served_graph(tmp_path_factory):
    """LaMP-2 materialized up to cfrag_retrievals (fake generator), once per session for the serving tests (read
    only; one xdist unit: TOGETHER); (settings, dev samples, cfrag_retrievals, cfrag_similar_users)."""
    import dagster as dg
    import duckdb

    from prag_models.config.settings import load_settings

    tmp, task = tmp_path_factory.mktemp(SESSION_FOLDERS[0] + "serving"), SERVED_TASK
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake", data={"tasks": [task]},
                          cfrag=SERVED_CFRAG)  # fmt: skip
    result = materialize_graph(config, [task], selection=dg.AssetSelection.assets("cfrag_retrievals").upstream())
    assert result.success
    settings = load_settings(config)
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        samples = con.execute("SELECT sample_id, user_id, query FROM lamp_samples WHERE task = ? AND split = 'dev' "
                              "ORDER BY sample_id", [task]).df()  # fmt: skip
        retrievals = con.execute("SELECT * FROM cfrag_retrievals WHERE task = ?", [task]).df()
        similar = con.execute("SELECT user_id, neighbour_id FROM cfrag_similar_users WHERE task = ? "
                              "ORDER BY user_id, rank", [task]).df()  # fmt: skip
    return settings, samples, retrievals, similar


#: The retrieval-evaluation demo (`evaluated_graph`): 48 users in 4 communities, where collaboration matters.
EVALUATED_TASK = "LaMP-2"
EVALUATED_DEV = 24


@pytest.fixture(scope="session")
def evaluated_graph(tmp_path_factory):
    """LaMP-2 of that demo materialized up to lamp_retrieval_evaluation with ClusterRAG's tuning on, once per session
    for tests/test_retrieval_eval_graph.py and tests/test_tuning.py (read only; one xdist unit: TOGETHER);
    (config, home, result)."""
    import dagster as dg

    tmp = tmp_path_factory.mktemp(SESSION_FOLDERS[0] + "evaluated")
    home = tmp / "home"
    data = {"demo_users": 48, "demo_communities": 4, "demo_dev_samples": EVALUATED_DEV, "tasks": [EVALUATED_TASK],
            "llm_eval_samples": 6}  # fmt: skip
    config = write_config(tmp / "prag.toml", home, generator_backend="fake", data=data,
                          tuning={"enabled": True, "budget_s": 20.0, "max_trials": 10})  # fmt: skip
    selection = dg.AssetSelection.assets("lamp_retrieval_evaluation").upstream()
    result = materialize_graph(config, [EVALUATED_TASK], selection=selection)
    assert result.success
    return config, home, result


@pytest.fixture(scope="session")
def personabench_graph(tmp_path_factory):
    """The retrieval_eval group on the real PersonaBench community 1 (replayed expansions, fake generator, PBR's
    tuning on), once per session for tests/test_pbr_graph.py and tests/test_pbr_tuning.py (read only; one xdist
    unit: TOGETHER): embedding its segments is most of the time; (config, result)."""
    import dagster as dg

    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources

    if not (real_data_dir() / "personabench").is_dir():
        pytest.skip(f"real PersonaBench data not found at {real_data_dir()} (set PRAG_REAL_DATA)")
    tmp = tmp_path_factory.mktemp(SESSION_FOLDERS[0] + "personabench")
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake",
                          data={"real_data_dir": str(real_data_dir())}, tuning={"enabled": True, "budget_s": 4.0},
                          pbr={"datasets": ["personabench"]})  # fmt: skip
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=default_resources(config_file=str(config)),
                            selection=dg.AssetSelection.groups("retrieval_eval"))  # fmt: skip
    assert result.success
    return config, result
