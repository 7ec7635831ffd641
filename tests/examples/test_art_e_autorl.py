"""AutoRL on the ART-E email server: `art autorl` with tasks from its tool schemas, RULER scores, a tiny model."""

from __future__ import annotations

import json
import re
import shlex
import sys

import pytest

from art_train.cli import autorl as autorl_main  # `art autorl`: art_mcp composed with LocalBackend and RULER
from examples.art_e.inbox import generate_inbox, write_db
from examples.art_e.rollout import SERVER
from tests.support.scripted_openai import ScriptedOpenAI

BLOCK = re.compile(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', re.S)


def judge(body: dict) -> dict:
    """Scores each shown trajectory (by length, so groups differ); it must have seen the email tools."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    assert "search_emails" in user, "the judge was not shown the email server's tools"
    shown = BLOCK.findall(user)
    scores = [{"trajectory_id": i, "explanation": "scripted", "score": (len(t) % 10) / 10} for i, t in shown]
    return {"content": json.dumps({"scores": scores})}


@pytest.mark.slow
def test_autorl_on_the_email_server(tmp_path):
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    inbox = generate_inbox(1000)
    db = write_db([inbox], tmp_path / "inboxes.sqlite")
    tasks = [
        ("Find the latest budget spreadsheet and tell me its file name", 2, ["search_emails", "read_email"]),
        ("When was the last kickoff meeting moved to?", 3, ["search_emails", "read_email"]),
        ("Who sent me an order confirmation in March?", 2, ["search_emails"]),
        ("Which airline am I flying with, and what is my booking code?", 3, ["search_emails", "read_email"]),
    ]
    generated = {
        "content": json.dumps({"tasks": [{"task": t, "difficulty": d, "tools": x} for t, d, x in tasks]})
    }
    server = shlex.join([sys.executable, str(SERVER), "--db", str(db), "--inbox", inbox.id])
    out = tmp_path / "run"
    with ScriptedOpenAI(generated) as gen, ScriptedOpenAI(judge) as ruler_judge:
        rc = autorl_main([
            "--mcp", server,
            "--generator", "openai/writer", "--generator-api-base", gen.url, "--generator-api-key", "x",
            "--judge", "openai/judge", "--judge-api-base", ruler_judge.url, "--judge-api-key", "x",
            "--base-model", str(tiny), "--num-tasks", "4", "--val-fraction", "0.25", "--steps", "1",
            "--tasks-per-step", "2", "--group-size", "2", "--eval-rollouts", "2", "--max-turns", "2",
            "--max-tokens", "12", "--learning-rate", "1e-3", "--name", "email-agent", "--output", str(out),
        ])  # fmt: skip
    assert rc == 0
    # the generator was shown the email server's tool schemas, nothing else
    prompt = gen.requests[0]["messages"][0]["content"]
    assert all(name in prompt for name in ("search_emails", "read_email", "return_final_answer"))
    assert len(ruler_judge.requests) == 3  # two training groups, then before/after on the held-out task
    report = json.loads((out / "report.json").read_text())
    assert report["step"] == 1 and report["tasks"] == {"train": 3, "val": 1}
    assert report["val_scored"] == {"before": 2, "after": 2}
    run_dir = out / ".art" / "autorl" / "models" / "email-agent"
    assert (run_dir / "checkpoints" / "0001" / "adapter_model.safetensors").is_file()
