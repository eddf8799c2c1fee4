"""The models as a Dagster resource: the configured embedder and generator, loaded once per process."""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING

import dagster as dg

from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import GeneratorSettings

if TYPE_CHECKING:
    from prag_models.llm.base import Generator
    from prag_models.text.embedder import Embedder


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
