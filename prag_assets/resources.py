"""Dagster resources: settings, the DuckDB file, and the models (loaded once per process)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING

import dagster as dg

from prag_models.config import GeneratorSettings, Settings, load_settings
from prag_models.store import connect

if TYPE_CHECKING:
    import duckdb

    from prag_models.llm.base import Generator
    from prag_models.text.embedder import Embedder


class PragSettingsResource(dg.ConfigurableResource):
    """prag's settings: defaults, then the TOML file, then PRAG__* environment variables."""

    config_file: str = ""
    home: str = ""

    def get(self) -> Settings:
        """The loaded settings object."""
        return load_settings(self.config_file or None, home=self.home or None)


class DuckDBResource(dg.ConfigurableResource):
    """Connections to the one DuckDB file under the prag home."""

    settings: PragSettingsResource

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open the DuckDB file for one step and close it afterwards (one writer at a time: pool prag_duckdb)."""
        with connect(self.settings.get().duckdb_path, read_only=read_only) as con:
            yield con


@lru_cache(maxsize=2)
def _generator(settings: GeneratorSettings) -> Generator:
    from prag_models.llm.factory import make_generator

    return make_generator(settings)


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
