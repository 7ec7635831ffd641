#!/usr/bin/env bash
# Installs the two third-party MCP servers examples/autorl trains on, as published:
#   mcp-server-time (PyPI) in its own virtualenv: it takes its own mcp version, not ART's
#   @modelcontextprotocol/server-memory (npm), which needs Node 18 or newer
# into examples/autorl/.servers (or $ART_AUTORL_SERVERS). Safe to run again.
set -euo pipefail
dir="${ART_AUTORL_SERVERS:-$(cd "$(dirname "$0")" && pwd)/.servers}"
python="${PYTHON:-python3}"
mkdir -p "$dir"
if [ ! -x "$dir/venv/bin/mcp-server-time" ]; then
  "$python" -m venv "$dir/venv"
  "$dir/venv/bin/pip" install --quiet "mcp-server-time==2026.10.19"
fi
if [ ! -x "$dir/node/node_modules/.bin/mcp-server-memory" ]; then
  command -v npm > /dev/null || { echo "npm not found: install Node.js 18+ for the memory server" >&2; exit 1; }
  npm install --silent --no-audit --no-fund --prefix "$dir/node" "@modelcontextprotocol/server-memory@2026.8.31"
fi
echo "servers ready in $dir"
