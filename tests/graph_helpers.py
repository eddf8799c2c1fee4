"""Helpers of the graph tests: the shared real data, a tiny demo's prag.toml, in-process materialization, the
metadata and check results it reports, and a graph's DuckDB store read, copied or held (imported through conftest,
e.g. ``from conftest import write_config``)."""

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parent.parent


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


def cli_env(config: Path, **extra: str) -> dict[str, str]:
    """The environment of a `prag` subprocess on a prag.toml: no inherited PRAG_/DAGSTER_ variable, the Hub offline,
    then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRAG_", "DAGSTER_"))}
    return env | {"PRAG_CONFIG": str(config), "HF_HUB_OFFLINE": "1"} | extra


def range_tags(tasks: list[str]) -> dict[str, str]:
    """The run tags of one run over a contiguous range of task partitions."""
    return {"dagster/asset_partition_range_start": tasks[0], "dagster/asset_partition_range_end": tasks[-1]}


def materialize_graph(config_file: Path, tasks: list[str], selection=None, raise_on_error: bool = True,
                      instance=None):  # fmt: skip
    """Materialize the LaMP graph (or a selection) for a contiguous range of tasks in one in-process run (on
    ``instance``, else an ephemeral in-memory Dagster instance)."""
    import dagster as dg

    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources
    from prag_models.config.settings import ALL_TASKS

    ordered = [t for t in ALL_TASKS if t in tasks]
    assets = list(defs.assets) + list(defs.asset_checks)
    return dg.materialize(
        assets,
        resources=default_resources(config_file=str(config_file)),
        selection=selection,
        tags={"dagster/asset_partition_range_start": ordered[0], "dagster/asset_partition_range_end": ordered[-1]},
        raise_on_error=raise_on_error,
        instance=instance,
    )


def partition_metadata(result, asset: str) -> dict[str, dict]:
    """task -> the metadata values of that task partition's materialization of an asset in a run (the last one)."""
    return {m.partition: {k: v.value for k, v in m.metadata.items()}
            for m in result.asset_materializations_for_node(asset)}  # fmt: skip


def table_records(value) -> list[dict]:
    """The rows of a Dagster table metadata value as dicts."""
    return [dict(r.data) for r in value.records]


def check_results(result) -> dict[str, tuple[bool, str]]:
    """check name -> (passed, severity) of every check evaluation of a run."""
    out = {}
    for e in result.all_events:
        if e.event_type_value == "ASSET_CHECK_EVALUATION":
            data = e.event_specific_data
            name = f"{data.asset_check_key.asset_key.to_user_string()}:{data.check_name}"
            out[name] = (data.passed, data.severity.value)
    return out


def read_tables(config: Path):
    """A read-only connection to the DuckDB store of a prag.toml's home."""
    import duckdb

    from prag_models.config.settings import load_settings

    return duckdb.connect(str(load_settings(config).duckdb_path), read_only=True)


@contextmanager
def store_copy(store: Path, tmp_path: Path) -> Iterator:
    """A writable connection to a copy of a DuckDB store in tmp_path: a test may change it, the graph's file stays."""
    import duckdb

    copy = tmp_path / "copy.duckdb"
    shutil.copy(store, copy)
    with duckdb.connect(str(copy)) as con:
        yield con


def hold_writer(path: Path) -> subprocess.Popen:
    """Another process holding the DuckDB file for writing (as a run does), until killed."""
    from prag_models.storage.store import writer_active

    code = ("import sys, time\nfrom prag_models.storage.store import connect\n"
            "with connect(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(600)\n")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    assert writer_active(path)
    return proc
