"""Each example's train.py, end to end on the tiny random model: base eval, SFT, one GRPO step, eval.

The tiny model learns nothing; these catch an example that no longer runs against the library.
"""

from __future__ import annotations

import asyncio
import importlib
import json

import pytest

EXAMPLES = ["tictactoe", "game_2048", "codenames", "temporal_clue"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_train_script_runs_every_stage(name, tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("ART_HOME", str(tmp_path / "home"))
    train = importlib.import_module(f"examples.{name}.train")
    results = tmp_path / "examples.json"
    args = train.parse_args(["--config", "tiny", "--base-model", str(tiny_model_path), "--split", "dev",
                             "--output", str(tmp_path / "art"), "--record", str(results)])
    out = asyncio.run(train.main(args))
    (key, entry), = json.loads(results.read_text())[name].items()
    assert key == f"tiny[base_model={tiny_model_path}]-seed0"  # a setting given on the command line keys the run
    assert entry["steps"] == {"sft": 1, "rl": train.CONFIGS["tiny"]["rl_steps"]} and entry["wall_s"] > 0
    tables = [v for k, v in entry.items() if isinstance(v, dict) and "score" in v]  # one per opponent or role
    assert tables and all({"base", "sft", "sft_rl", "sft_rl_minus_base", "sft_rl_minus_sft"} <= t["score"].keys()
                          for t in tables)
    assert len(out["curve"]) == train.CONFIGS["tiny"]["rl_steps"]
    model_dir = tmp_path / "art" / out["project"] / "models" / out["name"]
    final = 1 + train.CONFIGS["tiny"]["rl_steps"]
    assert (model_dir / "checkpoints").is_dir()
    for step in (0, 1, final):  # every stage's held-out games are in the run directory
        assert list((model_dir / "trajectories").glob(f"val*/{step:04d}.jsonl")), step


def test_temporal_clue_scores_the_held_out_puzzles_along_the_rl_steps(tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("ART_HOME", str(tmp_path / "home"))
    train = importlib.import_module("examples.temporal_clue.train")
    args = train.parse_args(["--config", "tiny", "--base-model", str(tiny_model_path), "--split", "dev",
                             "--rl-steps", "2", "--eval-every", "1", "--output", str(tmp_path / "art")])
    out = asyncio.run(train.main(args))
    # after each RL step but the last (that one is the sft_rl stage)
    assert [c["step"] for c in out["curve"]] == [2, 3] and "held_out" not in out["curve"][1]
    assert 0.0 <= out["curve"][0]["held_out"]["mean"] <= 1.0


def test_tictactoe_sft_teaches_the_tiny_model_the_move_tag(tiny_model_path, tmp_path, monkeypatch):
    """A learning check for the SFT warm-up path: after SFT on minimax games the random tiny model
    answers in the `<move>..</move>` format it never produced before (it still plays badly)."""
    monkeypatch.setenv("ART_HOME", str(tmp_path / "home"))
    train = importlib.import_module("examples.tictactoe.train")
    args = train.parse_args(["--config", "tiny", "--base-model", str(tiny_model_path), "--split", "dev",
                             "--sft-games", "32", "--sft-epochs", "8", "--sft-lr", "3e-3", "--rl-steps", "0",
                             "--eval-games", "8", "--output", str(tmp_path / "art")])
    out = asyncio.run(train.main(args))
    tagged = out["vs_random"]["tagged_rate"]
    assert tagged["base"]["mean"] < 0.2
    assert tagged["sft"]["mean"] > 0.8 and tagged["sft_minus_base"]["ci"][0] > 0
