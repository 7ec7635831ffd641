"""`art autorl` fails early and honestly: `{rollout_dir}` works for task generation too, a judge or
generator that cannot be reached or has no credentials stops the run before it starts (naming the
fix), and a run that trained nothing exits non-zero."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

import pytest

from art_mcp.cli import _tasks, autorl_main, server_spec
from tests.support.scripted_openai import ScriptedOpenAI

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)

FILE_SERVER = Path(__file__).with_name("file_server.py")
TASKS = [("Add a row that says hello to the table", 1, ["add_row"]),
         ("Add two rows, one saying a and one saying b", 2, ["add_row"])]


def _never(*_: object) -> object:
    raise AssertionError("the run started: the backend or the judge was built")


async def test_rollout_dir_works_for_task_generation() -> None:
    spec = server_spec(f"{sys.executable} {FILE_SERVER} --db {{rollout_dir}}/rows.sqlite")
    reply = {"content": json.dumps({"tasks": [{"task": t, "difficulty": d, "tools": x} for t, d, x in TASKS]})}
    with ScriptedOpenAI(reply) as gen:
        args = argparse.Namespace(tasks=None, generator="openai/writer", generator_api_base=gen.url,
                                  generator_api_key="x", generator_max_tokens=None, num_tasks=2, instructions=None)
        tasks = await _tasks(args, spec, None)
    assert [t.task for t in tasks] == [t for t, _, _ in TASKS]
    assert "add_row" in gen.requests[0]["messages"][0]["content"]  # the server started, its tools were read


def _tasks_file(tmp_path: Path) -> str:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"task": t, "difficulty": d, "tools": x}) + "\n" for t, d, x in TASKS))
    return str(path)


def test_a_judge_without_credentials_fails_before_the_run_starts(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rc = autorl_main(["--mcp", "bundled:notes", "--tasks", _tasks_file(tmp_path), "--generator", "openai/g",
                      "--judge", "openai/gpt-4.1-mini", "--base-model", "x", "--output", str(tmp_path / "run")],
                     make_backend=_never, make_scorer=_never)
    assert rc == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "judge openai/gpt-4.1-mini" in err and "OPENAI_API_KEY" in err and "--judge-api-key" in err, err
    assert not (tmp_path / "run").exists()


def test_an_unreachable_generator_fails_before_the_run_starts(tmp_path, capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    rc = autorl_main(["--mcp", "bundled:notes", "--generator", "openai/g", "--generator-api-key", "k",
                      "--generator-api-base", f"http://127.0.0.1:{port}/v1", "--judge", "openai/j",
                      "--judge-api-key", "k", "--base-model", "x", "--output", str(tmp_path / "run")],
                     make_backend=_never, make_scorer=_never)
    assert rc == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "generator openai/g cannot be reached" in err and f"127.0.0.1:{port}" in err, err
    assert "--generator-api-base" in err


@pytest.mark.slow
def test_a_run_that_trained_nothing_exits_non_zero(tmp_path, capsys) -> None:
    from art_train.cli import autorl
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    with ScriptedOpenAI({"content": "I will not score these."}) as judge:  # every group dropped
        rc = autorl([
            "--mcp", "bundled:notes", "--tasks", _tasks_file(tmp_path), "--generator", "openai/g",
            "--generator-api-key", "k", "--judge", "openai/judge", "--judge-api-base", judge.url,
            "--judge-api-key", "x", "--base-model", str(tiny), "--val-fraction", "0.5", "--steps", "1",
            "--tasks-per-step", "1", "--group-size", "2", "--eval-rollouts", "1", "--max-turns", "1",
            "--max-tokens", "4", "--output", str(tmp_path / "run"),
        ])  # fmt: skip
    assert rc == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "trained nothing" in err and "the judge" in err, err


async def test_rollout_dir_works_for_any_connection_and_verified_gold_runs() -> None:
    # the default (verified) run's gold walks connect with no workdir of their own
    import random

    from art_mcp import connect
    from art_mcp.verified import gold_walk

    spec = server_spec(f"{sys.executable} {FILE_SERVER} --db {{rollout_dir}}/rows.sqlite")
    async with connect(spec) as session:  # a fresh temporary directory stands in for {rollout_dir}
        assert "add_row" in session.tool_names()
    steps, tools = await gold_walk(spec, random.Random(0), 3)
    assert len(steps) == 3 and any(t.name == "add_row" for t in tools)


def test_a_verified_run_checks_its_generator_before_it_starts(tmp_path, capsys, monkeypatch) -> None:
    # no --judge: the verified run; a generator (which rewords the tasks) without credentials stops it first
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rc = autorl_main(["--mcp", "bundled:calculator", "--generator", "openai/gpt-4.1-mini", "--base-model", "x",
                      "--output", str(tmp_path / "run")], make_backend=_never, make_scorer=_never)
    assert rc == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "generator openai/gpt-4.1-mini" in err and "OPENAI_API_KEY" in err, err
    assert not (tmp_path / "run").exists()
