"""The task x user-shard assets: only in a Ray deployment's catalog, and checked where they write Parquet shards."""

from prag_assets.assets.user_shards import SHARDS_FINISHED, configured_shard_assets, finished_check, shard_assets
from prag_models.compute.shards import ShardStore, shard_root
from prag_models.config.settings import load_settings


def test_single_machine_catalog_has_no_shard_assets(monkeypatch, tmp_path) -> None:
    """The local engine loads no shard asset (no 24 empty partitions); the Ray engine loads the four, each checked."""
    monkeypatch.setenv("PRAG_HOME", str(tmp_path))
    monkeypatch.delenv("PRAG__COMPUTE__ENGINE", raising=False)
    assert configured_shard_assets() == []
    monkeypatch.setenv("PRAG__COMPUTE__ENGINE", "ray")
    assets = configured_shard_assets()
    assert len(assets) == 4
    assert all({c.name for c in a.check_specs} == {SHARDS_FINISHED} for a in assets)
    assert len(shard_assets(2)) == 4


def test_the_check_fails_on_a_folder_without_its_success_marker(tmp_path) -> None:
    """A finished folder passes; a folder the run wrote but never finished fails the check, named."""
    settings = load_settings(environ={}, home=str(tmp_path))
    store = ShardStore(shard_root(settings))
    done, cut = store.new_folder("embedding_cache", "documents.LaMP-2"), store.new_folder("embedding_cache", "queries")
    store.finish(done)
    assert finished_check(settings, {"documents": {"shard_folders": [done.uri]}}).passed
    written = {"documents": {"shard_folders": [done.uri]}, "queries": {"shard_folders": [cut.uri]}}
    result = finished_check(settings, written)
    assert not result.passed and cut.uri in result.metadata["unfinished"].value
