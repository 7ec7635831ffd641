#!/usr/bin/env bash
# Installs headless Chromium for the `art report` browser tests (tests/obs/test_report.py), if missing.
# Debian/Ubuntu with apt and root only; elsewhere the tests skip, saying why. Measured on this project's
# dev machine (Debian 12, a local package mirror): apt-get update + install of chromium (115 packages,
# 113 MB fetched) in 24 s.
#   ART_SKIP_CHROMIUM=1  skip it
set -euo pipefail
if [ "${ART_SKIP_CHROMIUM:-0}" = "1" ]; then exit 0; fi
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_chromium: no apt-get here; install Chromium yourself (or set ART_CHROMIUM) to run the report tests" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "setup_chromium: not root and no sudo; the report tests will skip" >&2
    exit 0
  fi
fi
start=$(date +%s)
$SUDO apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null
echo "setup_chromium: chromium installed in $(( $(date +%s) - start )) s"
