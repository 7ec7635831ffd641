"""`art autorl` with no judge on CPU: verified tasks from the calculator's schemas, SFT on the gold runs,
one RL step on a tiny random model, and the held-out report with intervals."""

from __future__ import annotations

import json

import pytest

from art_train.cli import autorl as autorl_main


@pytest.mark.slow
def test_autorl_without_a_judge_runs_verified(tmp_path):
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    rc = autorl_main([
        "--mcp", "bundled:calculator", "--base-model", str(tiny), "--num-tasks", "6", "--val-fraction", "0.34",
        "--steps", "1", "--tasks-per-step", "2", "--group-size", "2", "--max-turns", "2", "--max-tokens", "12",
        "--sft-epochs", "1", "--name", "calc", "--output", str(out),
    ])  # fmt: skip
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["mode"] == "verified" and report["tasks"] == {"train": 4, "val": 2, "val_state": 0}
    assert list(report["stages"]) == ["base", "sft", "sft_rl"]
    assert [report["stages"][s]["step"] for s in ("base", "sft", "sft_rl")] == [0, 1, 2]
    for stage in report["stages"].values():
        assert stage["tasks"] == 2 and 0 <= stage["ci"][0] <= stage["mean"] <= stage["ci"][1] <= 1
    assert set(report["differences"]) == {"sft - base", "sft_rl - base", "sft_rl - sft"}
    assert report["sft"]["examples"] == 4 and [h["step"] for h in report["history"]] == [2]
    val = [json.loads(x) for x in (out / "tasks.val.jsonl").read_text().splitlines()]
    train = [json.loads(x) for x in (out / "tasks.train.jsonl").read_text().splitlines()]
    assert all(t["kind"] == "answer" and "result" in t["gold"] for t in val + train)
    assert not {t["id"] for t in val} & {t["id"] for t in train}  # held out: never trained on
    run_dir = out / ".art" / "autorl" / "models" / "calc"
    assert (run_dir / "checkpoints" / "0002" / "adapter_model.safetensors").is_file()


def test_autorl_judge_needs_tasks_from_somewhere(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        autorl_main(
            ["--mcp", "bundled:notes", "--judge", "openai/j", "--base-model", "x", "--output", str(tmp_path)]
        )
    assert exit_.value.code == 2
    assert "--judge (RULER) needs tasks" in " ".join(capsys.readouterr().err.split())


def test_autorl_refuses_a_non_deterministic_server_without_a_judge(tmp_path, capsys):
    import sys
    from pathlib import Path

    server = f"{sys.executable} {Path(__file__).with_name('random_server.py')}"
    rc = autorl_main(["--mcp", server, "--base-model", "x", "--num-tasks", "4", "--output", str(tmp_path)])
    assert rc == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "NonDeterministicServer" in err and "is not deterministic" in err


async def test_held_out_tasks_of_their_own_seed_are_never_training_tasks():
    from argparse import Namespace

    from art_mcp import bundled_server
    from art_mcp.verified_run import _split

    args = Namespace(tasks=None, num_tasks=8, val_fraction=0.5, seed=0, val_seed=None, walk_length=4,
                     tools=["calculate"], generator=None)  # fmt: skip
    calculator = bundled_server("calculator")
    one_draw = await _split(args, calculator, None)
    args.val_seed = 5
    train, val = await _split(args, calculator, None)
    assert [len(x) for x in one_draw] == [len(train), len(val)] == [4, 4]
    assert not {t.id for t in train} & {t.id for t in val}
    assert {t.call.name for t in train + val} == {"calculate"}
    assert {t.id for t in val} != {t.id for t in one_draw[1]}  # another seed's walks


async def test_a_generator_rewords_only_the_tasks_kept(monkeypatch):
    """With --val-seed, the held-out draw is twice the size asked; only the kept half is reworded."""
    from argparse import Namespace

    from art_mcp import bundled_server, verified_run

    worded: list[int] = []

    async def reword(tasks, generator, litellm_params=None):
        worded.append(len(tasks))
        return tasks

    monkeypatch.setattr(verified_run, "reword_tasks", reword)
    args = Namespace(tasks=None, num_tasks=8, val_fraction=0.5, seed=0, val_seed=5, walk_length=4,
                     tools=["calculate"], generator="openai/g", generator_api_base=None, generator_api_key=None,
                     generator_max_tokens=None)  # fmt: skip
    train, val = await verified_run._split(args, bundled_server("calculator"), None)
    assert worded == [len(train), len(val)] == [4, 4]


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--val-seed", "0"], "--val-seed 0 equals --seed"),
     (["--judge", "openai/j", "--tasks", "t.jsonl", "--tools", "a"], "--tools is for verified tasks"),
     (["--val-seed", "3", "--val-fraction", "1"], "--val-fraction must be between 0 and 1")],
)  # fmt: skip
def test_autorl_verified_options_are_checked(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_:
        autorl_main(["--mcp", "bundled:notes", "--base-model", "x", "--output", str(tmp_path), *extra])
    assert exit_.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())
