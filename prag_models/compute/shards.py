"""Parquet shards of cache rows: engines (Ray workers, or the run itself for a user shard) write them to a folder
under ``compute.shard_dir`` (default ``<home>/shards``, or an ``s3://`` URI on a cluster), and the run that holds the
DuckDB file loads them into the cache table in one transaction — DuckDB stays the single writer.

A folder counts once its ``_SUCCESS`` marker exists (object stores have no atomic rename); loaded folders are
deleted after the commit (loading one twice is harmless: cache rows are inserted only when their key is new).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from prag_models.llm.cache import CACHE_TABLE as GENERATION_CACHE
from prag_models.llm.cache import ensure_cache_table as ensure_generation_cache
from prag_models.text.embedding_cache import CACHE_TABLE as EMBEDDING_CACHE
from prag_models.text.embedding_cache import ensure_cache_table as ensure_embedding_cache
from prag_models.text.embedding_cache import insert_uncached_sql

if TYPE_CHECKING:
    import duckdb

    from prag_models.config.settings import Settings

SUCCESS = "_SUCCESS"
#: How a shard folder's rows enter their cache table (a key already cached keeps its row).
_INSERT = {
    EMBEDDING_CACHE: insert_uncached_sql("_prag_shard"),
    # no provenance (users NULL) until a stage looks the rows up with it (llm/cache.record_provenance)
    GENERATION_CACHE: f"INSERT INTO {GENERATION_CACHE} (generator_id, prompt_hash, max_new_tokens, prompt, output, "
    "created_at) SELECT generator_id, prompt_hash, max_new_tokens, prompt, output, created_at FROM _prag_shard "
    "ON CONFLICT DO NOTHING",
}
_ENSURE = {EMBEDDING_CACHE: ensure_embedding_cache, GENERATION_CACHE: ensure_generation_cache}


def shard_root(settings: Settings) -> str:
    """Where Parquet shards go: compute.shard_dir, else <home>/shards."""
    return settings.compute.shard_dir or str(settings.home_path / "shards")


def user_shard(user_id: str, n: int) -> int:
    """The user shard of a user id: sha256(user_id) mod n (stable across processes and machines)."""
    return int(hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:8], 16) % n


def users_of_shard(users: Iterable[str], shard: int, n: int) -> list[str]:
    """The users (of an iterable of ids) that belong to shard i of n."""
    if not 0 <= shard < n:
        raise ValueError(f"user shard {shard} does not exist among {n} shards")
    return [u for u in users if user_shard(u, n) == shard]


@dataclass(frozen=True)
class ShardFolder:
    """One folder of Parquet files with rows of one cache table."""

    fs: Any  # pyarrow.fs.FileSystem
    path: str  # inside fs (engines write here through fs; an s3:// root's query options live in fs)
    uri: str  # the same folder as a path or scheme://path, for logs and metadata


class ShardStore:
    """The shard folders under a root (a local folder or an s3:// URI), per cache table."""

    def __init__(self, root: str) -> None:
        self.root = root
        if "://" in root:
            self.fs, self.base = pafs.FileSystem.from_uri(root)
        else:
            self.fs, self.base = pafs.LocalFileSystem(), str(Path(root).expanduser().resolve())
        self.base = self.base.rstrip("/")

    def _uri(self, path: str) -> str:
        """A path inside the store as a readable location (local path, or scheme://bucket/key)."""
        if "://" not in self.root:
            return path
        scheme = self.root.split("://", 1)[0]
        return f"{scheme}://{path}"

    def new_folder(self, cache_table: str, label: str) -> ShardFolder:
        """A fresh, not yet finished folder for rows of cache_table."""
        path = f"{self.base}/{cache_table}/{label}-{uuid.uuid4().hex[:8]}"
        self.fs.create_dir(path, recursive=True)
        return ShardFolder(self.fs, path, self._uri(path))

    def write(self, folder: ShardFolder, index: int, table: pa.Table) -> None:
        """Write one Parquet file of rows into a folder."""
        pq.write_table(table, f"{folder.path}/part-{index:05d}.parquet", filesystem=folder.fs)

    def finish(self, folder: ShardFolder) -> None:
        """Mark a folder complete: from now on it is loaded."""
        with folder.fs.open_output_stream(f"{folder.path}/{SUCCESS}") as out:
            out.write(b"")

    def pending(self, cache_table: str) -> list[ShardFolder]:
        """The finished folders of a cache table, oldest name first."""
        selector = pafs.FileSelector(f"{self.base}/{cache_table}", allow_not_found=True)
        folders = sorted(i.path for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.Directory)
        done = [p for p in folders if self.fs.get_file_info(f"{p}/{SUCCESS}").type == pafs.FileType.File]
        return [ShardFolder(self.fs, p, self._uri(p)) for p in done]

    def tables(self, folder: ShardFolder) -> Iterator[pa.Table]:
        """The folder's Parquet files, one table each."""
        files = self.fs.get_file_info(pafs.FileSelector(folder.path))
        for path in sorted(i.path for i in files if i.path.endswith(".parquet")):
            yield pq.read_table(path, filesystem=folder.fs)

    def remove(self, folder: ShardFolder) -> None:
        """Delete a folder once its rows are committed."""
        folder.fs.delete_dir(folder.path)


def load_folders(con: duckdb.DuckDBPyConnection, store: ShardStore, cache_table: str,
                 folders: list[ShardFolder]) -> dict[str, int]:  # fmt: skip
    """Insert the rows of the given folders into cache_table in one transaction, then delete the folders."""
    if not folders:
        return {"shard_folders": 0, "shard_rows": 0, "shard_rows_new": 0}
    _ENSURE[cache_table](con)
    rows = new = 0
    con.begin()
    try:
        for folder in folders:
            for table in store.tables(folder):
                con.register("_prag_shard", table)
                try:
                    new += int(con.execute(_INSERT[cache_table]).fetchone()[0])
                finally:
                    con.unregister("_prag_shard")
                rows += table.num_rows
        con.commit()
    except BaseException:
        con.rollback()
        raise
    for folder in folders:
        store.remove(folder)
    return {"shard_folders": len(folders), "shard_rows": rows, "shard_rows_new": new}


def load_pending(con: duckdb.DuckDBPyConnection, settings: Settings, cache_table: str) -> dict[str, int]:
    """Load every finished shard folder of cache_table (e.g. written by user-shard runs) into DuckDB."""
    store = ShardStore(shard_root(settings))
    return load_folders(con, store, cache_table, store.pending(cache_table))
