"""Feedback-label throughput (CFRAG §2.5): batched vs one-prompt-at-a-time LLM calls, measured in the same run.

    python benchmarks/feedback_throughput.py [--samples 8] [--candidates 6] [--batch 8] [--skip-transformers]

Feedback prompts are built exactly as the `feedback_labels` asset builds them (the LaMP prompt of a train sample of
the embedded demo holding one candidate document) with the packaged SmolLM2-135M-Instruct, and scored with the task
metric. Nothing is cached: every figure is model time.

- LaMP-5 (generation, greedy, the task budget of new tokens): the transformers backend with batches of --batch
  (left padding) vs batches of 1; llama.cpp (which decodes one sequence at a time) as a reference.
- LaMP-2 (label scoring, 15 tags): llama.cpp scoring every label of a prompt with the prompt's KV cache shared
  (what prag does) vs scoring each label in its own call (the prompt evaluated once per label; timed on the
  first --separate-prompts prompts).

Prints labels/s per mode, the speed-up ratios, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from prag_models.config.settings import GeneratorSettings, PromptSettings  # noqa: E402
from prag_models.data.demo import write_demo  # noqa: E402
from prag_models.data.lamp import load_lamp_task  # noqa: E402
from prag_models.data.tasks import LABELS  # noqa: E402
from prag_models.generation.answers import choose_labels, lamp_prompt, max_new_tokens_for  # noqa: E402
from prag_models.generation.prompts import prompt_document  # noqa: E402
from prag_models.llm.base import Generator  # noqa: E402
from prag_models.llm.factory import make_generator  # noqa: E402
from prag_models.methods.cfrag.feedback_labels import score_outputs  # noqa: E402


def feedback_prompts(root: Path, task: str, generator: Generator, samples: int, candidates: int) -> list[tuple]:
    """(prompt, gold) per (train sample, candidate doc): the first candidates docs of the sample's profile."""
    train = load_lamp_task(root, task, splits=("train",))["train"][:samples]
    out = []
    for s in train:
        for doc in s.profile[:candidates]:
            doc_text = prompt_document(task, doc.text, doc.fields)
            out.append((lamp_prompt(task, s.input, [doc_text], generator, PromptSettings()), s.gold))
    return out


def timed(label: str, n: int, run: Callable[[], list[str]]) -> tuple[float, list[str]]:
    """Run once, print labels/s, return (labels/s, outputs)."""
    start = time.perf_counter()
    outputs = run()
    seconds = time.perf_counter() - start
    rate = n / seconds
    print(f"  {label:<52} {n:>4} labels  {seconds:7.1f} s  {rate:6.2f} labels/s", flush=True)
    return rate, outputs


def in_batches(gen: Generator, prompts: list[str], size: int, max_new: int) -> list[str]:
    """Generate in batches of size, as cached_outputs hands them to the backend."""
    out: list[str] = []
    for i in range(0, len(prompts), size):
        out += gen.generate(prompts[i : i + size], max_new)
    return out


def main() -> int:
    """Build the demo, run every mode, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=8, help="train samples per task (asset default 8)")
    ap.add_argument("--candidates", type=int, default=6, help="candidate docs per sample (m*k = 3*2 by default)")
    ap.add_argument("--batch", type=int, default=8, help="batch size of the batched mode (generator.batch_size)")
    ap.add_argument("--separate-prompts", type=int, default=6, help="prompts timed in the one-label-per-call mode")
    ap.add_argument("--skip-transformers", action="store_true", help="only the llama.cpp figures")
    args = ap.parse_args()
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_demo(root, tasks=["LaMP-2", "LaMP-5"])
        llama = make_generator(GeneratorSettings(backend="llama_cpp"))
        gen_task, label_task = "LaMP-5", "LaMP-2"
        max_new = max_new_tokens_for(gen_task, GeneratorSettings())
        pairs = feedback_prompts(root, gen_task, llama, args.samples, args.candidates)
        prompts, golds = [p for p, _ in pairs], [g for _, g in pairs]
        print(f"{gen_task}: {len(prompts)} feedback prompts, greedy, {max_new} new tokens")
        if not args.skip_transformers:
            hf = make_generator(GeneratorSettings(backend="transformers", batch_size=args.batch))
            in_batches(hf, prompts[:2], 2, 4)  # warm-up
            figures["hf_batched"], batched = timed(
                f"transformers, batches of {args.batch}",
                len(prompts),
                lambda: in_batches(hf, prompts, args.batch, max_new),
            )
            figures["hf_single"], single = timed(
                "transformers, one prompt at a time", len(prompts), lambda: in_batches(hf, prompts, 1, max_new)
            )
            same = sum(a == b for a, b in zip(batched, single, strict=True))
            print(f"  batched == one-at-a-time outputs: {same}/{len(prompts)} (left padding may change a few)")
            scores = score_outputs(gen_task, batched, golds)
            print(f"  mean ROUGE-1 of the labels: {sum(scores) / len(scores):.3f}")
            hf.close()
        figures["llama_single"], _ = timed(
            "llama.cpp (one sequence at a time)", len(prompts), lambda: in_batches(llama, prompts, args.batch, max_new)
        )

        pairs = feedback_prompts(root, label_task, llama, args.samples, args.candidates)
        prompts, golds = [p for p, _ in pairs], [g for _, g in pairs]
        labels = LABELS[label_task]
        print(f"{label_task}: {len(prompts)} feedback prompts, label scoring over {len(labels)} tags")
        figures["score_shared"], shared = timed(
            "llama.cpp, all labels per prompt (shared KV prefix)", len(prompts),
            lambda: choose_labels(label_task, llama, prompts),
        )  # fmt: skip

        subset = prompts[: args.separate_prompts]  # 15 prompt evaluations per label: a subset is enough for a rate

        def one_label_per_call() -> list[str]:
            rows = [[llama.score_choices([p], [c])[0][0] for c in labels] for p in subset]
            return [labels[max(range(len(labels)), key=r.__getitem__)] for r in rows]

        figures["score_separate"], separate = timed("llama.cpp, one label per call", len(subset), one_label_per_call)
        same = sum(a == b for a, b in zip(shared, separate, strict=False))
        print(f"  same chosen labels: {same}/{len(subset)}")
        scores = score_outputs(label_task, shared, golds)
        print(f"  accuracy of the labels: {sum(scores) / len(scores):.3f}")
        llama.close()
    print("\nratios (same run):")
    if "hf_batched" in figures:
        print(f"  transformers batched / one-at-a-time: {figures['hf_batched'] / figures['hf_single']:.2f}x")
        print(f"  transformers batched / llama.cpp:     {figures['hf_batched'] / figures['llama_single']:.2f}x")
    print(f"  label scoring shared prefix / separate: {figures['score_shared'] / figures['score_separate']:.2f}x")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak_mb:.0f} MB")
    print(json.dumps({k: round(v, 3) for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
