#!/usr/bin/env bash
# Sets up .venv (CPU torch where there is no GPU), then runs `art demo`. Extra arguments go to `art demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
exec .venv/bin/art demo "$@"
