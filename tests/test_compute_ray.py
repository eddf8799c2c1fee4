"""compute.engine = ray and the task x user-shard partitions, on a tiny demo with the fake generator and the real
packaged embedder: the LaMP graph (without the CFRAG retriever and reranker training, which no engine moves) on a
local Ray cluster (2 CPUs, no dashboard) writes the same tables as the local engine, the heavy stages' work ran on
Ray and none of it in the run; user-shard runs (local engine, then Ray) fill the caches so that the task assets
compute nothing and their tables equal the unsharded run's."""

from __future__ import annotations

import dagster as dg
import pytest
from conftest import materialize_graph, partition_metadata, table_records, write_config
from reliability.helpers import VOLATILE, table_checksums

from prag_models.config.settings import load_settings

TASKS = ["LaMP-2"]
CFRAG = {"epochs": 5}
RAY = {"engine": "ray", "ray_num_cpus": 2, "ray_object_store_mb": 256, "actors": 2}
#: Every LaMP asset but the CFRAG retriever and reranker training and what only they feed (a minute of CPU here).
TRAINING = ("cfrag_retriever", "cfrag_reranker", "cfrag_retrievals", "cfrag_model_evaluation")
SELECTION = dg.AssetSelection.all() - dg.AssetSelection.assets(*TRAINING)
METHODS = [m for m in load_settings(environ={}).retrieval.methods if m != "cfrag"]
#: The asset of each stage whose cache the engine fills, and its own count of model calls in the run.
STAGE_ASSETS = {"document_embeddings": "newly_embedded", "query_embeddings": "newly_embedded",
                "feedback_labels": "llm_generations_now", "pbr_lamp_retrievals": "generated_now",
                "generations": "model_calls_now"}  # fmt: skip


def _config(tmp_path, name: str, **compute):
    """A tiny-demo config under its own home, on the given compute settings."""
    if compute.get("engine") == "ray":  # actors with this process's torch threads: bit-identical vectors
        import torch

        compute["torch_threads"] = torch.get_num_threads()
    sections = {"data": {"tasks": TASKS}, "cfrag": CFRAG, "retrieval": {"methods": METHODS}, "compute": compute}
    return write_config(tmp_path / f"{name}.toml", tmp_path / name, generator_backend="fake", **sections)


#: Columns that differ between two equal runs by nature (run ids, times), beyond the reliability tests' list.
RUN_VOLATILE = {**VOLATILE, "cluster_drift": ("run_id", "computed_at"), "cluster_models": ("fitted_at",),
                "cluster_state": ("fitted_at",), "cfrag_model_evaluations": ("recorded_at",)}


def _tables(config) -> dict[str, tuple[int, str]]:
    return table_checksums(load_settings(config).duckdb_path, RUN_VOLATILE)


def _differing(tables: dict, reference: dict) -> list[str]:
    return sorted(t for t in set(tables) | set(reference) if tables.get(t) != reference.get(t))


def _per_task_calls(result, asset: str, key: str) -> list[int]:
    """The stage's own model calls per task (0 when everything was cached before it ran)."""
    key = "generated_now" if asset == "pbr_lamp_retrievals" else key
    return [stats[key] for stats in partition_metadata(result, asset).values()]


def _cache_fill(result, asset: str) -> dict:
    """The run's cache fill before the stage (one row: the whole run)."""
    return table_records(next(iter(partition_metadata(result, asset).values()))["run_cache_fill"])[0]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The unsharded run on the local engine: the reference tables."""
    config = _config(tmp_path_factory.mktemp("local"), "local", engine="local")
    assert materialize_graph(config, TASKS, selection=SELECTION).success
    return _tables(config)


@pytest.fixture(scope="module")
def ray_session():
    """Shut down the local Ray cluster the tests start (it lives in this test process)."""
    yield
    import ray

    ray.shutdown()


def test_ray_engine_writes_the_local_engines_tables(local_run, ray_session, tmp_path) -> None:
    config = _config(tmp_path, "ray", **RAY)
    result = materialize_graph(config, TASKS, selection=SELECTION)
    assert result.success
    for asset, calls in STAGE_ASSETS.items():
        fill = _cache_fill(result, asset)
        assert fill["engine"] == "ray" and fill["computed"] > 0 and fill["shard_rows_new"] == fill["computed"], fill
        assert _per_task_calls(result, asset, calls) == [0] * len(_per_task_calls(result, asset, calls)), asset
    assert _differing(_tables(config), local_run) == []
    assert not any((load_settings(config).home_path / "shards").rglob("*.parquet"))  # loaded shards are removed


def _shard_runs(config, assets: list[str], n: int) -> dict[str, list[dict]]:
    """Every task x user-shard partition of the given shard assets, one in-process run each (as a backfill)."""
    from prag_assets.assets.user_shards import shard_assets
    from prag_assets.resources.resource_set import default_resources

    out: dict[str, list[dict]] = {asset: [] for asset in assets}
    for task in TASKS:
        for shard in range(n):
            result = dg.materialize(shard_assets(n), selection=assets, partition_key=f"{task}|{shard}",
                                    resources=default_resources(config_file=str(config)))  # fmt: skip
            assert result.success
            for asset in assets:
                metadata = result.asset_materializations_for_node(asset)[-1].metadata
                out[asset].append({k: v.value for k, v in metadata.items()})
    return out


def _assert_stages_computed_nothing(result) -> None:
    """Every heavy stage asset of the run found all its items cached (its own model calls are 0)."""
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    for asset in set(STAGE_ASSETS) & done:
        calls = _per_task_calls(result, asset, STAGE_ASSETS[asset])
        assert calls == [0] * len(calls), (asset, calls)


def test_user_shards_fill_the_caches_and_equal_the_unsharded_run(local_run, tmp_path) -> None:
    """A backfill of the task x user-shard partitions (2 shards, local engine) between the task assets: each stage
    asset then computes nothing, and every table equals the unsharded run's."""
    n = 2
    config = _config(tmp_path, "shards", engine="local", user_shards=n)
    # the task assets each group of shard assets reads, then those shard assets
    steps = [(["lamp_samples", "profile_documents"], ["embedding_shards"]),
             (["document_embeddings", "query_embeddings", "cfrag_similar_users"],
              ["feedback_label_shards", "pbr_expansion_shards"]),
             (["feedback_labels", "pbr_lamp_retrievals", "baseline_retrievals", "clusterrag_retrievals"],
              ["generation_shards"])]  # fmt: skip
    done = dg.AssetSelection.assets()
    shard_meta: dict[str, list[dict]] = {}
    for targets, shard_assets in steps:
        step = dg.AssetSelection.assets(*targets).upstream() - done
        result = materialize_graph(config, TASKS, selection=step)
        assert result.success
        _assert_stages_computed_nothing(result)
        done = done | step
        shard_meta |= _shard_runs(config, shard_assets, n)
    computed = {asset: [m["computed"] for m in meta] for asset, meta in shard_meta.items()}
    assert all(sum(v) > 0 for v in computed.values()), computed
    users = [m["users"] for m in shard_meta["feedback_label_shards"]]
    assert sum(users) == len(TASKS) * 16 and max(users) < 16  # every user in exactly one shard of its task
    result = materialize_graph(config, TASKS, selection=SELECTION - done)
    assert result.success
    _assert_stages_computed_nothing(result)
    assert _differing(_tables(config), local_run) == []
