"""A pool whose server exits at start must let the program end (issue 14: it hung for good).

The scenario runs in a subprocess (hang_script.py): a hang at interpreter shutdown is invisible to
a test in this process. 8 rollouts on 4 processes, through gather_trajectory_groups, through
art_mcp.rollout, and through a plain asyncio.gather that leaves rollouts running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)

SCRIPT = Path(__file__).with_name("hang_script.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["gather", "rollout", "asyncio"])
def test_a_server_that_exits_at_start_fails_the_rollouts_and_the_program_ends(mode):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), mode], capture_output=True, text=True, timeout=60, env=env
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the program did not end within 60 s (stdout: {exc.stdout!r})")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    expected = "ServerStartError" if mode == "asyncio" else "TooManyExceptions"
    assert lines == [f"raised {expected}", "pool closed 0", "exited"], proc.stdout
    assert "never retrieved" not in proc.stderr and "was destroyed but it is pending" not in proc.stderr
