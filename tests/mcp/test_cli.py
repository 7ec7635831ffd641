"""`art autorl` end to end on CPU: bundled notes server, scripted generator and judge, a tiny model trained."""

from __future__ import annotations

import json
import re

import pytest

from art_train.cli import autorl as autorl_main  # `art autorl`: art_mcp composed with LocalBackend and RULER
from tests.support.scripted_openai import ScriptedOpenAI

BLOCK = re.compile(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', re.S)

NOTES_TASKS = [
    ("Save a note titled dentist with body Friday at 3pm", 1, ["add_note"]),
    ("Search my notes for milk and tell me which note mentions it", 2, ["search_notes"]),
    ("List the notes tagged work and delete the oldest one", 4, ["list_notes", "delete_note"]),
    ("Change the body of note 1 to say the meeting moved to noon", 3, ["update_note"]),
]
SMALL_RUN = [
    "--mcp", "bundled:notes", "--num-tasks", "4", "--val-fraction", "0.25", "--steps", "1",
    "--tasks-per-step", "2", "--group-size", "2", "--eval-rollouts", "2", "--max-turns", "2",
    "--max-tokens", "12", "--learning-rate", "1e-3", "--name", "notes-agent",
]  # fmt: skip


def _judge(body: dict) -> dict:
    """Score each trajectory the judge is shown by its length, so groups have different rewards."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    shown = BLOCK.findall(user)
    assert shown, "the judge was shown no trajectories"
    scores = [
        {"trajectory_id": i, "explanation": "scripted", "score": (len(text) % 10) / 10} for i, text in shown
    ]
    return {"content": json.dumps({"scores": scores})}


@pytest.mark.slow
def test_autorl_runs_end_to_end(tmp_path):
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    tasks = NOTES_TASKS
    generated = {
        "content": json.dumps({"tasks": [{"task": t, "difficulty": d, "tools": x} for t, d, x in tasks]})
    }
    out = tmp_path / "run"
    with ScriptedOpenAI(generated) as gen, ScriptedOpenAI(_judge) as judge:
        rc = autorl_main([
            "--mcp", "bundled:notes",
            "--generator", "openai/writer", "--generator-api-base", gen.url, "--generator-api-key", "x",
            "--judge", "openai/judge", "--judge-api-base", judge.url, "--judge-api-key", "x",
            "--base-model", str(tiny),
            "--num-tasks", "4", "--val-fraction", "0.25", "--steps", "1", "--tasks-per-step", "2",
            "--group-size", "2", "--eval-rollouts", "2", "--max-turns", "2", "--max-tokens", "12",
            "--learning-rate", "1e-3", "--name", "notes-agent", "--output", str(out),
        ])  # fmt: skip
    assert rc == 0
    assert len(gen.requests) == 1 and "add_note" in gen.requests[0]["messages"][0]["content"]
    # one judge call per training group (2), then one per held-out task judging before and after together (1)
    assert len(judge.requests) == 3
    assert len(BLOCK.findall(judge.requests[-1]["messages"][-1]["content"])) == 4
    report = json.loads((out / "report.json").read_text())
    assert report["step"] == 1 and report["tasks"] == {"train": 3, "val": 1}
    assert report["val_scored"] == {"before": 2, "after": 2}
    assert 0 <= report["val_ruler_before"] <= 1 and 0 <= report["val_ruler_after"] <= 1
    assert [h["step"] for h in report["history"]] == [1]
    train = [json.loads(x) for x in (out / "tasks.train.jsonl").read_text().splitlines()]
    val = [json.loads(x) for x in (out / "tasks.val.jsonl").read_text().splitlines()]
    assert sorted(t["task"] for t in train + val) == sorted(t for t, _, _ in tasks)
    run_dir = out / ".art" / "autorl" / "models" / "notes-agent"
    assert (run_dir / "checkpoints" / "0001" / "adapter_model.safetensors").is_file()
    trained = (run_dir / "trajectories" / "train" / "0001.jsonl").read_text().splitlines()
    assert len(trained) == 2  # the two judged training groups
    logged = (run_dir / "trajectories" / "val" / "0001.jsonl").read_text().splitlines()
    phases = sorted(t["metadata"]["phase"] for g in map(json.loads, logged) for t in g["trajectories"])
    assert phases == ["after", "after", "before", "before"]
    # the agent's rollouts reached the real server: its tools were offered to the model
    first = json.loads(logged[0])["trajectories"][0]
    assert {"add_note", "complete_task"} <= {t["function"]["name"] for t in first["tools"]}


@pytest.mark.slow
def test_autorl_judge_self_asks_the_served_base_model(tmp_path, caplog):
    """--judge self: RULER asks the base model served by the run's backend. Decoding under the group's
    own schema (constrained decoding), even the tiny random model answers usably: every group is
    scored and the run trains on them."""
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    generated = {
        "content": json.dumps(
            {"tasks": [{"task": t, "difficulty": d, "tools": x} for t, d, x in NOTES_TASKS]}
        )
    }
    out = tmp_path / "run"
    with ScriptedOpenAI(generated) as gen:
        rc = autorl_main([
            *SMALL_RUN, "--base-model", str(tiny), "--output", str(out),
            "--generator", "openai/writer", "--generator-api-base", gen.url, "--generator-api-key", "x",
            "--judge", "self", "--judge-max-tokens", "1024",
        ])  # fmt: skip
    assert rc == 0
    assert len(gen.requests) == 1
    assert not [r.getMessage() for r in caplog.records if "gave a wrong answer" in r.getMessage()]
    report = json.loads((out / "report.json").read_text())
    # two training groups and one before/after group, all judged by the served base model
    assert report["judge"] == {
        "model": f"{tiny} (--judge self, served as notes-agent-base)",
        "groups_scored": 3,
        "groups_dropped": 0,
    }, report["judge"]
    assert report["step"] == 1 and len(report["history"]) == 1  # the judged groups were trained on
    assert report["val_ruler_before"] is not None and report["val_scored"] == {"before": 2, "after": 2}
    models = out / ".art" / "autorl" / "models"
    assert json.loads((models / "notes-agent-base" / "model.json").read_text())["base_model"] == str(tiny)


@pytest.mark.slow
def test_autorl_generator_self_that_writes_no_tasks_fails_clearly(tmp_path, capsys):
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    rc = autorl_main([
        *SMALL_RUN, "--base-model", str(tiny), "--output", str(out),
        "--generator", "self", "--generator-max-tokens", "16", "--judge", "openai/never-asked", "--judge-api-key", "k",
    ])  # fmt: skip
    assert rc == 1
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "asking" in err and "(--generator self, served as notes-agent-base)" in err
    assert "art autorl failed: TaskGenerationError: --generator self:" in err
    assert "produced no valid tasks" in err and "pass --tasks FILE.jsonl" in err
    assert "Traceback" not in err
    assert not (out / "tasks.train.jsonl").exists()


@pytest.mark.slow
def test_autorl_generator_self_writes_tasks_that_validate(tmp_path):
    """--generator self decodes under a schema that carries the task checks (length, difficulty, the
    server's own tool names), so even the tiny random model writes tasks that validate, and the run goes on."""
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    with ScriptedOpenAI(_judge) as judge:
        rc = autorl_main([
            *SMALL_RUN, "--base-model", str(tiny), "--output", str(out), "--generator", "self",
            "--judge", "openai/judge", "--judge-api-base", judge.url, "--judge-api-key", "x",
        ])  # fmt: skip
    assert rc == 0
    tasks = [json.loads(line) for name in ("tasks.train.jsonl", "tasks.val.jsonl")
             for line in (out / name).read_text().splitlines()]  # fmt: skip
    assert len(tasks) >= 2
    tools = {"add_note", "get_note", "update_note", "delete_note", "list_notes", "search_notes"}
    for task in tasks:
        assert len(task["task"]) >= 12 and 1 <= task["difficulty"] <= 5
        assert task["tools"] and set(task["tools"]) <= tools, task
    assert json.loads((out / "report.json").read_text())["step"] == 1  # it trained on them


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--judge", "self", "--judge-api-base", "http://x/v1"], "--judge-api-base is for a litellm judge"),
        (
            ["--generator", "self", "--generator-api-key", "k"],
            "--generator-api-key is for a litellm generator",
        ),
        (["--judge", "self", "--judge-max-tokens", "4096"], "leaves no room for the prompt"),
        (["--judge-max-tokens", "0"], "--judge-max-tokens must be at least 1"),
    ],
)
def test_autorl_rejects_self_with_options_it_cannot_use(tmp_path, capsys, extra, message):
    argv = ["--mcp", "bundled:notes", "--generator", "openai/g", "--judge", "openai/j", "--base-model", "x"]
    with pytest.raises(SystemExit) as exit_:
        autorl_main([*argv, "--output", str(tmp_path), *extra])
    assert exit_.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_autorl_reports_a_bad_server_clearly(tmp_path, capsys):
    rc = autorl_main([
        "--mcp", "no-such-mcp-server-binary", "--generator", "openai/g", "--judge", "openai/j",
        "--generator-api-key", "k", "--judge-api-key", "k", "--base-model", "x", "--output", str(tmp_path),
    ])  # fmt: skip
    assert rc == 1
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "could not start MCP server no-such-mcp-server-binary" in err and "check the command" in err
