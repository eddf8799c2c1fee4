"""The DuckDB file as a Dagster resource (on dagster-duckdb): one writer at a time, readers read the snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import dagster_duckdb
from pydantic import Field

from prag_assets.resources.settings import PragSettingsResource
from prag_models.storage.store import connect, read_connection

if TYPE_CHECKING:
    import duckdb


class DuckDBResource(dagster_duckdb.DuckDBResource):
    """dagster-duckdb's resource on prag's one DuckDB file: ``get_connection`` goes through ``store.connect`` (the
    writer announces itself first, a wait names the lock holder, the folder is created), ``read_connection`` falls
    back to the published snapshot while a run holds the file."""

    settings: PragSettingsResource
    database: str = Field(default="", description="DuckDB file (default: the settings' <home>/prag.duckdb)")

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        """prag's subclass, not the dagster-maintained resource."""
        return False

    def path(self) -> Path:
        """The DuckDB file: ``database`` when set, else the one under the prag home."""
        return Path(self.database).expanduser() if self.database else Path(self.settings.get().duckdb_path)

    def _configure(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """Apply ``connection_config`` (DuckDB settings, e.g. {"threads": 2}) to an open connection."""
        for name, value in self.connection_config.items():
            if not name.replace("_", "").isalnum():
                raise ValueError(f"connection_config key {name!r} is not a DuckDB setting name")
            con.execute(f"SET {name} = ?", [value])
        return con

    @contextmanager
    def get_connection(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open the DuckDB file for one step and close it afterwards (one writer at a time: pool prag_duckdb)."""
        with connect(self.path(), read_only=read_only) as con:
            yield self._configure(con)

    def connect(self, read_only: bool = False) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
        """The same as ``get_connection`` (the name the assets use)."""
        return self.get_connection(read_only=read_only)

    @contextmanager
    def read_connection(self, wait_s: float = 2.0) -> Iterator[tuple[duckdb.DuckDBPyConnection, str]]:
        """A read-only connection that never waits on a run: the live file, else its snapshot; yields (con, which)."""
        with read_connection(self.path(), wait_s=wait_s) as (con, source):
            yield self._configure(con), source
