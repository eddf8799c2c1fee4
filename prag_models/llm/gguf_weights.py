"""Choose and prepare the weight type llama.cpp runs: a GGUF as shipped, or converted once to bf16 / f16 / q8_0 / q4_0.

The packaged SmolLM2 ships as Q4_1, for which llama.cpp has no fast CPU matmul: neither llamafile's sgemm nor a
repacked (interleaved) kernel. "auto" runs the lossless type measured fastest for utility scoring per CPU class
(benchmarks/llm_throughput.py --weights as_is,q4_0,q8_0,f16,bf16, 2026-12-05, shared cores; × the shipped Q4_1):

- AVX512_BF16 build: bf16, llama.cpp's native bf16 kernels (2 threads: 2.72x; q8_0 1.76x, f16 1.44x);
- AVX2 build: q8_0 (llamafile's AVX2 sgemm). One AVX2 core: 1.79x (233 against 130 tokens/s), f16 1.85x, bf16
  (emulated) 1.52x; two threads: q8_0 1.41x, f16 1.22x, bf16 0.83x (llama-bench 1.66x / 1.12x / 1.18x): q8_0 is
  within 3 % of the best on one core and the best on two. q4_0 (repacked 8x8 kernels) is faster still (2.36x / 1.51x)
  but only by losing precision: requantized from the shipped Q4_1 it moves the utility (log-likelihood per token) by
  0.64 nats on average against bf16 (= the shipped weights) and the paired differences a verdict tests by 0.24
  (correlation 0.94), so it is a choice, never "auto"; q8_0 moves them by 0.035 / 0.042, less than Q4_1's own
  kernels (0.045 / 0.047);
- anything else: as shipped.

The converted file is cached.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from prag_models.config.settings import LLAMA_CPP_WEIGHTS as WEIGHT_CHOICES
from prag_models.llm.base import GenerationError

AS_IS = "as_is"
AUTO = "auto"
#: Weight types a GGUF can be converted to, with llama.cpp's LLAMA_FTYPE_MOSTLY_* numbers.
FTYPES: dict[str, int] = {"f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}
#: "auto" per CPU class: the first rule whose features the llama.cpp build all has wins, else as shipped (docstring)
AUTO_RULES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"AVX512_BF16"}), "bf16"),
    (frozenset({"AVX2"}), "q8_0"),
)


def model_cache_dir() -> Path:
    """Folder for converted weights: $PRAG_MODEL_CACHE, else ~/.cache/prag/gguf (shared by every prag home)."""
    return Path(os.environ.get("PRAG_MODEL_CACHE") or Path.home() / ".cache" / "prag" / "gguf").expanduser()


def cpu_features() -> set[str]:
    """The SIMD features the installed llama.cpp build reports (e.g. {"AVX2", "AVX512_BF16"})."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    return {name for name, on in re.findall(r"(\w+) = (\d)", info) if on == "1"}


def resolve_weight_type(choice: str) -> str:
    """The weight type to run for a setting: "auto" is the first AUTO_RULES type whose feature the build has."""
    if choice not in WEIGHT_CHOICES:
        raise GenerationError(f"generator.llama_cpp_weights must be one of {list(WEIGHT_CHOICES)}, got {choice!r}")
    if choice != AUTO:
        return choice
    features = cpu_features()
    return next((weights for needs, weights in AUTO_RULES if needs <= features), AS_IS)


def converted_gguf(source: Path, weight_type: str, cache_dir: Path | None = None) -> Path:
    """source converted to weight_type (cached by the source's size, mtime and name); source itself for "as_is"."""
    if weight_type == AS_IS:
        return source
    if weight_type not in FTYPES:
        raise GenerationError(f"unknown llama.cpp weight type {weight_type!r}; choose one of {list(FTYPES)}")
    stat = source.stat()
    key = hashlib.sha1(f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:10]
    folder = cache_dir or model_cache_dir()
    target = folder / f"{source.stem}.{weight_type}-{key}.gguf"
    if target.is_file():
        return target
    import llama_cpp

    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[weight_type]
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    from llama_cpp._utils import suppress_stdout_stderr

    with suppress_stdout_stderr(disable=False):  # llama.cpp logs one line per tensor (272): the terminal is the user's
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params)
    if status != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise GenerationError(f"llama.cpp could not convert {source} to {weight_type} (status {status})")
    partial.replace(target)  # atomic: a concurrent or interrupted conversion never leaves a half-written file
    return target
