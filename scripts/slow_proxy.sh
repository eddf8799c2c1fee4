#!/usr/bin/env bash
# A slow machine's proxy for development (issue 47): run a command with AVX2 kernels only, on ONE core. A real 2-core
# AVX2-only machine (AMD EPYC at 2.0 GHz) ran about 2x slower than AVX2 kernels on 2 AVX-512 cores; one core of this
# CPU with its AVX-512 switched off comes close. Every timing claim is measured here as well as on the machine itself.
#
#   bash scripts/slow_proxy.sh bash scripts/demo.sh        # the demo as a slow machine would run it
#   bash scripts/slow_proxy.sh .venv-avx2/bin/python benchmarks/llm_throughput.py
#
# llama.cpp's kernels are chosen when it is compiled, so the proxy runs in a venv whose llama-cpp-python was built
# without AVX-512 (PRAG_VENV, default .venv-avx2 beside .venv; set up here on first use). torch, oneDNN, MKL, faiss,
# numpy and OpenBLAS are told AVX2 at run time. PRAG_PROXY_CORE picks the core (default 0).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PRAG_VENV="${PRAG_VENV:-$root/.venv-avx2}"
if [ ! -f "$PRAG_VENV/.prag-installed" ]; then
  echo "[proxy] setting up $PRAG_VENV with llama.cpp's AVX2 kernels (once)" >&2
  PRAG_LLAMA_AVX512=0 bash "$root/scripts/setup.sh" >&2
fi
export PRAG_LLAMA_AVX512=0 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 DNNL_MAX_CPU_ISA=AVX2 \
  ONEDNN_MAX_CPU_ISA=AVX2 FAISS_OPT_LEVEL=avx2 OPENBLAS_CORETYPE=Haswell \
  NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"  # numpy 2.4 names; its OpenBLAS told Haswell above
export PATH="$PRAG_VENV/bin:$PATH"
exec taskset -c "${PRAG_PROXY_CORE:-0}" "$@"
