"""prag's LLM-utility throughput against llama.cpp's own benchmark of the same model file on the same cores.

    python benchmarks/llm_throughput.py [--samples 2] [--rounds 3] [--threads N] [--llama-bench PATH]
                                        [--variants prag,sequential | --weights as_is,q4_0,q8_0,f16,bf16]

The LLM utility (docs/methods.md §6.7) scores a gold answer as the whole assistant reply to a LaMP prompt:
``Generator.score_answers``. This benchmark scores prompts of the embedded demo as stage 5b builds them (a dev
sample's LaMP prompt with 3 documents, budgeted to prompt.max_prompt_tokens, its gold output written as the prompt
asks), 3 prompts per utility sample: the sample's 3 most recent own documents (standing in for `dense`), 3 older
ones, or another user's where the profile is short (the chosen personalized method), and another user's 3 most recent
(`dense_global`); in batches of generator.batch_size, each after ``forget()``, as ``utility_values`` calls it.

The yardstick is ``llama-bench -m <the GGUF prag loads> -p <len> -n 0 -t <threads> -fa <as prag>``: llama.cpp's
prompt processing of one sequence of that many tokens. It is built from the llama.cpp sources vendored in the
installed llama-cpp-python version with the SIMD flags of the installed build (scripts/setup.sh's), once, into
~/.cache/prag-llama-bench (never into the repository; about 3 minutes on 2 free cores), unless --llama-bench names a
binary. The prompts are split into three length bins and llama-bench runs at each bin's median length. Tokens are
those of each scored sequence (chat-templated prompt + answer + end-of-turn marker), counted as if evaluated alone;
ratio = prag's tokens/s over llama-bench's at the same lengths (goal >= 0.9). prag reuses the KV cache of the prefix
a prompt shares with the one before (the chat template's system turn at least), so a ratio above 1 is possible.

Variants, each in its own process (its peak RSS is its own): ``prag`` (score_answers as configured) and
``sequential`` (each prompt evaluated, then its answer decoded apart: prag's path before this benchmark), optionally
with generator settings, e.g. ``prag:flash_attention=false`` (llama-bench follows the first variant's flash
attention). ``--weights`` runs ``prag`` once per generator.llama_cpp_weights type (gguf_weights.py): llama-bench runs
on each variant's own GGUF, and a second table gives every type's speed against the first (as_is = the shipped Q4_1)
and its utility quality against the reference (bf16, else f16): the mean abs difference of the log-likelihoods per
token, and of the paired differences a verdict tests (per sample: the first and the second prompt, each minus the
third, `dense_global`'s), with their correlation. Rounds alternate llama-bench and every variant (A/B/A/B, the
variants' order rotated each round; a GGUF's llama-bench right before its first variant) and every figure is a median
over rounds, so that other load on shared cores hits all sides alike; on shared cores compare ratios and CPU seconds,
not wall-clock figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = ("LaMP-1", "LaMP-2", "LaMP-3", "LaMP-4", "LaMP-5", "LaMP-7")
PROMPTS_PER_SAMPLE = 3  # the chosen method, dense_global, dense (stage 5b's test phase)
#: installed llama.cpp features -> the cmake flags scripts/setup.sh builds them with
SIMD_FLAGS = {"AVX": "GGML_AVX", "AVX2": "GGML_AVX2", "FMA": "GGML_FMA", "F16C": "GGML_F16C", "BMI2": "GGML_BMI2",
              "AVX512": "GGML_AVX512", "AVX512_VBMI": "GGML_AVX512_VBMI", "AVX512_VNNI": "GGML_AVX512_VNNI",
              "AVX512_BF16": "GGML_AVX512_BF16"}  # fmt: skip
LINE = "@@ "  # prefix of a worker's JSON lines (llama.cpp may print to stdout too)


# --------------------------------------------------------------------------------------------------- llama-bench


def simd_flags() -> list[str]:
    """cmake flags for the SIMD features the installed llama.cpp build has (as scripts/setup.sh chose them)."""
    from prag_models.llm.gguf_weights import cpu_features

    features = cpu_features()
    return ["-DGGML_NATIVE=OFF"] + [f"-D{flag}=ON" for name, flag in SIMD_FLAGS.items() if name in features]


def llama_bench(path: str | None) -> Path:
    """The llama-bench binary: the given one, else built once from the installed llama-cpp-python's sources."""
    if path:
        return Path(path)
    import llama_cpp

    version, flags = llama_cpp.__version__, simd_flags()
    cache = Path(os.environ.get("PRAG_LLAMA_BENCH_CACHE") or Path.home() / ".cache" / "prag-llama-bench")
    build = cache / f"build-{version}-{hashlib.sha1(' '.join(flags).encode()).hexdigest()[:8]}"
    binary = build / "bin" / "llama-bench"
    if binary.is_file():
        return binary
    source = cache / f"llama_cpp_python-{version}"
    if not (source / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
        print(f"downloading the llama-cpp-python {version} sources into {cache}", flush=True)
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-binary",
                        ":all:", "--no-deps", "--quiet", "-d", str(cache)], check=True)  # fmt: skip
        with tarfile.open(cache / f"llama_cpp_python-{version}.tar.gz") as tar:
            tar.extractall(cache, filter="data")
    print(f"building llama-bench once (about 3 min on 2 free cores) into {build}: {' '.join(flags)}", flush=True)
    configure = ["cmake", "-S", str(source / "vendor" / "llama.cpp"), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                 *flags, "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]  # fmt: skip
    compile_ = ["cmake", "--build", str(build), "--target", "llama-bench", "-j", str(os.cpu_count() or 1)]
    for cmd in (configure, compile_):
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-4000:]
            raise SystemExit(f"building llama-bench failed: {' '.join(cmd)}\n{tail}")
    return binary


