"""llama.cpp settings for the packaged SmolLM2 on CPU: weight type, OpenMP wait policy, flash attention.

    python benchmarks/llama_cpp_weights.py [--prompts 12] [--variants as_is-passive,as_is,bf16,f16,q8_0]

Every variant runs in its own process (the OpenMP wait policy is read once per process), on the same LaMP prompts of
the embedded demo (3 profile documents each, as the `generations` asset builds them):

- LaMP-5 generation: greedy, the task budget of new tokens (generator.max_new_tokens);
- LaMP-2 label scoring: the 15 tags scored with the prompt's KV cache shared.

The baseline is the packaged Q4_1 GGUF as shipped with OMP_WAIT_POLICY=PASSIVE and no flash attention (prag's
llama.cpp settings before this benchmark; today's one-decode-per-label scoring is in every row); every other row runs
with the defaults (libgomp's wait policy, flash attention on) and the named weight type (generator.llama_cpp_weights).
Labels are chosen without calibration (throughput only). Prints seconds per prompt, the speed-up over
the baseline, how many LaMP-2 labels agree with the baseline's, and each process's peak RSS. bf16 needs a llama.cpp
build with AVX512_BF16 (scripts/setup.sh builds one when the CPU has it); without it bf16 is emulated and slow.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def prompts(root: Path, task: str, n: int, generator) -> list[str]:
    """LaMP prompts of the first n samples of the demo, each with the sample's 3 most recent profile docs."""
    from prag_models.config.settings import PromptSettings
    from prag_models.data.lamp import load_lamp_task
    from prag_models.generation.answers import lamp_prompt
    from prag_models.generation.prompts import prompt_document

    samples = load_lamp_task(root, task, splits=("dev", "train"))
    out = []
    for s in (samples["dev"] + samples["train"])[:n]:
        docs = [prompt_document(task, d.text, d.fields) for d in s.profile[-3:]]
        out.append(lamp_prompt(task, s.input, docs, generator, PromptSettings()))
    return out


def run_variant(variant: str, root: Path, n: int) -> dict:
    """Time one variant in this process; returns its figures."""
    from prag_models.config.settings import GeneratorSettings
    from prag_models.data.tasks import LABELS
    from prag_models.generation.answers import choose_labels, max_new_tokens_for
    from prag_models.llm.llamacpp_backend import LlamaCppGenerator

    weights = variant.removesuffix("-passive")
    settings = GeneratorSettings(llama_cpp_weights=weights, flash_attention=not variant.endswith("-passive"))
    gen = LlamaCppGenerator(settings)
    gen.generate(["Say hi."], 4)  # load, warm up, compile the chat template
    gen_prompts, label_prompts = prompts(root, "LaMP-5", n, gen), prompts(root, "LaMP-2", n, gen)
    start = time.perf_counter()
    gen.generate(gen_prompts, max_new_tokens_for("LaMP-5", settings))
    generation_s = (time.perf_counter() - start) / len(gen_prompts)
    start = time.perf_counter()
    labels = choose_labels("LaMP-2", gen, label_prompts)
    scoring_s = (time.perf_counter() - start) / len(label_prompts)
    assert all(label in LABELS["LaMP-2"] for label in labels)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": variant, "model_id": gen.model_id, "generation_s": generation_s, "scoring_s": scoring_s,
            "labels": labels, "peak_mb": peak_mb}  # fmt: skip


def main() -> int:
    """Write the demo, run every variant in a subprocess, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=12, help="prompts per task and variant")
    ap.add_argument("--variants", default="as_is-passive,as_is,bf16,f16,q8_0")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one variant, print JSON
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_variant(args.one, Path(args.root), args.prompts)))
        return 0
    from prag_models.data.demo import write_demo

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        write_demo(Path(tmp), tasks=["LaMP-2", "LaMP-5"])
        for variant in args.variants.split(","):
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            env.pop("OMP_WAIT_POLICY", None)
            if variant.endswith("-passive"):
                env["OMP_WAIT_POLICY"] = "PASSIVE"
            cmd = [sys.executable, __file__, "--one", variant, "--root", tmp, "--prompts", str(args.prompts)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{variant}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"  measured {variant}", flush=True)
    if not rows:
        return 1
    base = rows[0]
    print(f"\n{args.prompts} prompts per task; baseline = {base['variant']} ({base['model_id']})\n")
    print("| variant | model id | LaMP-5 generation s/prompt | speed-up | LaMP-2 scoring s/prompt | speed-up "
          "| LaMP-2 labels = baseline | peak RSS MB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        same = sum(a == b for a, b in zip(r["labels"], base["labels"], strict=True))
        gen_speedup, scoring_speedup = base["generation_s"] / r["generation_s"], base["scoring_s"] / r["scoring_s"]
        print(f"| {r['variant']} | {r['model_id']} | {r['generation_s']:.3f} | {gen_speedup:.2f}x | "
              f"{r['scoring_s']:.3f} | {scoring_speedup:.2f}x | {same}/{len(base['labels'])} | {r['peak_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
