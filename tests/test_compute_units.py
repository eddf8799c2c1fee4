"""The compute layer without a cluster: user shards, Parquet shard folders loaded into the DuckDB caches, the batch
work's cache rows, the compute settings and the errors that name a bad Ray address."""

from __future__ import annotations

import hashlib

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from prag_models.compute.engines import LocalEngine, rechunk
from prag_models.compute.shards import ShardStore, load_folders, user_shard, users_of_shard
from prag_models.compute.work import BatchWork, BatchWorker, item_table, prompt_items
from prag_models.config.settings import ConfigError, EmbedderSettings, GeneratorSettings, load_settings
from prag_models.llm.cache import generate_cached, lookup_cached, prompt_hash
from prag_models.llm.fake import FakeGenerator
from prag_models.text.embedding_cache import lookup_embeddings


def test_user_shards_are_stable_and_cover_every_user_once() -> None:
    users = [f"u{i:04d}" for i in range(200)]
    shards = [users_of_shard(users, i, 4) for i in range(4)]
    assert sorted(u for s in shards for u in s) == users and all(20 < len(s) < 80 for s in shards)
    # the documented rule, the same on every machine and process: sha256(user_id) mod n
    assert [user_shard(u, 4) for u in users[:9]] == [int(hashlib.sha256(u.encode()).hexdigest()[:8], 16) % 4
                                                      for u in users[:9]]  # fmt: skip
    assert [user_shard(u, 1) for u in users[:3]] == [0, 0, 0]
    with pytest.raises(ValueError, match="user shard 4 does not exist among 4"):
        users_of_shard(users, 4, 4)


def test_rechunk_cuts_exact_batches() -> None:
    tables = [item_table([f"k{i}" for i in range(j, j + m)], ["t"] * m) for j, m in ((0, 5), (5, 2), (7, 6))]
    assert [t.num_rows for t in rechunk(tables, 4)] == [4, 4, 4, 1]
    assert [k for t in rechunk(tables, 4) for k in t["key"].to_pylist()] == [f"k{i}" for i in range(13)]


