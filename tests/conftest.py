"""Shared fixtures: offline environment, a tiny demo configuration, in-process materialization of the graph."""

import os
from pathlib import Path

import pytest

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
        # the tiny demo's 12 train samples: the whole feedback budget (tests of the probe set it themselves)
        "cfrag": {"feedback_probe_samples": 0},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    lines = [f'home = "{home}"']
    for name, values in base.items():
        lines.append(f"[{name}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml(value)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


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


@pytest.fixture
def tiny_config(tmp_path):
    """A tiny-demo config under a fresh home, with the deterministic fake generator (fast plumbing tests)."""
    home = tmp_path / "home"
    return write_config(tmp_path / "prag.toml", home, generator_backend="fake")
