"""The seeds the game examples train on never reach the seeds they are evaluated on."""

from __future__ import annotations

import contextlib
import importlib
import io
import json

import pytest

from examples import train_common

GAMES = ["tictactoe", "game_2048", "codenames", "temporal_clue"]


@pytest.mark.parametrize("name", GAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_training_seeds_stay_below_the_held_out_splits(name, seed):
    configs = importlib.import_module(f"examples.{name}.train").CONFIGS
    for config, cfg in configs.items():
        sft = cfg.get("sft_games", cfg.get("sft_puzzles"))
        used = set(train_common.sft_seeds(seed, sft))
        rl = set()
        for step in range(cfg["rl_steps"]):
            rl |= set(train_common.rl_seeds(seed, step, cfg["groups"]))
        assert len(rl) == cfg["rl_steps"] * cfg["groups"], config  # a new board for every RL group
        assert not used & rl, config  # the RL games are not the SFT games
        assert max(used | rl) < min(train_common.SPLITS.values()), config


def test_the_results_table_shows_every_stage_and_difference(tmp_path):
    from benchmarks.examples_table import main

    cell = {"mean": 0.5, "ci": [0.25, 0.75]}
    row = {"base": cell, "sft": cell, "sft_rl": {"mean": 0.75, "ci": [0.5, 1.0]},
           "sft_rl_minus_base": {"diff": 0.25, "ci": [0.0, 0.5], "p_value": 0.1}}  # fmt: skip
    # a block of per-stage dicts without means (ART-E's `stages`) is not a metric and must not break the table
    stages = {"base": {"accuracy": 0.5, "ci": [0.25, 0.75]}, "sft": {"accuracy": 0.5, "ci": [0.25, 0.75]}}
    entry = {"model": "m", "wall_s": 90.0, "peak_rss_mb": 2048, "vs_random": {"score": row}, "accuracy": row,
             "stages": stages}  # fmt: skip
    results = tmp_path / "examples.json"
    results.write_text(json.dumps({"game": {"cpu-seed0": entry}}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["--results", str(results)])
    lines = out.getvalue().splitlines()
    assert lines[0] == "### game cpu-seed0 (m, wall 1.5 min, peak RSS 2.0 GB)"
    assert "| accuracy | 0.500 [0.250, 0.750] | 0.500 [0.250, 0.750] | 0.750 [0.500, 1.000] | +0.250 [+0.000, +0.500] | - |" in lines
    assert any(line.startswith("| vs_random score | ") for line in lines)
    assert not any("stages" in line for line in lines)


def test_the_results_table_shows_a_run_without_a_base_stage(tmp_path):
    """A run started from another's SFT checkpoint (ART-E's --init-from) records no base: its row shows "-"."""
    from benchmarks.examples_table import main

    row = {"sft": {"mean": 0.25, "ci": [0.1, 0.4]}, "sft_rl": {"mean": 0.5, "ci": [0.3, 0.6]},
           "sft_rl_minus_sft": {"diff": 0.25, "ci": [0.05, 0.4], "p_value": 0.04}}  # fmt: skip
    results = tmp_path / "examples.json"
    results.write_text(json.dumps({"art_e": {"cpu-seed0-init": {"model": "m", "accuracy": row}}}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["--results", str(results)])
    assert "| accuracy | - | 0.250 [0.100, 0.400] | 0.500 [0.300, 0.600] | - | +0.250 [+0.050, +0.400] |" in out.getvalue().splitlines()


@pytest.mark.parametrize("name", GAMES)
def test_rl_temperature_is_a_setting_with_a_flag(name):
    train = importlib.import_module(f"examples.{name}.train")
    default = train.CONFIGS["cpu"]["rl_temperature"]
    assert 0.0 < default <= 1.0 and train_common.settings(train.CONFIGS, train.parse_args([]))["rl_temperature"] == default
    assert train_common.settings(train.CONFIGS, train.parse_args(["--rl-temperature", "0.3"]))["rl_temperature"] == 0.3


def test_a_recorded_entry_names_the_machine_it_ran_on(tmp_path):
    """Wall times mean little without the CPU: every entry records it, and a second run replaces only its key."""
    import os

    results = tmp_path / "examples.json"
    train_common.record(results, "art_e", {"config": "cpu", "seed": 0, "wall_s": 1.0})
    train_common.record(results, "art_e", {"config": "cpu", "seed": 1, "wall_s": 2.0, "machine": {"cpu": "given"}})
    data = json.loads(results.read_text())["art_e"]
    machine = data["cpu-seed0"]["machine"]
    assert machine["cpus"] == os.cpu_count() and isinstance(machine["native_bf16"], bool) and machine["capability"]
    assert data["cpu-seed1"]["machine"] == {"cpu": "given"} and data["cpu-seed0"]["wall_s"] == 1.0
