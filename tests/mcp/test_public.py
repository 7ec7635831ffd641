"""art_mcp's public surface, and what importing it pulls in."""

from __future__ import annotations

import subprocess
import sys

import art_mcp


def test_public_surface_is_pinned():
    assert sorted(art_mcp.__all__) == sorted(
        [
            "COMPLETE_TASK",
            "COMPLETE_TASK_TOOL",
            "Call",
            "DEFAULT_SYSTEM_PROMPT",
            "GeneratedScenario",
            "GeneratedScenarioCollection",
            "Isolation",
            "McpServerError",
            "McpSession",
            "NonDeterministicServer",
            "ServerCrashed",
            "ServerPool",
            "ServerSpec",
            "ServerStartError",
            "StatePlan",
            "Task",
            "TaskGenerationError",
            "ToolResult",
            "ValuePool",
            "VerifiedTask",
            "bundled_server",
            "connect",
            "dedupe",
            "generate_scenarios",
            "generate_tasks",
            "generate_verified_tasks",
            "gold_trajectory",
            "load_tasks",
            "load_verified_tasks",
            "read_state",
            "openai_parameters",
            "request_params",
            "resolve_server",
            "reword_tasks",
            "rollout",
            "sample_arguments",
            "save_tasks",
            "similarity",
            "split_tasks",
            "task_text",
            "to_openai_tool",
            "verified_rollout",
        ]
    )
    for name in art_mcp.__all__:
        assert hasattr(art_mcp, name), name


def test_import_pulls_in_no_other_plugin_or_heavy_dependency():
    code = (
        "import art_mcp, art_mcp.cli, sys; "
        "bad = [m for m in ('ruler', 'art_train', 'art_graph', 'torch', 'litellm', 'langchain_core') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_art_cli_dispatches_autorl():
    out = subprocess.run(
        [sys.executable, "-m", "art_train.cli", "autorl", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--mcp" in out.stdout and "--generator" in out.stdout and "--base-model" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "art_train.cli", "autorl", "--mcp", "x"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--generator" in bad.stderr
