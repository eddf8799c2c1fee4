#!/usr/bin/env bash
# Create the venv and install prag with pinned dependencies (idempotent; torch first, CPU build).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
stamp="$PRAG_VENV/.prag-installed"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] venv up to date ($PRAG_VENV)"; exit 0
fi
[ -x "$PRAG_VENV/bin/python" ] || "$PYTHON" -m venv "$PRAG_VENV"
# uv installs the same pinned set as pip several times faster and keeps its own cache. Local wheel folders pip is
# configured with (PIP_FIND_LINKS or pip.conf find-links: e.g. a CPU torch build) are passed on, so uv picks the same
# wheels. --compile-bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set, a venv without .pyc files compiles
# every imported module in every process (importing the stack took 19 s instead of 10; the CI tests +25 %).
"$PRAG_VENV/bin/python" -m pip install --quiet uv==0.13.9
uv=("$PRAG_VENV/bin/uv" pip install --quiet --compile-bytecode --python "$PRAG_VENV/bin/python")
links="${PIP_FIND_LINKS:-$("$PRAG_VENV/bin/python" -m pip config get global.find-links 2>/dev/null || true)}"
for link in $links; do uv+=(--find-links "$link"); done
echo "[setup] installing torch==2.13.0 (CPU) first"
"${uv[@]}" torch==2.13.0
# llama-cpp-python ships only as source on PyPI. A -march=native build uses AMX kernels on CPUs that have them,
# which crash inside some VMs (segfault on the first batched decode): build with explicit SIMD flags instead, AVX2,
# plus AVX-512 (VNNI, VBMI, BF16) when this CPU has it, once per flag set, and keep the wheel. The AVX512_BF16
# kernels let prag run the packaged model as bf16 (generator.llama_cpp_weights = auto), about 2x faster prompts.
LLAMA_VERSION=0.3.36
LLAMA_FLAGS=""
if [ "$(uname -m)" = "x86_64" ]; then
  LLAMA_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  # Only the targets prag uses: llama and ggml, not the multimodal (llava / mtmd) library nobody here loads
  LLAMA_FLAGS="$LLAMA_FLAGS -DLLAVA_BUILD=OFF"
  cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  has_all=1
  for f in avx512f avx512bw avx512vl avx512_vnni avx512vbmi avx512_bf16; do
    case "$cpu_flags" in *" $f "*) ;; *) has_all=0 ;; esac
  done
  if [ "$has_all" = 1 ] && [ "${PRAG_LLAMA_AVX512:-1}" = 1 ]; then
    LLAMA_FLAGS="$LLAMA_FLAGS -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
  fi
fi
wheels="${PRAG_WHEEL_CACHE:-$HOME/.cache/prag-wheels}/llama-cpp-python-$LLAMA_VERSION-$(echo "$LLAMA_FLAGS" | sha1sum | cut -c1-8)"
if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "[setup] building llama-cpp-python $LLAMA_VERSION once (about 4 min on 2 cores) into $wheels"
  CMAKE_ARGS="$LLAMA_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PRAG_VENV/bin/pip" wheel --quiet --no-deps --no-cache-dir \
    "llama-cpp-python==$LLAMA_VERSION" -w "$wheels"
fi
"${uv[@]}" --no-deps --reinstall "$wheels"/llama_cpp_python-*.whl
echo "[setup] installing prag and its pinned dependencies"
"${uv[@]}" -e ".[dev]"
echo "$want" > "$stamp"
echo "[setup] done"
