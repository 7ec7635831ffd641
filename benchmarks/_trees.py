"""Running one benchmark body against several code trees (before/after a change), each in its own process.

A body is a Python script that prints one line `RESULT <json>` with `"art_train": art_train.__file__` in
it; `run_in_tree` runs it with the tree first on the path and checks that the tree is what it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def run_in_tree(tree: Path, body: str, *args: str) -> dict[str, Any]:
    """Run `body` with `args` against `tree`'s packages; its RESULT, less the `art_train` path it checked."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as cwd:  # so `import art_train` finds the tree, not the cwd
        proc = subprocess.run([sys.executable, "-c", body, *args], cwd=cwd, env=env, capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{tree} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(line[len("RESULT "):])
    imported = result.pop("art_train")
    assert imported.startswith(str(tree)), f"imported {imported}, not the tree {tree}"
    return result


def short_commit(tree: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()


def cpu_isa() -> str:
    """The vector instruction sets that matter here, from /proc/cpuinfo (these machines differ)."""
    flags = Path("/proc/cpuinfo").read_text().split("flags", 2)[1].split("\n", 1)[0].split()
    found = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16") if f in flags]
    return ",".join(found) or os.uname().machine
