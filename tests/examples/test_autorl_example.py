"""examples/autorl: zero-data runs on third-party MCP servers installed as published (mcp-server-time
from PyPI, @modelcontextprotocol/server-memory from npm), each a tiny run end to end over stdio."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from art_mcp import load_verified_tasks
from art_mcp.verified import score

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "autorl"
TOOLS = {"time": {"convert_time"},
         "memory": {"create_entities", "create_relations", "add_observations", "delete_entities",
                    "delete_observations", "delete_relations", "read_graph", "search_nodes", "open_nodes"}}  # fmt: skip

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def servers() -> Path:
    """The two servers, installed once into examples/autorl/.servers (PyPI and npm)."""
    if shutil.which("npm") is None:
        pytest.fail("npm is needed for @modelcontextprotocol/server-memory: install Node.js 18+")
    done = subprocess.run(["bash", str(EXAMPLE / "setup_servers.sh")], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return EXAMPLE / ".servers"


@pytest.mark.parametrize("server", ["time", "memory"])
def test_tiny_run_on_a_third_party_server(servers, tmp_path, server):
    record = tmp_path / "examples.json"
    out = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--server", server, "--config", "tiny",
         "--output", str(tmp_path / "run"), "--record", str(record)],
        capture_output=True, text=True, timeout=400, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    entry = json.loads(record.read_text())["autorl"][f"{server}-tiny-seed0"]
    assert entry["tasks"]["train"] == 4 and entry["tasks"]["val"] == 2 and entry["sft"]["examples"] == 4
    reward = entry["verified_reward"]
    for stage in ("base", "sft", "sft_rl"):
        low, high = reward[stage]["ci"]
        assert 0.0 <= low <= reward[stage]["mean"] <= high <= 1.0
    for diff in ("sft_minus_base", "sft_rl_minus_base", "sft_rl_minus_sft"):
        assert reward[diff]["ci"][0] <= reward[diff]["diff"] <= reward[diff]["ci"][1]
    assert "--val-seed 100000" in entry["command"] and len(entry["curve"]) == 1
    train = load_verified_tasks(tmp_path / "run" / "tasks.train.jsonl")
    val = load_verified_tasks(tmp_path / "run" / "tasks.val.jsonl")
    assert not {t.id for t in train} & {t.id for t in val}  # held out: never trained on
    assert {t.call.name for t in train + val} <= TOOLS[server]
    # the gold run's checker: its own result as the answer scores 1, an empty answer 0
    for task in [t for t in train + val if t.kind == "answer"]:
        assert score(task, json.dumps(task.gold), None) == 1.0
        assert score(task, "I could not do it.", None) == 0.0


def test_settings_take_the_servers_own_cpu_changes_then_each_set() -> None:
    """`cpu` is changed per server (chosen on the dev split); `tiny` is not; --set comes last."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("autorl_train", EXAMPLE / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    memory = train.settings("memory", "cpu", [])
    assert memory["train_tasks"] == 32 and memory["rl_steps"] == 2 and memory["group_size"] == 4
    assert train.settings("memory", "tiny", []) == train.CONFIGS["tiny"]
    assert train.settings("time", "cpu", ["sft_epochs=3"])["sft_epochs"] == 3
    with pytest.raises(SystemExit, match="KEY of the config"):
        train.settings("time", "cpu", ["isolation=none"])
