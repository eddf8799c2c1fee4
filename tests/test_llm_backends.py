"""Generator backends: the fake, the factory, the DuckDB generation cache and the real packaged SmolLM2."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import duckdb
import pytest

from prag_models.config.settings import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator
from prag_models.llm.cache import generate_cached, prompt_hash
from prag_models.llm.factory import make_generator
from prag_models.llm.fake import FakeGenerator
from prag_models.llm.packaged import packaged_gguf_path, resolve_generator_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHORT_PROMPTS = ["What is the capital of France? Answer in one short sentence.", "Say hello to Bob."]
LAMP2_PROMPT = (
    "The historical profiles are as follows:\n1. A heist movie. tag: crime\n2. Gangsters again. tag: crime\n"
    "3. A love story. tag: romance\nBased on the historical profiles provided, please select the tag from "
    "[sci-fi, crime, romance, comedy] that is most relevant to the user's input description. Please just answer "
    "with the tag name without explanation.\nUser input: Two thieves plan one last job."
)


# ---------------------------------------------------------------- fake generator and factory


def test_fake_generator_is_deterministic_and_label_aware() -> None:
    fake = FakeGenerator()
    prompts = [LAMP2_PROMPT, "Echo these words back please, thank you very much indeed.", SHORT_PROMPTS[0]]
    first = fake.generate(prompts, 16)
    assert first == FakeGenerator().generate(prompts, 16)
    assert first[0] == "crime"
    assert first[1].startswith("Echo these words")
    assert fake.model_id == "fake:v1" and fake.calls == 1 and fake.generated == 3
    json_prompt = (
        "Please generate a title for the user's input abstract. Please generate it in the following format: "
        '{"title": "generated title"} without explanation, and use only English.\nUser input: Graph neural nets'
    )
    assert fake.generate([json_prompt], 8) == ['{"title": "Graph neural nets"}']
    rating = fake.generate(["What is the score... scale of 1 to 5?\nUser input: fine"], 4)[0]
    assert rating in {"1", "2", "3", "4", "5"}


def test_factory_dispatch_and_errors() -> None:
    assert make_generator(GeneratorSettings(backend="fake")).model_id == "fake:v1"
    with pytest.raises(GenerationError, match="unknown generator backend 'nope'"):
        make_generator(GeneratorSettings(backend="nope"))
    with pytest.raises(GenerationError, match="base_url"):
        make_generator(GeneratorSettings(backend="openai", base_url=""))
    with pytest.raises(GenerationError, match="does not exist"):
        make_generator(GeneratorSettings(backend="llama_cpp", model="/nowhere/model.gguf"))


def test_vllm_backend_without_vllm_explains_the_install(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(GenerationError, match=r"prag\[vllm\].*vllm_cpu_check"):
        make_generator(GeneratorSettings(backend="vllm", model=str(tmp_path)))
    with pytest.raises(GenerationError, match="GGUF"):
        make_generator(GeneratorSettings(backend="vllm", model=str(packaged_gguf_path())))


def test_resolve_generator_model() -> None:
    gguf = packaged_gguf_path()
    assert gguf.is_file() and gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    for alias in ("HuggingFaceTB/SmolLM2-135M-Instruct", "packaged:smollm2"):
        assert resolve_generator_model(alias, "llama_cpp") == str(gguf)
        assert resolve_generator_model(alias, "transformers") == str(gguf)
    assert resolve_generator_model("org/other-model", "transformers") == "org/other-model"
    assert (
        resolve_generator_model("HuggingFaceTB/SmolLM2-135M-Instruct", "vllm") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    with pytest.raises(GenerationError, match="gguf_to_hf"):
        resolve_generator_model("packaged:smollm2", "vllm")


# ---------------------------------------------------------------- generation cache


class CountingGenerator(Generator):
    """Upper-cases prompts, counts them, and can fail after a given number of batches."""

    model_id = "counting:v1"

    def __init__(self, fail_after_batches: int | None = None) -> None:
        self.batches: list[list[str]] = []
        self.fail_after_batches = fail_after_batches

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        if self.fail_after_batches is not None and len(self.batches) >= self.fail_after_batches:
            raise RuntimeError("interrupted")
        self.batches.append(list(prompts))
        return [f"{p.upper()}|{max_new_tokens}" for p in prompts]

    @property
    def generated(self) -> int:
        return sum(len(b) for b in self.batches)


def test_generate_cached_dedupes_and_reuses(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "cache.duckdb"))
    prompts = ["a", "b", "a", "c", "d", "b"]
    gen = CountingGenerator()
    seen: list[tuple[int, int]] = []
    out, n = generate_cached(gen, prompts, 8, con, batch_size=2, progress=lambda d, t: seen.append((d, t)))
    assert out == ["A|8", "B|8", "A|8", "C|8", "D|8", "B|8"]
    assert n == 4 and gen.generated == 4 and seen == [(2, 4), (4, 4)]
    again = CountingGenerator()
    out2, n2 = generate_cached(again, prompts, 8, con, batch_size=2)
    assert out2 == out and n2 == 0 and again.generated == 0
    # another budget is another cache entry
    _, n3 = generate_cached(again, ["a"], 16, con)
    assert n3 == 1
    row = con.execute(
        "SELECT prompt, output FROM generation_cache WHERE generator_id = ? AND prompt_hash = ? AND max_new_tokens = 8",
        ["counting:v1", prompt_hash("c")],
    ).fetchone()
    assert row == ("c", "C|8")
    con.close()


def test_generate_cached_keeps_finished_batches_after_interruption(tmp_path: Path) -> None:
    path = str(tmp_path / "cache.duckdb")
    prompts = [f"prompt {i}" for i in range(5)]
    con = duckdb.connect(path)
    with pytest.raises(RuntimeError, match="interrupted"):
        generate_cached(CountingGenerator(fail_after_batches=1), prompts, 8, con, batch_size=2)
    con.close()
    con = duckdb.connect(path)  # a new process would see the same file
    assert con.execute("SELECT count(*) FROM generation_cache").fetchone() == (2,)
    rerun = CountingGenerator()
    out, n = generate_cached(rerun, prompts, 8, con, batch_size=2)
    assert n == 3 and rerun.batches == [["prompt 2", "prompt 3"], ["prompt 4"]]
    assert out == [f"PROMPT {i}|8" for i in range(5)]
    con.close()


# ---------------------------------------------------------------- real llama.cpp (llama_generator: tests/conftest.py)


def test_llama_cpp_generates_and_counts_tokens(llama_generator: Generator) -> None:
    suffix = "" if llama_generator.weight_type == "as_is" else f"@{llama_generator.weight_type}"
    assert llama_generator.model_id == "llama_cpp:SmolLM2-135M-Instruct.Q4_1.gguf" + suffix
    out = llama_generator.generate(SHORT_PROMPTS, 16)
    assert len(out) == 2 and all(o.strip() for o in out)
    assert llama_generator.generate(SHORT_PROMPTS[:1], 16) == out[:1]  # greedy: reproducible
    text = "Personalized retrieval picks the profile documents that help the model most. " * 4
    n = llama_generator.count_tokens(text)
    assert 40 < n < 80
    cut = llama_generator.truncate(text, 10)
    assert text.startswith(cut) and 0 < llama_generator.count_tokens(cut) <= 10
    assert llama_generator.truncate(text, n) == text and llama_generator.truncate(text, 0) == ""


def test_llama_cpp_too_long_prompt_is_a_generation_error(llama_generator: Generator) -> None:
    with pytest.raises(GenerationError, match="llama_cpp"):
        llama_generator.generate(["word " * 2000], 8)


# ---------------------------------------------------------------- OpenAI-compatible client vs a real llama.cpp server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    base = f"http://127.0.0.1:{port}/v1"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf_path()), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "1024", "--n_threads", "1"]  # fmt: skip
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    with open(log_path, "wb") as log:  # a file, not a pipe: the server's verbose log would fill a pipe and block it
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama_cpp.server exited with {proc.returncode} (needs llama-cpp-python[server]): {tail}")
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer /v1/models within 120 s: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        yield base
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_openai_backend_against_llama_server(llama_server: str) -> None:
    settings = GeneratorSettings(backend="openai", model="smollm2", base_url=llama_server, batch_size=2, timeout_s=60)
    gen = make_generator(settings)
    out = gen.generate(SHORT_PROMPTS, 16)
    assert len(out) == 2 and all(o.strip() for o in out)
    assert gen.model_id.startswith("openai:smollm2@http://127.0.0.1:")
    assert gen.count_tokens("three little words") == 3  # approximate counting from base.py


def test_openai_backend_wrong_port_fails_fast_and_clearly() -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    from prag_models.llm.openai_backend import OpenAIGenerator

    gen = OpenAIGenerator(GeneratorSettings(backend="openai", base_url=url, timeout_s=5), max_retries=2, backoff_s=0.1)
    start = time.monotonic()
    with pytest.raises(GenerationError, match=r"127\.0\.0\.1:\d+/v1/chat/completions.*3 attempt"):
        gen.generate(["hello"], 4)
    assert time.monotonic() - start < 5


# ---------------------------------------------------------------- real transformers (GGUF dequantised on load)


@pytest.fixture(scope="module")
def transformers_generator() -> Iterator[Generator]:
    gen = make_generator(GeneratorSettings(backend="transformers", batch_size=2))
    yield gen
    gen.close()


@pytest.mark.slow
def test_transformers_backend_on_packaged_gguf(transformers_generator: Generator) -> None:
    gen = transformers_generator
    assert gen.model_id == "transformers:SmolLM2-135M-Instruct.Q4_1.gguf"
    prompts = [*SHORT_PROMPTS, "Name a colour."]
    out = gen.generate(prompts, 12)
    assert len(out) == 3 and all(o.strip() for o in out)
    assert gen.generate(prompts[1:2], 12) == out[1:2]  # left padding does not change a greedy output
    text = "Clusters of similar users share useful documents. " * 3
    cut = gen.truncate(text, 5)
    assert text.startswith(cut) and 0 < gen.count_tokens(cut) <= 5 < gen.count_tokens(text)


def _chat_server(reply: Callable[[str], tuple[int, str]]):
    """A local OpenAI-compatible chat server on a free port, serving from a daemon thread until shut down:
    ``reply(content)`` gives each request's HTTP status and answer text (any status but 200 answers an error)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, text = reply(body["messages"][0]["content"])
            answer = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": text}}]}  # fmt: skip
            payload = json.dumps(answer if status == 200 else {"error": {"message": f"status {status}"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_openai_backend_retries_server_errors_then_answers() -> None:
    """Two 503s, then an answer: the client's retries carry the request; a 400 is not retried and is named."""
    from prag_models.llm.openai_backend import OpenAIGenerator

    calls: list[str] = []

    def reply(content: str) -> tuple[int, str]:
        calls.append(content)
        return (400 if content == "bad" else 503 if len(calls) <= 2 else 200), " ok "

    server = _chat_server(reply)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        gen = OpenAIGenerator(GeneratorSettings(backend="openai", model="m", base_url=url, timeout_s=5), max_retries=3)
        assert gen.generate(["hello"], 4) == ["ok"] and calls == ["hello"] * 3
        with pytest.raises(GenerationError, match=r"HTTP 400"):
            gen.generate(["bad"], 4)
        assert calls.count("bad") == 1
        gen.close()
    finally:
        server.shutdown()


def test_openai_backend_pool_spreads_requests_and_moves_past_a_failing_server() -> None:
    """generator.base_urls: two local OpenAI-compatible servers share the requests round-robin; when one answers
    503 every request still gets its answer from the other, the failing one is tried once and then passed over."""
    import threading

    from prag_models.llm.openai_backend import OpenAIGenerator

    def server(name: str, hits: list[str], failing: threading.Event):
        def reply(content: str) -> tuple[int, str]:
            hits.append(content)
            return (503 if failing.is_set() else 200), f"{name}:{content}"

        return _chat_server(reply)

    hits: dict[str, list[str]] = {"a": [], "b": []}
    failing = {"a": threading.Event(), "b": threading.Event()}
    servers = {name: server(name, hits[name], failing[name]) for name in ("a", "b")}
    urls = [f"http://127.0.0.1:{servers[n].server_address[1]}/v1" for n in ("a", "b")]
    try:
        settings = GeneratorSettings(backend="openai", model="m", base_url=urls[0], base_urls=(urls[1],),
                                     batch_size=1, timeout_s=5)  # fmt: skip
        gen = make_generator(settings)
        assert isinstance(gen, OpenAIGenerator) and gen.model_id == "openai:m@pool"
        prompts = [f"p{i}" for i in range(8)]
        out = gen.generate(prompts, 4)
        assert sorted(o.split(":")[1] for o in out) == prompts and gen.served == [4, 4]  # round-robin
        assert {o.split(":")[0] for o in out} == {"a", "b"}

        failing["b"].set()
        more = [f"q{i}" for i in range(6)]
        out = gen.generate(more, 4)
        assert out == [f"a:{p}" for p in more]  # every answer arrives, from the healthy server
        # the failing server got one request, which moved on; then it was passed over during its cooldown
        assert len([h for h in hits["b"] if h.startswith("q")]) == 1

        failing["a"].set()
        with pytest.raises(GenerationError, match=r"of the pool .*HTTP 503"):
            OpenAIGenerator(settings, max_retries=1, backoff_s=0.05).generate(["r"], 4)
        gen.close()
    finally:
        for httpd in servers.values():
            httpd.shutdown()
