"""Dagster resources: settings, the DuckDB file, and the models (loaded once per process)."""

from __future__ import annotations

import atexit
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from prag_models.config import GeneratorSettings, Settings, load_settings
from prag_models.store import connect

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


class DuckDBResource(dg.ConfigurableResource):
    """Connections to the one DuckDB file under the prag home."""

    settings: PragSettingsResource

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open the DuckDB file for one step and close it afterwards (one writer at a time: pool prag_duckdb)."""
        with connect(self.settings.get().duckdb_path, read_only=read_only) as con:
            yield con


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
