"""examples/art_e/train.py runs end to end (base -> SFT -> RL, each evaluated) on a random tiny model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_train_smoke_on_the_tiny_model(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "examples.art_e.train", "--config", "tiny", "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    stages = results["stages"]
    assert list(stages) == ["base", "sft", "rl"]
    # base is step 0; SFT trained one checkpoint per batch (4 examples in batches of 2); RL one step more
    assert stages["base"]["step"] == 0 and stages["sft"]["step"] == 2 and stages["rl"]["step"] == 3
    assert all(s["questions"] == 3 and 0.0 <= s["accuracy"] <= 1.0 for s in stages.values())
    assert set(results["differences"]) == {"sft-base", "rl-base", "rl-sft"}
    assert results["sft"]["examples"] == 4 and results["rl"]["steps"] == 1
    # the teacher's data was written and checked on load; held-out runs were logged as split val
    assert sum(1 for _ in (tmp_path / "teacher.jsonl").open()) >= 15
    val = tmp_path / "art" / "art-e" / "models" / "art-e-tiny-s0" / "trajectories" / "val"
    assert sorted(p.name for p in val.iterdir()) == ["0000.jsonl", "0002.jsonl", "0003.jsonl"]


def test_results_hold_every_stage_measured_so_far():
    """train.py writes results.json after each stage: one stage has no differences; three have all three."""
    import art_core as art
    from examples.art_e.train import summarise

    def result(step, rewards):
        return art.EvalResult(model=f"m@{step}", step=step, task_ids=[f"q{i}" for i in range(len(rewards))],
                              rewards=[[r] for r in rewards]), 0.0  # fmt: skip

    out: dict = {}
    stages = {"base": result(0, [0, 0, 0, 1])}
    assert summarise(out, stages, 1.0) == {} and out["differences"] == {}
    assert out["stages"]["base"]["accuracy"] == 0.25 and json.dumps(out)  # writable as it stands
    stages |= {"sft": result(2, [1, 0, 1, 1]), "rl": result(3, [1, 1, 1, 1])}
    compared = summarise(out, stages, 2.0)
    assert set(compared) == set(out["differences"]) == {"sft-base", "rl-base", "rl-sft"}
    assert out["differences"]["rl-base"]["diff"] == 0.75 and out["wall_s"] == 2.0
    # the shape every example records (benchmarks/examples_table.py): the RL stage is "sft_rl" there
    acc = out["accuracy"]
    assert acc["sft_rl"]["mean"] == 1.0 and acc["sft_rl_minus_base"]["diff"] == 0.75
    assert acc["sft_rl_minus_sft"]["diff"] == out["differences"]["rl-sft"]["diff"] == 0.25


def test_boolean_settings_parse_true_and_false_and_refuse_anything_else(capsys):
    """`--rl-scale-rewards false` turns std scaling off (a plain bool() would read "false" as True)."""
    from examples.art_e.train import CONFIGS, parse_args

    assert parse_args(["--rl-scale-rewards", "false"]).rl_scale_rewards is False
    assert parse_args(["--rl-scale-rewards", "Yes"]).rl_scale_rewards is True
    assert parse_args([]).rl_scale_rewards is None  # the configuration's value stands
    # the cpu recipe's RL advantages are not std-scaled; `--rl-scale-rewards true` gives the earlier recipe
    assert CONFIGS["cpu"].rl_scale_rewards is False and CONFIGS["gpu"].rl_scale_rewards is True
    with pytest.raises(SystemExit):
        parse_args(["--rl-scale-rewards", "maybe"])
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err


def test_a_wrong_answer_reward_out_of_range_stops_the_run_before_any_work(tmp_path):
    """`--rl-wrong-reward 0` would make a wrong answer pay as much as giving up: refused, named."""
    from examples.art_e.train import main, parse_args

    with pytest.raises(SystemExit, match="--rl-wrong-reward: .*between -2.0 and -0.2.*got 0.0"):
        asyncio.run(main(parse_args(["--config", "tiny", "--output", str(tmp_path / "run"), "--rl-wrong-reward", "0"])))
    assert not (tmp_path / "run").exists()
    assert parse_args(["--rl-wrong-reward", "-0.5"]).rl_wrong_reward == -0.5


def test_eval_concurrency_is_a_setting_and_zero_stops_the_run_before_any_work(tmp_path):
    from examples.art_e.train import CONFIGS, main, parse_args

    assert CONFIGS["cpu"].eval_concurrency == 8 and parse_args(["--eval-concurrency", "2"]).eval_concurrency == 2
    with pytest.raises(SystemExit, match="--eval-concurrency 0"):
        asyncio.run(main(parse_args(["--config", "tiny", "--output", str(tmp_path / "run"), "--eval-concurrency", "0"])))
    assert not (tmp_path / "run").exists()


def _run(tmp: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "examples.art_e.train", "--config", "tiny", "--output", str(tmp), *flags],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


@pytest.mark.slow
def test_init_from_runs_rl_from_an_earlier_runs_sft_checkpoint(tmp_path):
    """`--init-from RUN` copies RUN's SFT checkpoint in, skips base and SFT, reuses RL's starting score."""
    first, second = tmp_path / "sft", tmp_path / "rl"
    out = _run(first, "--rl-steps", "0")
    assert out.returncode == 0, out.stderr[-3000:]
    out = _run(second, "--init-from", str(first))
    assert out.returncode == 0, out.stderr[-3000:]
    before = json.loads((first / "results.json").read_text())
    results = json.loads((second / "results.json").read_text())
    assert list(results["stages"]) == ["sft", "rl"] and set(results["differences"]) == {"rl-sft"}
    assert results["stages"]["sft"]["step"] == 2 and results["stages"]["rl"]["step"] == 3
    assert results["init_from"] == str(first) and results["sft"] == before["sft"]
    # the SFT stage's per-question scores came from the first run: not evaluated again (no val file for step 2)
    assert results["stages"]["sft"]["scores"] == before["stages"]["sft"]["scores"]
    models = "art/art-e/models/art-e-tiny-s0"
    assert sorted(p.name for p in (second / models / "trajectories" / "val").iterdir()) == ["0003.jsonl"]
    adapter = "checkpoints/0002/adapter_model.safetensors"
    assert (second / models / adapter).read_bytes() == (first / models / adapter).read_bytes()
    assert not (second / "teacher.jsonl").exists()  # no SFT stage ran


def test_init_from_refuses_what_it_cannot_start_from(tmp_path):
    from examples.art_e.train import CONFIGS, start_from

    cfg = CONFIGS["tiny"]
    with pytest.raises(SystemExit, match="no results.json there"):
        start_from(tmp_path, tmp_path / "new", "m", cfg)
    results = {"split": "dev", "settings": {"base_model": "tiny", "lora_rank": 4, "max_seq_len": 2048}, "stages": {}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit, match="no evaluated SFT stage"):
        start_from(tmp_path, tmp_path / "new", "m", cfg)
    results["stages"]["sft"] = {"step": 2}
    results["settings"]["lora_rank"] = 16
    (tmp_path / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit, match="lora_rank=16.*pass --lora-rank 16"):
        start_from(tmp_path, tmp_path / "new", "m", cfg)
    results["settings"]["lora_rank"] = 4
    (tmp_path / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit, match="expected one checkpoint 2 .* found 0"):
        start_from(tmp_path, tmp_path / "new", "m", cfg)
    ckpt = tmp_path / "art" / "p" / "models" / "m" / "checkpoints" / "0002"
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_config.json").write_text("{}")
    assert start_from(tmp_path, tmp_path / "new", "m", cfg)["stages"]["sft"]["step"] == 2
    assert (tmp_path / "new" / "art" / "art-e" / "models" / "m" / "checkpoints" / "0002" / "adapter_config.json").exists()
    with pytest.raises(SystemExit, match="already holds checkpoints of m"):
        start_from(tmp_path, tmp_path / "new", "m", cfg)


def test_an_earlier_evaluation_is_reused_only_for_the_same_questions():
    from examples.art_e.inbox import Question
    from examples.art_e.train import earlier_stage

    qs = [Question(id=f"q{i}", inbox_id="i", question="?", answer="a", kind="name", sources=())
          for i in range(3)]  # fmt: skip
    prior = {"split": "dev", "name": "m", "stages": {"sft": {"step": 5, "task_ids": ["q0", "q1", "q2"],
                                                             "scores": [1.0, 0.0, 1.0], "art_e_reward": 0.4}}}  # fmt: skip
    result, reward = earlier_stage(prior, "sft", "dev", qs)
    assert result.mean == 2 / 3 and result.step == 5 and reward == 0.4
    assert earlier_stage(prior, "sft", "heldout", qs) is None  # another split
    assert earlier_stage(prior, "sft", "dev", qs[:2]) is None  # other questions
    assert earlier_stage({"split": "dev", "stages": {"sft": {"step": 5}}}, "sft", "dev", qs) is None  # no scores kept
