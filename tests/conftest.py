"""Shared fixtures: offline environment, a tiny demo configuration, in-process materialization of the graph."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w

os.environ.pop("PRAG_HOME", None)
os.environ.pop("PRAG_CONFIG", None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # One worker per core: a second OpenMP thread (torch, llama.cpp) would wait at every barrier for the core the
    # other worker holds, which made the real-model tests several times slower than on one thread.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent

#: Test modules whose tests load a real model (the embedder, a generator, the reranker's encoder), usually through a
#: materialized graph: marked `models`, left out of the fast tier (`scripts/test.sh --fast`). In the fast tier a test
#: elsewhere that loads a model fails and names this list (tests/conftest.py `_no_models_in_fast_tier`).
MODEL_MODULES = {
    "test_asset_metadata", "test_cfrag_fit", "test_cfrag_graph", "test_cfrag_units", "test_check_partitions",
    "test_compute_ray", "test_config", "test_duckdb_resource", "test_graph_e2e", "test_graph_plumbing",
    "test_history_ingest", "test_incremental_sensor", "test_label_scoring", "test_llm_backends",
    "test_mlflow_serving", "test_pbr_graph", "test_promotion", "test_registry", "test_retrieval_data",
    "test_retrieval_eval_graph", "test_ui", "test_bad_input_graph", "test_crash_recovery", "test_inbox",
    "test_marker_graph", "test_gguf_weights", "test_cfrag_training_units", "test_taste", "test_served_privacy",
    "test_feedback_probe", "test_serving_latency", "test_lineage", "test_cfrag_teacher", "test_cfrag_tuning",
    "test_tuning",
}  # fmt: skip
FAST = os.environ.get("PRAG_FAST_TESTS") == "1"

#: What loads a model: (module, class) whose constructor the fast tier refuses.
MODEL_LOADERS = [
    ("prag_models.text.embedder", "Embedder"),
    ("prag_models.llm.llamacpp_backend", "LlamaCppGenerator"),
    ("prag_models.llm.transformers_backend", "TransformersGenerator"),
    ("prag_models.llm.vllm_backend", "VllmGenerator"),
    ("prag_models.methods.cfrag.reranker", "PersonalizedReranker"),
]


def pytest_configure(config) -> None:
    """Register the `models` marker here (a pyproject.toml change would make scripts/setup.sh reinstall the venv)."""
    config.addinivalue_line(
        "markers", "models: loads a real model (embedder, generator, reranker encoder); test.sh --fast leaves it out"
    )


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the tests of MODEL_MODULES `models` (the fast tier deselects them with -m "not models")."""
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in MODEL_MODULES:
            item.add_marker(pytest.mark.models)


#: The test files that read the session's demo home: `--dist loadfile` sends them to one worker as one unit, so the
#: other worker goes on with other files instead of waiting for the demo to be built.
DEMO_FILES = {"test_asset_metadata.py", "test_graph_plumbing.py", "test_ui.py"}
#: Files that share a session fixture, scheduled as one unit likewise (DEMO_FILES: "demo_home").
TOGETHER = {name: "demo_home" for name in DEMO_FILES}
TOGETHER |= {"test_mlflow_serving.py": "served_graph", "test_serving_latency.py": "served_graph",
             "test_retrieval_eval_graph.py": "evaluated_graph", "test_tuning.py": "evaluated_graph",
             "test_pbr_graph.py": "personabench_graph", "test_pbr_tuning.py": "personabench_graph"}  # fmt: skip

#: About how many seconds a file of the CI selection takes beside the other worker (the files of TOGETHER under their
#: unit's name): the scheduler hands out the longest first, so that no long file starts when the other worker is nearly
#: done (xdist's own order, most tests first, started the one-test whole-graph file among the last).
#: Unlisted files take under 12 s and follow in xdist's order. Remeasure with --junitxml after a large change.
FILE_SECONDS = {
    "test_graph_e2e.py": 160, "demo_home": 110, "test_crash_recovery.py": 105, "test_compute_ray.py": 85,
    "personabench_graph": 75, "test_cfrag_teacher.py": 55, "test_lineage.py": 47, "test_promotion.py": 39,
    "test_label_scoring.py": 38, "test_materialize_output.py": 30, "test_verdict.py": 28, "test_cfrag_graph.py": 27,
    "evaluated_graph": 27, "served_graph": 25, "test_served_privacy.py": 22, "test_taste.py": 19,
    "test_marker_graph.py": 15, "test_feedback_probe.py": 15, "test_readme_commands.py": 12, "test_claims.py": 12,
}  # fmt: skip


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, the files of TOGETHER scheduled as one unit each, the longest units first (FILE_SECONDS);
    None: xdist's own scheduler."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return TOGETHER.get(Path(scope).name, scope)

        def _assign_work_unit(self, node) -> None:
            """Before the first unit is handed out, order the queue by FILE_SECONDS (stable: xdist's order else)."""
            if not getattr(self, "_ordered", False):
                self._ordered = True
                units = sorted(self.workqueue.items(), key=lambda unit: -FILE_SECONDS.get(Path(unit[0]).name, 0))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


@pytest.fixture(scope="session", autouse=True)
def _no_models_in_fast_tier_fixtures():
    """In the fast tier, loading a model fails from the start of the session: a module or session fixture that loads
    one (set up before any function-scoped guard) fails too, naming MODEL_MODULES."""
    if not FAST:
        yield
        return
    import importlib

    def refuse(*_args, **_kwargs):
        raise RuntimeError("a fast-tier test or fixture loads a model: add its module to MODEL_MODULES "
                           "(tests/conftest.py)")  # fmt: skip

    with pytest.MonkeyPatch.context() as patch:
        for module, name in MODEL_LOADERS:
            patch.setattr(getattr(importlib.import_module(module), name), "__init__", refuse)
        yield


