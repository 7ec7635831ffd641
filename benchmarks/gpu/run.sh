#!/usr/bin/env bash
# The GPU run, on any CUDA machine with torch, transformers, peft and accelerate (see README.md here):
# installs the carried wheels offline (never touching torch or transformers), then runs bench.py.
# Writes $OUT/gpu.json, $OUT/gpu.log and $OUT/pip.log. Extra arguments go to bench.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/benchmarks/results/gpu-run}"
mkdir -p "$OUT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then  # the Python that has torch
  for candidate in python3 python; do
    if "$candidate" -c "import torch" >/dev/null 2>&1; then PY="$candidate"; break; fi
  done
  PY="${PY:-python3}"
fi
WHEELS=benchmarks/gpu/wheels
echo "gpu run: $(date -u +%FT%TZ) python $("$PY" -V 2>&1)" | tee "$OUT/pip.log"
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  # --no-deps: only these wheels; the machine's torch/transformers/peft stay as they are
  "$PY" -m pip install --no-index --no-deps --disable-pip-version-check --find-links "$WHEELS" \
    "$WHEELS"/*.whl >>"$OUT/pip.log" 2>&1 \
  || "$PY" -m pip install --break-system-packages --no-index --no-deps --disable-pip-version-check \
    --find-links "$WHEELS" "$WHEELS"/*.whl >>"$OUT/pip.log" 2>&1 \
  || "$PY" -m pip install --user --no-index --no-deps --disable-pip-version-check \
    --find-links "$WHEELS" "$WHEELS"/*.whl >>"$OUT/pip.log" 2>&1 \
  || echo "pip install failed (see pip.log); running with what is installed" | tee -a "$OUT/pip.log"
fi
tail -3 "$OUT/pip.log"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PY" benchmarks/gpu/bench.py --out "$OUT" "$@"
