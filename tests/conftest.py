"""Shared fixtures: offline environment, a tiny demo configuration, in-process materialization of the graph."""

import os
from pathlib import Path

import pytest

# Helpers and the session graphs live in their own modules: tests import them from here (`from conftest import
# write_config`), and pytest registers the fixtures imported here.
from graph_helpers import (  # noqa: F401
    ROOT,
    check_results,
    cli_env,
    hold_writer,
    materialize_graph,
    partition_metadata,
    read_tables,
    real_data_dir,
    store_copy,
    table_records,
    write_config,
)
from session_graphs import (  # noqa: F401
    DEMO_TASKS,
    EVALUATED_DEV,
    EVALUATED_TASK,
    SERVED_TASK,
    SESSION_FOLDERS,
    demo_home,
    evaluated_graph,
    personabench_graph,
    poison_dev,
    served_graph,
    tiny_config,
)  # fmt: skip

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
    "test_tuning", "test_label_free_graph", "test_consent_cost", "test_consent_cfrag", "test_answer_scoring",
    "test_promotion_graph", "test_embedder_backends", "test_served_item_cf", "test_pyfunc_item_cf",
    "test_label_free_item_cf",
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
             "test_consent_cost.py": "evaluated_graph", "test_consent_cfrag.py": "served_graph",
             "test_served_item_cf.py": "evaluated_graph",
             "test_pbr_graph.py": "personabench_graph", "test_pbr_tuning.py": "personabench_graph"}  # fmt: skip

#: About how many seconds a file of the CI selection takes beside the other worker (the files of TOGETHER under their
#: unit's name): the scheduler hands out the longest first, so that no long file starts when the other worker is nearly
#: done (xdist's own order, most tests first, started the one-test whole-graph file among the last).
#: Unlisted files take under 12 s and follow in xdist's order. Remeasure with --junitxml after a large change.
FILE_SECONDS = {
    "test_graph_e2e.py": 160, "test_label_free_graph.py": 60,
    "demo_home": 110, "test_crash_recovery.py": 105, "test_compute_ray.py": 85,
    "personabench_graph": 75, "test_cfrag_teacher.py": 55, "test_lineage.py": 47, "test_promotion.py": 39,
    "test_label_scoring.py": 38, "test_materialize_output.py": 30, "test_verdict.py": 28, "test_cfrag_graph.py": 27,
    "evaluated_graph": 55, "served_graph": 38, "test_served_privacy.py": 35, "test_taste.py": 27,
    "test_marker_graph.py": 15, "test_feedback_probe.py": 15, "test_readme_commands.py": 12, "test_claims.py": 12,
    "test_lifecycle.py": 120,
    "test_answer_scoring.py": 30, "test_failure_output.py": 25,
    "test_non_interference.py": 100, "test_deferred_generations.py": 90, "test_erasure_bytes.py": 70,
    "test_label_free_item_cf.py": 60, "test_pyfunc_item_cf.py": 50, "test_ui_staleness.py": 100,
    "test_incremental_shareable.py": 50, "test_mlflow_links.py": 60, "test_incremental_equals_scratch.py": 70,
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


@pytest.fixture(scope="module", autouse=True)
def _module_folders_removed(request, tmp_path_factory):
    """Remove the folders a module's fixtures made (a materialized home is 0.25-0.7 GB: a whole run kept 12-17 GB and
    filled a CI machine's disk) once its tests are done, unless one of them failed. Passed tests' own tmp_path
    folders go as they end (pyproject.toml: tmp_path_retention_policy = "failed")."""
    base = tmp_path_factory.getbasetemp()
    before, failed = set(base.iterdir()), request.session.testsfailed
    yield
    if request.session.testsfailed != failed:
        return
    import shutil

    for folder in set(base.iterdir()) - before:
        if folder.is_dir() and not folder.name.startswith(SESSION_FOLDERS):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def llama_generator(request):
    """The packaged SmolLM2 through llama.cpp for a module's tests, with the module's LLAMA_N_CTX (default 1024)."""
    from prag_models.config.settings import GeneratorSettings
    from prag_models.llm.factory import make_generator

    gen = make_generator(GeneratorSettings(backend="llama_cpp", n_ctx=getattr(request.module, "LLAMA_N_CTX", 1024)))
    yield gen
    gen.close()