@pytest.fixture(autouse=True)
def _no_models_in_fast_tier(request, monkeypatch):
    """In the fast tier (PRAG_FAST_TESTS=1), loading a model fails the test: its module belongs in MODEL_MODULES."""
    if not FAST or request.node.get_closest_marker("models"):
        yield
        return
    import importlib

    def refuse(*_args, **_kwargs):
        raise RuntimeError(f"{request.node.nodeid} loads a model: add its module to MODEL_MODULES (tests/conftest.py)")

    for module, name in MODEL_LOADERS:
        monkeypatch.setattr(getattr(importlib.import_module(module), name), "__init__", refuse)
    yield


def real_data_dir() -> Path:
    """The shared real-data folder (PRAG_REAL_DATA, default ../shared/data beside the project)."""
    return Path(os.environ.get("PRAG_REAL_DATA", ROOT.parent / "shared" / "data")).resolve()


def write_config(path: Path, home: Path, generator_backend: str = "llama_cpp", **sections: dict) -> Path:
    """Write a prag.toml for a tiny demo; sections override tables (e.g. data={"tasks": [...]})."""
    base = {
        "data": {"demo_users": 16, "demo_communities": 3, "demo_dev_samples": 4},
        # one llama.cpp thread: the tests run on two workers, one per core (see OMP_NUM_THREADS above)
        "generator": {"backend": generator_backend, "max_new_tokens": 16, "threads": 1},
        "retrieval": {"k": 2},
        "clustering": {"similar_users": 2},
        # the tiny demo's 12 train samples: the whole feedback budget (tests of the probe set it themselves); 4 epochs
        # of retriever/reranker training (30 by default: on a dozen samples the validation gate keeps one of the
        # first few; tests/test_cfrag_teacher.py shows learning with its own settings)
        "cfrag": {"feedback_probe_samples": 0, "train_epochs": 4},
        # tuning spends up to 30 s per task; only tests/test_tuning.py needs it
        "tuning": {"enabled": False},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    path.write_text(tomli_w.dumps({"home": str(home), **base}), encoding="utf-8")
    if not (home / "mlflow.db").exists() and "tracking_uri" not in base.get("mlflow", {}):
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_empty_mlflow_db(), home / "mlflow.db")
    return path


_EMPTY_MLFLOW_DB: list[Path] = []


def _empty_mlflow_db() -> Path:
    """A new MLflow sqlite store (its schema migrated, nothing in it), made once per test process: a home's store is
    a copy of it (0.02 s) instead of MLflow creating it on the first client (0.7-1.5 s: every migration)."""
    if not _EMPTY_MLFLOW_DB:
        import atexit
        import tempfile

        from mlflow import MlflowClient

        folder = tempfile.mkdtemp(prefix="prag-mlflow-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = Path(folder) / "mlflow.db"
        MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
        _EMPTY_MLFLOW_DB.append(path)
    return _EMPTY_MLFLOW_DB[0]


def range_tags(tasks: list[str]) -> dict[str, str]:
    """The run tags of one run over a contiguous range of task partitions."""
    return {"dagster/asset_partition_range_start": tasks[0], "dagster/asset_partition_range_end": tasks[-1]}


def materialize_graph(config_file: Path, tasks: list[str], selection=None, raise_on_error: bool = True):
    """Materialize the LaMP graph (or a selection) for a contiguous range of tasks in one in-process run."""
    import dagster as dg

    from prag_assets.definitions import defs
    from prag_assets.resource_set import default_resources
    from prag_models.config.settings import ALL_TASKS

    ordered = [t for t in ALL_TASKS if t in tasks]
    assets = list(defs.assets) + list(defs.asset_checks)
    return dg.materialize(
        assets,
        resources=default_resources(config_file=str(config_file)),
        selection=selection,
        tags={"dagster/asset_partition_range_start": ordered[0], "dagster/asset_partition_range_end": ordered[-1]},
        raise_on_error=raise_on_error,
    )


def partition_metadata(result, asset: str) -> dict[str, dict]:
    """task -> the metadata values of that task partition's materialization of an asset in a run (the last one)."""
    return {m.partition: {k: v.value for k, v in m.metadata.items()}
            for m in result.asset_materializations_for_node(asset)}  # fmt: skip


def table_records(value) -> list[dict]:
    """The rows of a Dagster table metadata value as dicts."""
    return [dict(r.data) for r in value.records]


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

    from prag_assets.definitions import defs
    from prag_assets.demo_job import PRAG_DEMO_JOB, demo_job
    from prag_assets.resource_set import default_resources
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
        tags=range_tags(DEMO_TASKS),
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

    tmp, task = tmp_path_factory.mktemp("serving"), SERVED_TASK
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

    tmp = tmp_path_factory.mktemp("evaluated")
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
    from prag_assets.resource_set import default_resources

    if not (real_data_dir() / "personabench").is_dir():
        pytest.skip(f"real PersonaBench data not found at {real_data_dir()} (set PRAG_REAL_DATA)")
    tmp = tmp_path_factory.mktemp("personabench")
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake",
                          data={"real_data_dir": str(real_data_dir())}, tuning={"enabled": True, "budget_s": 4.0},
                          pbr={"datasets": ["personabench"]})  # fmt: skip
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=default_resources(config_file=str(config)),
                            selection=dg.AssetSelection.groups("retrieval_eval"))  # fmt: skip
    assert result.success
    return config, result
