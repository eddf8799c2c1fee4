"""The embedder's backends on this CPU: documents per second against torch fp32, and what each does to retrieval.

    python benchmarks/embedder_speed.py [--texts 1500] [--rounds 3] [--backends torch,torch_int8,onnx,onnx_int8]
    python benchmarks/embedder_speed.py --quality          # also the retrieval agreement on every demo document
    bash scripts/slow_proxy.sh .venv-avx2/bin/python benchmarks/embedder_speed.py   # a slow AVX2 machine's proxy

Texts are the embedded demo's documents (every task, rendered as the retrievers embed them), a random sample of
--texts of them. Each round runs every backend in its own process (load, one warm-up batch, one timed pass; peak RSS
is that process's), the backends in turn, so that a busy other core slows them alike; the figures are the medians
over the rounds, and each backend's ratio is the median of its per-round ratios to torch fp32 of the same round.
The ONNX backends export the model once (cached under ~/.cache/prag/onnx); the load column includes that export the
first time. --quality embeds every demo document and the dev queries with each backend (in this process) and prints
the cosine of each vector to torch fp32's (min / mean), the overlap of the top 3 of dense retrieval over a task's
documents (dense_global without privacy) with fp32's, and NDCG@3 against the planted relevance and label-hit@3 with
the paired 95 % interval of the difference to fp32 (n = dev samples of all tasks).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prag_models.config.settings import EmbedderSettings  # noqa: E402
from prag_models.data.demo import write_demo  # noqa: E402
from prag_models.data.tasks import extract_query, render_document  # noqa: E402
from prag_models.data.truth import LABEL_FIELDS, document_label, gold_label  # noqa: E402
from prag_models.metrics.intervals import Estimate, paired_difference  # noqa: E402

BACKENDS = ("torch", "torch_int8", "onnx", "onnx_int8")
K = 3


def demo_corpus() -> dict[str, dict]:
    """Per task: documents {doc_id: (text, label)} and dev samples [(sample_id, query, relevant ids, gold label)]."""
    with tempfile.TemporaryDirectory() as tmp:
        manifest = write_demo(Path(tmp))
        out: dict[str, dict] = {}
        for task, entry in manifest["tasks"].items():
            folder = Path(tmp) / f"LaMP_{task[5:]}_time"
            docs: dict[str, tuple[str, str]] = {}
            for split in ("train", "dev"):
                for q in json.loads((folder / split / f"{split}_questions.json").read_text(encoding="utf-8")):
                    for p in q["profile"]:
                        label = document_label(task, p) if task in LABEL_FIELDS else ""
                        docs.setdefault(str(p["id"]), (render_document(task, p), label))
            questions = json.loads((folder / "dev" / "dev_questions.json").read_text(encoding="utf-8"))
            golds = json.loads((folder / "dev" / "dev_outputs.json").read_text(encoding="utf-8"))["golds"]
            gold_of = {str(g["id"]): str(g["output"]) for g in golds}
            info = entry["sample_info"]
            samples = [
                (str(q["id"]), extract_query(task, q["input"]), set(info[str(q["id"])]["relevant_docs"]),
                 gold_label(task, q["input"], gold_of[str(q["id"])]) if task in LABEL_FIELDS else None)
                for q in questions
            ]  # fmt: skip
            out[task] = {"docs": docs, "samples": samples}
    return out


def sample_texts(n: int, seed: int = 0) -> list[str]:
    """n demo document texts drawn at random (every task's documents pooled)."""
    texts = [text for c in demo_corpus().values() for text, _ in c["docs"].values()]
    rng = np.random.default_rng(seed)
    return [texts[i] for i in rng.choice(len(texts), min(n, len(texts)), replace=False)]


def cpu_class() -> str:
    """The CPU's model name, its widest SIMD class, the cores this process may use and torch's threads."""
    import torch

    info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace") if Path("/proc/cpuinfo").exists() else ""
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "unknown")
    flags = set(next((ln.split(":", 1)[1] for ln in info.splitlines() if ln.startswith("flags")), "").split())
    simd = "AVX-512 (BF16)" if "avx512_bf16" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    capped = os.environ.get("ATEN_CPU_CAPABILITY")
    simd += f", torch capped to {capped}" if capped else ""
    return f"{name}; {simd}; {len(os.sched_getaffinity(0))} cores allowed; torch threads {torch.get_num_threads()}"


def child(backend: str, n: int) -> dict[str, float]:
    """In a fresh process: load the backend, warm up, embed n demo texts once; docs/s, load seconds, peak RSS."""
    from prag_models.text.embedder import Embedder

    texts = sample_texts(n)
    t0 = time.perf_counter()
    embedder = Embedder(EmbedderSettings(backend=backend))
    loaded = time.perf_counter() - t0
    embedder.embed(texts[:64])
    t0 = time.perf_counter()
    embedder.embed(texts)
    seconds = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"docs_s": len(texts) / seconds, "load_s": loaded, "rss_mb": rss_mb}


