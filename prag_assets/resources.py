"""Dagster resources: settings, the DuckDB file (on dagster-duckdb), and the models (loaded once per process)."""

from __future__ import annotations

import atexit
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import dagster_duckdb
from pydantic import Field

from prag_models.config.settings import GeneratorSettings, Settings, load_settings
from prag_models.storage.store import connect, read_connection

if TYPE_CHECKING:
    import duckdb

    from prag_models.llm.base import Generator
    from prag_models.text.embedder import Embedder


class PragSettingsResource(dg.ConfigurableResource):
    """prag's settings: defaults, then the TOML file, then PRAG__* environment variables, then the run's overrides
    (the Launchpad's ``resources.prag_settings.config.overrides``), validated like every other source."""

    config_file: str = Field(default="", description="TOML settings file (default: $PRAG_CONFIG or <home>/prag.toml)")
    home: str = Field(default="", description="prag home folder (default: $PRAG_HOME or <project>/.prag)")
    overrides: dict[str, Any] = Field(
        default={},
        description="Settings for this run, as in prag.toml, e.g. {retrieval: {k: 5}, data: {tasks: [LaMP-2]}}; "
        "unknown keys and wrong types fail naming the setting",
    )

    def get(self) -> Settings:
        """The loaded settings object."""
        return load_settings(self.config_file or None, home=self.home or None, **self.overrides)


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


#: Loaded generators, kept for the life of the process (a model load costs seconds); at most two, the oldest is closed
#: when a third is needed, and every one is closed when the process exits.
_GENERATORS: dict[GeneratorSettings, Generator] = {}
MAX_GENERATORS = 2


def _generator(settings: GeneratorSettings) -> Generator:
    """The generator for these settings, loaded once per process."""
    from prag_models.llm.factory import make_generator

    if settings not in _GENERATORS:
        while len(_GENERATORS) >= MAX_GENERATORS:
            _GENERATORS.pop(next(iter(_GENERATORS))).close()
        _GENERATORS[settings] = make_generator(settings)
    return _GENERATORS[settings]


@atexit.register
def close_generators() -> None:
    """Close every loaded generator (llama.cpp contexts, HTTP clients, vLLM engines)."""
    while _GENERATORS:
        _GENERATORS.popitem()[1].close()


class ModelsResource(dg.ConfigurableResource):
    """The configured embedder and generator, loaded lazily and kept for the life of the process."""

    settings: PragSettingsResource

    def embedder(self) -> Embedder:
        """The frozen text encoder."""
        from prag_models.text.embedder import load_embedder

        return load_embedder(self.settings.get().embedder)

    def generator(self) -> Generator:
        """The LLM behind the configured backend."""
        return _generator(self.settings.get().generator)
