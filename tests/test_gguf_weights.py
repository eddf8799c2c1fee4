"""llama.cpp weight types: the packaged GGUF converted once (cached) and scored exactly like token-by-token decoding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from prag_models.config.settings import ConfigError, GeneratorSettings, load_settings
from prag_models.llm.base import GenerationError, log_softmax
from prag_models.llm.gguf_weights import converted_gguf, cpu_features, resolve_weight_type
from prag_models.llm.llamacpp_backend import LlamaCppGenerator
from prag_models.llm.packaged import packaged_gguf_path

TAGS = ["sci-fi", "based on a book", "dark comedy"]
PROMPT = "Pick one tag from [sci-fi, based on a book, dark comedy] for: a spaceship crew explores a far galaxy."


def test_weight_setting_is_validated() -> None:
    assert load_settings(environ={"PRAG__GENERATOR__LLAMA_CPP_WEIGHTS": "q8_0"}).generator.llama_cpp_weights == "q8_0"
    with pytest.raises(ConfigError, match="llama_cpp_weights"):
        load_settings(environ={"PRAG__GENERATOR__LLAMA_CPP_WEIGHTS": "int3"})
    with pytest.raises(GenerationError, match="llama_cpp_weights"):
        resolve_weight_type("int3")


def test_auto_follows_the_llama_cpp_build() -> None:
    expected = "bf16" if "AVX512_BF16" in cpu_features() else "q8_0" if "AVX2" in cpu_features() else "as_is"
    assert resolve_weight_type("auto") == expected
    assert resolve_weight_type("as_is") == "as_is" and resolve_weight_type("f16") == "f16"
    assert "AVX2" in cpu_features()  # the build's report is parsed, not empty


@pytest.mark.parametrize(
    ("features", "expected"),
    [
        ({"AVX", "AVX2", "F16C", "FMA", "AVX512", "AVX512_VNNI", "AVX512_BF16", "REPACK"}, "bf16"),  # AVX-512 BF16
        ({"AVX", "AVX2", "F16C", "FMA", "BMI2", "REPACK"}, "q8_0"),  # AVX2 only: q4_0 is faster, but not lossless
        ({"AVX", "AVX2", "F16C", "FMA", "AVX512", "AVX512_VNNI"}, "q8_0"),  # AVX-512 without BF16: AVX2's rule
        ({"SSE3", "SSSE3"}, "as_is"),  # nothing measured: the GGUF as shipped
    ],
)
def test_auto_chooses_the_measured_fastest_type_per_cpu_class(
    features: set[str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("prag_models.llm.gguf_weights.cpu_features", lambda: features)
    assert resolve_weight_type("auto") == expected
    assert resolve_weight_type("q4_0") == "q4_0"  # an explicit choice is kept on any CPU


def test_conversion_is_cached_and_atomic(tmp_path: Path) -> None:
    source = packaged_gguf_path()
    assert converted_gguf(source, "as_is", tmp_path) == source
    target = converted_gguf(source, "q8_0", tmp_path)
    assert target.parent == tmp_path and target.name.startswith("SmolLM2-135M-Instruct.Q4_1.q8_0-")
    assert target.stat().st_size > source.stat().st_size  # 8-bit weights are larger than 4-bit ones
    mtime = target.stat().st_mtime_ns
    assert converted_gguf(source, "q8_0", tmp_path) == target and target.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no partial files left behind
    with pytest.raises(GenerationError, match="weight type"):
        converted_gguf(source, "int3", tmp_path)


def test_converted_model_generates_under_its_own_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRAG_MODEL_CACHE", str(tmp_path))
    gen = LlamaCppGenerator(GeneratorSettings(n_ctx=512, llama_cpp_weights="q8_0"))
    try:
        assert gen.model_id == "llama_cpp:SmolLM2-135M-Instruct.Q4_1.gguf@q8_0"
        assert gen.model_path.parent == tmp_path
        assert gen.generate(["Name a colour."], 8)[0].strip()
    finally:
        gen.close()


def test_one_decode_per_choice_equals_token_by_token_scoring() -> None:
    gen = LlamaCppGenerator(GeneratorSettings(n_ctx=512, llama_cpp_weights="as_is"))
    try:
        scores = gen.score_choices([PROMPT], TAGS)[0]
        llm = gen._llm
        with_prompt, whole = gen._formatters
        user = [{"role": "user", "content": PROMPT}]
        prefix = with_prompt(messages=user).prompt
        base = gen._special_tokens(prefix)
        for tag, score in zip(TAGS, scores, strict=True):
            full = whole(messages=[*user, {"role": "assistant", "content": tag}]).prompt
            answer = gen._special_tokens(full[len(prefix) :].rstrip())
            assert len(answer) >= 2  # the label plus the end-of-turn marker
            llm.reset()
            llm.eval(base)
            total = 0.0
            for token in answer:  # reference: one decode per token, reading the last position's logits
                logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))
                total += float(log_softmax(logits.astype(np.float64))[token])
                llm.eval([token])
            assert score == pytest.approx(total, abs=2e-3)
    finally:
        gen.close()


def test_scores_do_not_depend_on_what_was_scored_before() -> None:
    # bf16 when the build supports it: its 1-token kernel path differs from the batch path, which prefix reuse avoids
    gen = LlamaCppGenerator(GeneratorSettings(n_ctx=512))
    try:
        fresh = gen.score_choices([PROMPT], TAGS)[0]
        again = gen.score_choices([PROMPT], TAGS)[0]  # the whole prompt is in the KV cache already
        gen.score_choices(["Pick one tag from [sci-fi, comedy] for: a cat sleeps all day."], TAGS)
        after_other = gen.score_choices([PROMPT], TAGS)[0]  # shares the chat template's system turn only
        assert again == fresh and after_other == fresh
    finally:
        gen.close()


def test_forget_makes_a_batch_independent_of_the_prompts_before_it() -> None:
    """With generator.fresh_batches, after forget() nothing of the previous prompt's KV cache is reused: a prompt that
    shares a long prefix with the one scored before scores exactly as on a fresh model (engine-independent labels)."""
    shared = "The historical profiles are as follows:\n1. A heist movie. tag: crime\n2. Gangsters again. tag: crime\n"
    first, second = (f"{shared}Pick one tag from [sci-fi, crime] for: {x}" for x in ("a bank job", "a robot war"))
    fresh = LlamaCppGenerator(GeneratorSettings(n_ctx=512, fresh_batches=False))
    gen = LlamaCppGenerator(GeneratorSettings(n_ctx=512))
    try:
        expected = fresh.score_choices([second], TAGS)[0]
        gen.score_choices([first], TAGS)
        assert gen._llm.n_tokens > 0
        gen.forget()
        assert gen._llm.n_tokens == 0
        assert gen.score_choices([second], TAGS)[0] == expected
        fresh.forget()  # fresh_batches = false: the KV cache is kept for the next prompt's prefix
        assert fresh._llm.n_tokens > 0
    finally:
        fresh.close()
        gen.close()


def test_converting_and_loading_print_nothing(tmp_path: Path) -> None:
    """Issue 42: the demo's terminal showed llama.cpp's model-loader dump (GGUF metadata, `llama_model_loader:`
    lines) and a line per converted tensor (272) when the packaged model was converted and loaded; a first
    conversion into an empty cache and the load print nothing, on stdout or stderr (file descriptors included)."""
    import os
    import subprocess
    import sys

    code = ("from prag_models.config.settings import GeneratorSettings\n"
            "from prag_models.llm.llamacpp_backend import LlamaCppGenerator\n"
            "g = LlamaCppGenerator(GeneratorSettings(llama_cpp_weights='q8_0', threads=1))\n"
            "g.generate(['Say hi'], 2)\n"
            "g.close()\n")  # fmt: skip
    env = os.environ | {"PRAG_MODEL_CACHE": str(tmp_path / "gguf")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list((tmp_path / "gguf").glob("*.q8_0-*.gguf"))  # it did convert
    printed = (proc.stdout + proc.stderr).strip()
    assert not printed, printed[:3000]