def bench_tokens_per_s(binary: Path, gguf: str, lengths: list[int], threads: int, flash: bool) -> dict[int, float]:
    """llama-bench's prompt-processing tokens/s at each length (its warm-up, then 2 repetitions averaged)."""
    cmd = [str(binary), "-m", gguf, "-p", ",".join(map(str, lengths)), "-n", "0", "-t", str(threads),
           "-fa", "1" if flash else "0", "-r", "2", "-o", "json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"llama-bench failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return {int(row["n_prompt"]): float(row["avg_ts"]) for row in json.loads(done.stdout)}


# --------------------------------------------------------------------------------------------------- prag workers


def utility_prompts(root: Path, samples: int, generator, settings) -> list[tuple[str, str]]:
    """(prompt, gold answer) of the first dev samples of every demo task, 3 prompts per sample (module docstring)."""
    from prag_models.data.lamp import load_lamp_task
    from prag_models.evaluation.utility import gold_answer
    from prag_models.generation.answers import lamp_prompt
    from prag_models.generation.prompts import prompt_document

    out = []
    for task in TASKS:
        dev = [s for s in load_lamp_task(root, task, splits=("dev",))["dev"] if s.gold][: samples + 2]
        for s, other, third in zip(dev[:samples], dev[1:], dev[2:], strict=False):
            older = [*third.profile[-3:], *s.profile[:-3]][-3:]  # own older documents, else another user's
            for docs in (s.profile[-3:], older, other.profile[-3:]):
                texts = [prompt_document(task, d.text, d.fields) for d in docs]
                out.append((lamp_prompt(task, s.input, texts, generator, settings.prompt), gold_answer(task, s.gold)))
    return out


def parse_variant(variant: str) -> tuple[str, dict[str, str]]:
    """("prag" | "sequential", generator setting overrides) of a variant like ``prag:flash_attention=false``."""
    kind, _, overrides = variant.partition(":")
    if kind not in ("prag", "sequential"):
        raise SystemExit(f"unknown variant {variant!r}: prag or sequential, optionally :setting=value;...")
    return kind, dict(item.split("=", 1) for item in overrides.split(";") if item)


def worker(variant: str, root: Path, samples: int, threads: int) -> None:
    """Serve one variant: print the prompts' lengths, then time one pass per line on stdin (JSON lines out)."""
    from prag_models.config.settings import GeneratorSettings, Settings
    from prag_models.llm.llamacpp_backend import LlamaCppGenerator

    kind, overrides = parse_variant(variant)
    settings = Settings()
    gen_settings = GeneratorSettings(**{**settings.generator.model_dump(), "threads": threads, **overrides})
    gen = LlamaCppGenerator(gen_settings)
    pairs = utility_prompts(root, samples, gen, settings)
    lengths = [sum(map(len, (base, *answer))) for base, answer in (gen._chat_tokens(p, [a]) for p, a in pairs)]
    order = sorted(range(len(pairs)), key=lambda i: lengths[i])
    bins = [sorted(order[k * len(order) // 3 : (k + 1) * len(order) // 3]) for k in range(3)]

    def sequential(prompts: list[str], answers: list[str]) -> list[tuple[float, int]]:
        return [gen._score(p, [a])[0] for p, a in zip(prompts, answers, strict=True)]

    score = gen.score_answers if kind == "prag" else sequential
    score([pairs[0][0]], [pairs[0][1]])  # warm up
    _say({"model_path": str(gen.model_path), "flash": gen_settings.flash_attention,
          "bins": [[lengths[i] for i in b] for b in bins]})  # fmt: skip
    for _ in sys.stdin:
        seconds, cpu, results = [], [], {}
        for members in bins:
            started, cpu_started = time.perf_counter(), time.process_time()
            for k in range(0, len(members), gen_settings.batch_size):
                batch = members[k : k + gen_settings.batch_size]
                gen.forget()
                scored = score([pairs[i][0] for i in batch], [pairs[i][1] for i in batch])
                results.update(zip(batch, scored, strict=True))
            seconds.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        _say({"seconds": seconds, "cpu_seconds": cpu, "scores": [results[i] for i in range(len(pairs))],
              "peak_mb": peak_mb})  # fmt: skip


def _say(message: dict) -> None:
    print(LINE + json.dumps(message), flush=True)


# --------------------------------------------------------------------------------------------------- driver


class Worker:
    """One variant's worker process."""

    def __init__(self, variant: str, root: str, samples: int, threads: int) -> None:
        cmd = [sys.executable, __file__, "--worker", variant, "--root", root, "--samples", str(samples),
               "--threads", str(threads)]  # fmt: skip
        self.variant, self.threads = variant, threads
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self._read()

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(LINE):
                return json.loads(line[len(LINE) :])
        raise SystemExit(f"worker {self.variant} failed (exit {self.proc.wait()})")

    def run(self) -> dict:
        """One timed pass over every prompt."""
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """End the worker."""
        self.proc.stdin.close()
        self.proc.wait()


def cpu_summary(threads: int) -> str:
    """CPU model, whether the llama.cpp build uses AVX-512 or AVX2 only, threads, and the load right now."""
    from prag_models.llm.gguf_weights import cpu_features

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")  # fmt: skip
    features = cpu_features()
    avx512 = sorted(f for f in features if f.startswith("AVX512"))
    kind = f"AVX-512 ({', '.join(avx512)})" if avx512 else "AVX2 only"
    load, cores = os.getloadavg(), os.cpu_count() or 1
    shared = " - cores SHARED with other work: wall-clock figures are upper bounds" if load[0] > 0.5 * cores else ""
    return (f"{model}; llama.cpp build: {kind}; {threads} threads of {cores} cores; "
            f"load average {', '.join(f'{x:.1f}' for x in load)}{shared}")  # fmt: skip


def measure(workers: list[Worker], binary: Path, rounds: int) -> dict:
    """Alternate llama-bench (on each variant's GGUF) and every variant for the rounds; keep every pass's figures."""
    first = workers[0].info
    medians = [int(statistics.median(b)) for b in first["bins"]]
    runs: dict[str, list[dict]] = {w.variant: [] for w in workers}
    bench: dict[str, list[dict[int, float]]] = {w.info["model_path"]: [] for w in workers}
    for r in range(rounds):
        for w in workers[r % len(workers) :] + workers[: r % len(workers)]:
            path = w.info["model_path"]
            if len(bench[path]) == r:
                bench[path].append(bench_tokens_per_s(binary, path, medians, w.threads, first["flash"]))
            runs[w.variant].append(w.run())
        print(f"  round {r + 1}/{rounds} done ({cpu_summary(workers[0].threads).rsplit('; ', 1)[-1]})", flush=True)
    return {"medians": medians, "runs": runs, "bench": bench}


def report(workers: list[Worker], rows: dict, args: argparse.Namespace) -> None:
    """Print the per-length table (each variant against llama-bench on its own GGUF), then the weight types'."""
    medians, bins = rows["medians"], workers[0].info["bins"]
    bin_tokens = [sum(b) for b in bins]
    n_prompts, per_sample = sum(len(b) for b in bins), PROMPTS_PER_SAMPLE / sum(len(b) for b in bins)
    bench = {p: [statistics.median(run[m] for run in runs) for m in medians] for p, runs in rows["bench"].items()}
    bench_s = {p: sum(t / ts for t, ts in zip(bin_tokens, x, strict=True)) for p, x in bench.items()}  # same tokens
    print(f"\n{n_prompts} utility prompts ({args.samples} samples x {len(TASKS)} tasks x {PROMPTS_PER_SAMPLE}), "
          f"{sum(bin_tokens)} tokens, {args.rounds} rounds (medians); "
          f"llama-bench -p <len> -n 0 -t {args.threads} -fa {int(workers[0].info['flash'])}\n")  # fmt: skip
    cols = " | ".join(f"~{m} tokens ({len(b)} prompts): tok/s, ratio" for m, b in zip(medians, bins, strict=True))
    print(f"| | {cols} | all: tok/s, ratio | s per utility sample (CPU s) | peak RSS MB | max abs Δ loglik |")
    print("|---" * (5 + len(bins)) + "|")
    for path, x in bench.items():
        print(f"| llama-bench {Path(path).name} | {' | '.join(f'{v:.0f}' for v in x)} | "
              f"{sum(bin_tokens) / bench_s[path]:.0f} | {bench_s[path] * per_sample:.3f} | | |")  # fmt: skip
    stats = {}
    for w in workers:
        runs, path = rows["runs"][w.variant], w.info["model_path"]
        secs = [statistics.median(run["seconds"][k] for run in runs) for k in range(len(bins))]
        total = statistics.median(sum(run["seconds"]) for run in runs)
        cpu = statistics.median(sum(run["cpu_seconds"]) for run in runs)
        cells = [f"{t / s:.0f}, {t / s / x:.2f}" for t, s, x in zip(bin_tokens, secs, bench[path], strict=True)]
        same = next(v for v in workers if v.info["model_path"] == path)  # the first variant on this GGUF
        first = rows["runs"][same.variant][0]["scores"]
        diff = max(abs(a[0] - b[0]) for run in runs for a, b in zip(run["scores"], first, strict=True))
        stats[w.variant] = {"total": total, "cpu": cpu, "bench_s": bench_s[path], "scores": runs[0]["scores"]}
        print(f"| {w.variant} | {' | '.join(cells)} | {sum(bin_tokens) / total:.0f}, {bench_s[path] / total:.2f} | "
              f"{total * per_sample:.3f} ({cpu * per_sample:.3f}) | {max(r['peak_mb'] for r in runs):.0f} | "
              f"{diff:.1e} |")  # fmt: skip
    print(f"\nratio: prag's tokens/s over llama-bench's on the same GGUF at the same lengths (goal >= 0.9). A utility "
          f"sample is {PROMPTS_PER_SAMPLE} prompts. max abs Δ loglik: against the first pass of the first variant on "
          "the same GGUF, over every pass (0 = the same bits; `sequential` differs: llama.cpp rounds an answer decoded "
          "apart from its prompt differently, by up to 0.2 nats with bf16 weights, 1.1 with Q4_1).")  # fmt: skip
    if args.weights:
        weight_table(workers, stats, sum(bin_tokens), per_sample)
    print(cpu_summary(args.threads) + " (at the end)")


def weight_table(workers: list[Worker], stats: dict, tokens: int, per_sample: float) -> None:
    """Every weight type's speed against the first variant's and its utility quality against bf16 (else f16)."""
    import numpy as np

    names = {w.variant: w.variant.rsplit("=", 1)[-1] for w in workers}
    ref = next((v for t in ("bf16", "f16") for v, n in names.items() if n == t), workers[0].variant)
    base = stats[workers[0].variant]

    def utilities(variant: str) -> tuple[np.ndarray, np.ndarray]:
        """Log-likelihood per token of every prompt, and each sample's paired differences."""
        u = np.array([loglik / max(n, 1) for loglik, n in stats[variant]["scores"]]).reshape(-1, PROMPTS_PER_SAMPLE)
        return u.ravel(), (u[:, :-1] - u[:, -1:]).ravel()  # per prompt; paired against the sample's last prompt

    ref_u, ref_d = utilities(ref)
    b = names[workers[0].variant]
    print(f"\n| weights | llama-bench tok/s (× {b}) | prag tok/s (× {b}) | s per utility sample, CPU s "
          f"(× {b} by CPU s) | mean abs Δ loglik/token vs {names[ref]} "
          f"| paired differences: mean abs Δ, correlation vs {names[ref]} |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for w in workers:
        s, (u, d) = stats[w.variant], utilities(w.variant)
        corr = float(np.corrcoef(d, ref_d)[0, 1]) if d.std() > 0 and ref_d.std() > 0 else float("nan")
        print(f"| {names[w.variant]} | {tokens / s['bench_s']:.0f} ({base['bench_s'] / s['bench_s']:.2f}×) | "
              f"{tokens / s['total']:.0f} ({base['total'] / s['total']:.2f}×) | {s['total'] * per_sample:.3f}, "
              f"{s['cpu'] * per_sample:.3f} ({base['cpu'] / s['cpu']:.2f}×) | {np.abs(u - ref_u).mean():.4f} | "
              f"{np.abs(d - ref_d).mean():.4f}, {corr:.4f} |")  # fmt: skip
    print(f"\n{len(ref_u)} prompts, {len(ref_d)} paired differences (first pass of each variant).")


def main() -> int:
    """Build or find llama-bench, start the workers, alternate the rounds, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2, help="utility samples per task (3 prompts each, 6 tasks)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of llama-bench and the variants")
    ap.add_argument("--variants", default="prag,sequential",
                    help="comma-separated; the first is the reference of the agreement column")  # fmt: skip
    ap.add_argument("--weights", help="comma-separated weight types (e.g. as_is,q4_0,q8_0,f16,bf16): one prag "
                    "variant each (prag:llama_cpp_weights=<type>) instead of --variants")  # fmt: skip
    ap.add_argument("--threads", type=int, default=None, help="default: generator.threads (0: the usable cores)")
    ap.add_argument("--llama-bench", help="a llama-bench binary (default: build it once into ~/.cache)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.threads:
        from prag_models.config.settings import Settings
        from prag_models.llm.base import usable_cores

        args.threads = usable_cores(Settings().generator.threads)  # 0 = the cores this process may run on
    if args.worker:
        worker(args.worker, Path(args.root), args.samples, args.threads)
        return 0
    variants = args.variants.split(",")
    if args.weights:
        variants = [f"prag:llama_cpp_weights={w}" for w in args.weights.split(",")]
    for variant in variants:
        parse_variant(variant)
    binary = llama_bench(args.llama_bench)
    print(cpu_summary(args.threads), flush=True)
    from prag_models.data.demo import write_demo

    with tempfile.TemporaryDirectory() as tmp:
        write_demo(Path(tmp), tasks=list(TASKS))
        workers: list[Worker] = []
        try:
            workers += [Worker(v, tmp, args.samples, args.threads) for v in variants]
            rows = measure(workers, binary, args.rounds)
        finally:
            for w in workers:
                w.close()
    report(workers, rows, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
