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
    entry = json.loads(results.read_text())[name]["tiny-seed0"]
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
