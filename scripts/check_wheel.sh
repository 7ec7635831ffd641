#!/usr/bin/env bash
# Builds the sdist and wheel, checks the wheel carries the non-Python files ART needs, installs it the
# way a user does into fresh virtualenvs outside the repository, and runs a smoke test from there:
#   1. the wheel alone (no extras): `import art_core` works and imports no torch;
#   2. CPU torch first, then the wheel with [all]: every package imports, `art --version`,
#      `art demo --help`, the bundled MCP servers start from site-packages and list their tools.
# (pip --no-compile: no .pyc for modules the smoke never imports.)
# Needs only python3 (PYTHON overrides it) and the package index; it removes its temp folder.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
start=$(date +%s)
pip_quiet() {  # pip install, its output shown only when it fails
  local out
  out=$("$@" 2>&1) || { echo "$out" | grep -v "is ignored" >&2; echo "check_wheel: failed: $*" >&2; return 1; }
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m venv "$work/tools"  # its own `build`, so it needs nothing of .venv and can run beside setup.sh
pip_quiet "$work/tools/bin/python" -m pip install -q build
# build from a copy of the files git would commit: no ignored ones (.venv, build/) get in, and setuptools' egg-info is not
# written into the tree that scripts/setup.sh is installing from at the same time
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done \
  | xargs -0 cp --parents -t "$work/src"
"$work/tools/bin/python" -m build --outdir "$work/dist" "$work/src" >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/*.whl)
ls "$work"/dist/*.tar.gz >/dev/null
echo "check_wheel: built $(basename "$wheel") and its sdist in $(( $(date +%s) - start )) s"

# what the packages read from beside their modules at run time, and the typing marker
"$PY" - "$wheel" <<'PY'
import sys
import zipfile

names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = [f"{p}/py.typed" for p in ("art_core", "art_train", "art_graph", "art_mcp", "ruler")] + [
    "art_train/templates/gemma3.jinja", "art_train/templates/gptoss.jinja",
    "art_train/report/index.html", "art_train/report/report.css", "art_train/report/report.js",
    "art_mcp/servers/notes.py", "art_mcp/servers/calculator.py", "art_mcp/servers/sdk.py",
]
missing = [n for n in need if n not in names]
stray = sorted(n for n in names if n.split("/")[0] in {"tests", "examples", "benchmarks", "scripts", "docs"})
if missing or stray:
    raise SystemExit(f"check_wheel: the wheel lacks {missing} / carries {stray[:5]}")
print(f"check_wheel: the wheel carries all {len(need)} data files and no tests")
PY

cd "$work"  # from here on nothing of the repository is on sys.path
python3 -m venv base
pip_quiet base/bin/python -m pip install -q --no-compile "$wheel"
base/bin/python - <<'PY'
import sys

import art_core

assert "torch" not in sys.modules, "import art_core imported torch"
assert art_core.__file__.startswith(sys.prefix), art_core.__file__
print(f"check_wheel: art_core {art_core.__version__} from the bare wheel, no torch")
PY

python3 -m venv full
pip_quiet full/bin/python -m pip install -q --no-compile "torch==2.13.0"
echo "check_wheel: CPU torch installed at $(( $(date +%s) - start )) s"
pip_quiet full/bin/python -m pip install -q --no-compile "$wheel[all]"
echo "check_wheel: the wheel with [all] installed at $(( $(date +%s) - start )) s"
full/bin/python - <<'PY'
import importlib
import sys
from pathlib import Path

import art_core

for name in ("art_core", "art_train", "art_graph", "art_mcp", "ruler"):
    module = importlib.import_module(name)
    assert module.__file__.startswith(sys.prefix), f"{name} imported from {module.__file__}"
    assert (Path(module.__file__).parent / "py.typed").exists(), name
    assert module.__all__ and all(hasattr(module, a) for a in module.__all__), name
import asyncio  # noqa: E402

import art_mcp  # noqa: E402
from art_mcp.servers import BUNDLED  # noqa: E402


async def tools(server: str) -> list[str]:  # a bundled MCP server, spawned from site-packages
    async with art_mcp.connect(art_mcp.bundled_server(server)) as session:
        return session.tool_names()

for server in BUNDLED:
    assert asyncio.run(tools(server)), f"the bundled {server} server lists no tools"
from art_train.report.build import ASSETS  # noqa: E402

assert (ASSETS / "index.html").exists()
print(f"check_wheel: all five packages import from the installed wheel ({art_core.__version__})")
PY
version=$(full/bin/art --version)
[ "$version" = "art $(full/bin/python -c 'import art_core; print(art_core.__version__)')" ] \
  || { echo "check_wheel: art --version says '$version'"; exit 1; }
full/bin/art demo --help >/dev/null
echo "check_wheel: $version; art demo --help works; passed in $(( $(date +%s) - start )) s"
cd "$ROOT"