class _Embedder:
    """A stand-in encoder: a text's vector is its length and its number of words."""

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = np.array([[len(t), len(t.split())] for t in texts], dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_shard_folders_load_into_the_caches_once_finished(tmp_path) -> None:
    """A LocalEngine writes cache rows as Parquet; only finished folders load, in one transaction, then vanish; a
    key already cached keeps its row; generate_cached afterwards finds every prompt cached."""
    store = ShardStore(str(tmp_path / "shards"))
    prompts = ["a prompt", "another prompt", "a third one"]
    gen_work = BatchWork("generate", GeneratorSettings(backend="fake"), "fake:v1", variant=8, batch_size=2)
    emb_work = BatchWork("embed", EmbedderSettings(), "stand-in", batch_size=2)
    engine = LocalEngine(lambda work: _Embedder() if work.kind == "embed" else FakeGenerator())
    folders = {}
    for name, work, chunks in [("gen", gen_work, list(rechunk([prompt_items(prompts)], 2))),
                               ("emb", emb_work, [item_table(["h1", "h2"], ["one text", "two more words"])])]:
        folders[name] = store.new_folder(work.cache_table, name)
        assert engine.compute(work, chunks, store, folders[name]) == len(pa.concat_tables(chunks))
    unfinished = store.new_folder(gen_work.cache_table, "late")
    engine.compute(gen_work, [prompt_items(["never loaded"])], store, unfinished)
    assert store.pending(gen_work.cache_table) == []  # nothing finished yet
    for folder in folders.values():
        store.finish(folder)
    with duckdb.connect(str(tmp_path / "db.duckdb")) as con:
        stats = load_folders(con, store, gen_work.cache_table, store.pending(gen_work.cache_table))
        assert stats == {"shard_folders": 1, "shard_rows": 3, "shard_rows_new": 3}
        assert store.pending(gen_work.cache_table) == []  # loaded folders are removed, the unfinished one stays
        fake = FakeGenerator()
        outputs, ran = generate_cached(fake, prompts, 8, con)
        assert ran == 0 and fake.calls == 0 and outputs == FakeGenerator().generate(prompts, 8)
        assert len(lookup_cached(con, "fake:v1", [prompt_hash(p) for p in prompts], 8)) == 3
        stats = load_folders(con, store, emb_work.cache_table, store.pending(emb_work.cache_table))
        assert stats["shard_rows_new"] == 2
        np.testing.assert_array_equal(lookup_embeddings(con, "stand-in", ["h2", "h1"]),
                                      _Embedder().embed(["two more words", "one text"]))  # fmt: skip
    assert unfinished.fs.get_file_info(unfinished.path).type.name == "Directory"


def test_batch_worker_rows_follow_the_cache_schema() -> None:
    worker = BatchWorker(BatchWork("gold_loglik", GeneratorSettings(backend="fake"), "fake:v1#gold_loglik"),
                         FakeGenerator())  # fmt: skip
    rows = worker.rows(prompt_items(["a prompt\n\u0000gold: comedy"]))
    assert rows.column_names == ["generator_id", "prompt_hash", "max_new_tokens", "prompt", "output", "created_at"]
    assert float(rows["output"][0].as_py()) < 0  # a log-probability
    with pytest.raises(ValueError, match="unknown batch work kind"):
        BatchWorker(BatchWork("nope", GeneratorSettings(), "x"), FakeGenerator())  # type: ignore[arg-type]


def test_compute_settings_are_validated() -> None:
    settings = load_settings(environ={"PRAG__COMPUTE__ENGINE": "ray", "PRAG__GENERATOR__BASE_URLS": "http://a:1,http://b:2"})
    assert settings.compute.engine == "ray" and settings.generator.base_urls == ("http://a:1", "http://b:2")
    with pytest.raises(ConfigError, match="compute.engine"):
        load_settings(environ={"PRAG__COMPUTE__ENGINE": "spark"})
    with pytest.raises(ConfigError, match="compute.actors"):
        load_settings(environ={"PRAG__COMPUTE__ACTORS": "0"})
    with pytest.raises(ConfigError, match="generator.base_urls must be an http"):
        load_settings(environ={"PRAG__GENERATOR__BASE_URLS": "ftp://x"})


def test_unreachable_ray_address_is_named(tmp_path) -> None:
    """engine = ray with an address nothing listens on fails at once, naming the address (Ray itself would wait)."""
    import socket

    import dagster as dg

    from prag_assets.execution import compute_engine
    from prag_assets.resources.ray_cluster import PragRay, RayConnectError
    from prag_assets.resources.settings import PragSettingsResource

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "prag.toml"
    config.write_text(f'home = "{tmp_path}"\n[compute]\nengine = "ray"\nray_address = "ray://127.0.0.1:{port}"\n')
    settings_resource = PragSettingsResource(config_file=str(config))
    context = dg.build_init_resource_context()
    with pytest.raises(RayConnectError, match=rf"ray://127\.0\.0\.1:{port}.*compute\.ray_address"):
        compute_engine(context, settings_resource.get(), PragRay(settings=settings_resource))
    assert compute_engine(context, load_settings(environ={}), PragRay(settings=settings_resource)) is None


def test_local_engine_runs_never_connect_to_ray(tmp_path) -> None:
    """The definitions' Ray resource, initialised as a run initialises it, stays disconnected with the local engine
    (Dagster takes nested config defaults from the class, so a default_factory alone started a cluster every run)."""
    import dagster as dg

    from prag_assets.resources.resource_set import default_resources

    config = tmp_path / "prag.toml"
    config.write_text(f'home = "{tmp_path}"\n')
    with dg.build_resources(default_resources(str(config))) as resources:
        assert resources.ray.lifecycle.connect is False and not resources.ray.connected