def speed(backends: list[str], n: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median docs/s, ratio to torch fp32 (median of per-round ratios), load seconds and peak RSS per backend."""
    runs: dict[str, list[dict[str, float]]] = {b: [] for b in backends}
    for r in range(rounds):
        for backend in backends:
            cmd = [sys.executable, __file__, "--child", backend, "--texts", str(n)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
            runs[backend].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"[round {r + 1}] {backend}: {runs[backend][-1]['docs_s']:.1f} docs/s", file=sys.stderr, flush=True)
    ref = [x["docs_s"] for x in runs["torch"]]
    return {
        b: {
            "docs_s": float(np.median([x["docs_s"] for x in xs])),
            "ratio": float(np.median([x["docs_s"] / t for x, t in zip(xs, ref, strict=True)])),
            "load_s": float(np.median([x["load_s"] for x in xs])),
            "rss_mb": float(max(x["rss_mb"] for x in xs)),
        }
        for b, xs in runs.items()
    }


def ndcg(ranked: list[str], relevant: set[str], k: int = K) -> float:
    """Binary NDCG@k (as prag_models.evaluation.retrieval scores it)."""
    dcg = sum(1.0 / np.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in relevant)
    ideal = sum(1.0 / np.log2(i + 2) for i in range(min(k, len(relevant))))
    return float(dcg / ideal) if ideal else 0.0


def retrieval(corpus: dict[str, dict], vectors: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, list]:
    """Per dev sample (all tasks): the top-k doc ids over the task's documents (one per text), NDCG@k, label-hit@k."""
    out: dict[str, list] = {"top": [], "ndcg": [], "label_hit": []}
    for task, c in corpus.items():
        doc_ids = list(dict.fromkeys({text: d for d, (text, _) in c["docs"].items()}.values()))  # one per text
        position = {d: i for i, d in enumerate(c["docs"])}
        docs, queries = vectors[task]
        scores = queries @ docs[[position[d] for d in doc_ids]].T
        for (_, _, relevant, gold), row in zip(c["samples"], scores, strict=True):
            top = [doc_ids[i] for i in np.argsort(-row, kind="stable")[:K]]
            out["top"].append(top)
            out["ndcg"].append(ndcg(top, relevant))
            if gold is not None:
                out["label_hit"].append(sum(c["docs"][d][1] == gold for d in top) / K)
    return out


def interval(e: Estimate) -> str:
    """A paired difference as ``+0.001 [-0.004, +0.006] (n = 576)``."""
    return f"{e.value:+.3f} [{e.low:+.3f}, {e.high:+.3f}] (n = {e.n})"


def quality(backends: list[str]) -> list[str]:
    """Markdown rows: cosine to fp32, top-k overlap, NDCG@k and label-hit@k with paired intervals, per backend."""
    from prag_models.text.embedder import Embedder

    corpus = demo_corpus()
    results, flat = {}, {}
    for backend in backends:
        embedder = Embedder(EmbedderSettings(backend=backend))
        vectors = {
            t: (embedder.embed([text for text, _ in c["docs"].values()]), embedder.embed([s[1] for s in c["samples"]]))
            for t, c in corpus.items()
        }
        flat[backend] = np.concatenate([np.concatenate(v) for v in vectors.values()])
        results[backend] = retrieval(corpus, vectors)
        del embedder
    ref = results["torch"]
    head = f"| backend | cosine to fp32 min / mean (n = {len(flat['torch'])}) | top-{K} overlap | NDCG@{K} | "
    rows = [head + f"difference [95 % CI] | label-hit@{K} | difference [95 % CI] |", "|---|---|---|---|---|---|---|"]
    for backend, res in results.items():
        cos = (flat[backend] * flat["torch"]).sum(1)
        overlap = np.mean([len(set(a) & set(b)) / K for a, b in zip(res["top"], ref["top"], strict=True)])
        nd = paired_difference(res["ndcg"], ref["ndcg"])
        lh = paired_difference(res["label_hit"], ref["label_hit"])
        rows.append(
            f"| {backend} | {cos.min():.4f} / {cos.mean():.4f} | {overlap:.3f} | {np.mean(res['ndcg']):.3f} | "
            f"{interval(nd)} | {np.mean(res['label_hit']):.3f} | {interval(lh)} |"
        )
    return rows


def main() -> None:
    """Parse the arguments, run the speed rounds (and --quality), print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.child:
        print(json.dumps(child(args.child, args.texts)))
        return
    backends = ["torch", *[b for b in args.backends.split(",") if b and b != "torch"]]
    print(f"CPU: {cpu_class()}")
    load = os.getloadavg()
    results = speed(backends, args.texts, args.rounds)
    after = os.getloadavg()
    print(f"\n{args.texts} demo documents, {args.rounds} rounds; load avg {load[0]:.2f} before, {after[0]:.2f} after")
    print("\n| backend | docs/s (median) | × torch fp32 | load s | peak RSS MB |\n|---|---|---|---|---|")
    for b, r in results.items():
        print(f"| {b} | {r['docs_s']:.1f} | {r['ratio']:.2f} | {r['load_s']:.1f} | {r['rss_mb']:.0f} |")
    if args.quality:
        print("\nRetrieval over every demo document, dev queries of all tasks (differences: backend − torch fp32)\n")
        print("\n".join(quality(backends)))


if __name__ == "__main__":
    main()
