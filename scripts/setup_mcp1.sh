#!/usr/bin/env bash
# Sets up .venv-mcp1: the main .venv with the mcp SDK 1.x in front of it, for running tests/mcp and
# tests/graph under mcp 1.x (and with the packages that still need it: langchain-mcp-adapters 0.3,
# mcp-server-sqlite). Safe to run again; run scripts/setup.sh first.
#
# .venv-mcp1's own site-packages holds only mcp 1.x, the three packages that need it and mcp 1.x's
# direct dependencies that .venv lacks; a .pth file then appends .venv's site-packages (and runs its
# .pth files), so everything else (pydantic, langgraph, art itself) is .venv's. A module in front
# shadows the same module behind it; mcp is one package, so no file of mcp 2.x is seen. The script
# checks at the end that every requirement of the shadowing packages is met by what is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
MAIN_SITE=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
if [ ! -x .venv-mcp1/bin/python ]; then
  .venv/bin/python -m venv --without-pip .venv-mcp1
fi
SITE=$(.venv-mcp1/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
# install while .venv is not visible, so pip never sees (or tries to replace) .venv's packages
rm -f "$SITE/zz_art_main_venv.pth"
.venv/bin/python -m pip --python .venv-mcp1/bin/python install -q --no-deps \
  "mcp==1.30.0" "langchain-mcp-adapters==0.3.2" "mcp-server-sqlite==2025.4.25" "httpx-sse==0.4.3"
echo "import site; site.addsitedir('$MAIN_SITE')" > "$SITE/zz_art_main_venv.pth"
.venv-mcp1/bin/python - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement

problems = []
for dist in ("mcp", "langchain-mcp-adapters", "mcp-server-sqlite", "httpx-sse"):
    for text in md.requires(dist) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": "cli"}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            problems.append(f"{dist} needs {req}, not installed")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            problems.append(f"{dist} needs {req}, have {have}")
import mcp, mcp.server.fastmcp  # noqa: E401,F401  (1.x only)
assert md.version("mcp").startswith("1."), md.version("mcp")
if problems:
    raise SystemExit("setup_mcp1: unmet requirements:\n  " + "\n  ".join(problems))
print(f"setup_mcp1: mcp {md.version('mcp')} in front of {mcp.__file__.rsplit('/mcp/', 1)[0]}")
PY
