"""Build the configured Generator; backends are imported only when chosen."""

from __future__ import annotations

from collections.abc import Callable

from prag_models.config.settings import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator


def _llama_cpp(settings: GeneratorSettings) -> Generator:
    from prag_models.llm.llamacpp_backend import LlamaCppGenerator

    return LlamaCppGenerator(settings)


def _transformers(settings: GeneratorSettings) -> Generator:
    from prag_models.llm.transformers_backend import TransformersGenerator

    return TransformersGenerator(settings)


def _openai(settings: GeneratorSettings) -> Generator:
    from prag_models.llm.openai_backend import OpenAIGenerator

    return OpenAIGenerator(settings)


def _vllm(settings: GeneratorSettings) -> Generator:
    from prag_models.llm.vllm_backend import VllmGenerator

    return VllmGenerator(settings)


def _fake(settings: GeneratorSettings) -> Generator:
    from prag_models.llm.fake import FakeGenerator

    return FakeGenerator(settings)


BACKENDS: dict[str, Callable[[GeneratorSettings], Generator]] = {
    "llama_cpp": _llama_cpp,
    "transformers": _transformers,
    "openai": _openai,
    "vllm": _vllm,
    "fake": _fake,
}


def make_generator(settings: GeneratorSettings) -> Generator:
    """The Generator for settings.backend (llama_cpp, transformers, openai, vllm or fake)."""
    build = BACKENDS.get(settings.backend)
    if build is None:
        raise GenerationError(f"unknown generator backend {settings.backend!r}; choose one of {sorted(BACKENDS)}")
    return build(settings)
