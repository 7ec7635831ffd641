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


def table_lines(tmp_path, results: dict) -> list[str]:
    """What benchmarks/examples_table.py prints for an examples.json holding `results`."""
    from benchmarks.examples_table import main

    path = tmp_path / "examples.json"
    path.write_text(json.dumps(results))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["--results", str(path)])
    return out.getvalue().splitlines()


def test_the_results_table_shows_every_stage_and_difference(tmp_path):
    cell = {"mean": 0.5, "ci": [0.25, 0.75]}
    row = {"base": cell, "sft": cell, "sft_rl": {"mean": 0.75, "ci": [0.5, 1.0]},
           "sft_rl_minus_base": {"diff": 0.25, "ci": [0.0, 0.5], "p_value": 0.1}}  # fmt: skip
    # a block of per-stage dicts without means (ART-E's `stages`) is not a metric and must not break the table
    stages = {"base": {"accuracy": 0.5, "ci": [0.25, 0.75]}, "sft": {"accuracy": 0.5, "ci": [0.25, 0.75]}}
    entry = {"model": "m", "wall_s": 90.0, "peak_rss_mb": 2048, "vs_random": {"score": row}, "accuracy": row,
             "stages": stages}  # fmt: skip
    lines = table_lines(tmp_path, {"game": {"cpu-seed0": entry}})
    assert lines[0] == "### game cpu-seed0 (m, wall 1.5 min, peak RSS 2.0 GB)"
    assert "| accuracy | 0.500 [0.250, 0.750] | 0.500 [0.250, 0.750] | 0.750 [0.500, 1.000] | +0.250 [+0.000, +0.500] | - |" in lines
    assert any(line.startswith("| vs_random score | ") for line in lines)
    assert not any("stages" in line for line in lines)


def test_the_results_table_shows_a_run_without_a_base_stage(tmp_path):
    """A run started from another's SFT checkpoint (ART-E's --init-from) records no base: its row shows "-"."""
    row = {"sft": {"mean": 0.25, "ci": [0.1, 0.4]}, "sft_rl": {"mean": 0.5, "ci": [0.3, 0.6]},
           "sft_rl_minus_sft": {"diff": 0.25, "ci": [0.05, 0.4], "p_value": 0.04}}  # fmt: skip
    lines = table_lines(tmp_path, {"art_e": {"cpu-seed0-init": {"model": "m", "accuracy": row}}})
    assert "| accuracy | - | 0.250 [0.100, 0.400] | 0.500 [0.300, 0.600] | - | +0.250 [+0.050, +0.400] |" in lines


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


@pytest.mark.parametrize("name", ["distillation", "mcp_rl"])
def test_a_run_with_settings_given_is_keyed_apart_from_its_configuration(name, tmp_path):
    """A dev run with --rl-steps 16 must not replace the configuration's own entry in the results file."""
    module = "examples.mcp_rl.train_calculator" if name == "mcp_rl" else f"examples.{name}.train"
    train = importlib.import_module(module)
    plain, given = train.parse_args([]), train.parse_args(["--rl-steps", "16", "--sft-epochs", "1"])
    assert train_common.config_name(train_common.settings(train.CONFIGS, plain), plain) == "cpu"
    name_given = train_common.config_name(train_common.settings(train.CONFIGS, given), given)
    assert name_given == "cpu[sft_epochs=1,rl_steps=16]"
    results = tmp_path / "examples.json"
    for config in ("cpu", name_given):
        train_common.record(results, name, {"config": config, "seed": 0, "machine": {"cpu": "given"}})
    assert sorted(json.loads(results.read_text())[name]) == ["cpu-seed0", "cpu[sft_epochs=1,rl_steps=16]-seed0"]


def _games(rewards: list[float]) -> list:
    import art_core as art

    return [(100_000 + i, art.Trajectory(messages=[], reward=r, metrics={"win": float(r > 0)}))
            for i, r in enumerate(rewards)]


def test_baseline_figures_pair_the_trained_model_with_the_random_player_game_by_game():
    random_legal = train_common.scripted_result("random_legal", _games([0.0, 1.0, 0.0, 1.0]))
    teacher = train_common.scripted_result("teacher", _games([1.0, 1.0, 1.0, 1.0]))
    trained = train_common.scripted_result("sft_rl", _games([1.0, 1.0, 0.0, 1.0]))
    assert random_legal.task_ids == ["100000", "100001", "100002", "100003"] and random_legal.mean == 0.5
    rows = train_common.baseline_figures({"random_legal": random_legal, "teacher": teacher},
                                         {"score": None, "win_rate": "win"}, trained)
    assert rows["score"]["teacher"] == {"mean": 1.0, "ci": [1.0, 1.0]}
    assert rows["score"]["random_legal"]["mean"] == 0.5 and rows["score"]["random_legal"]["ci"] == list(random_legal.ci)
    diff = rows["win_rate"]["sft_rl_minus_random_legal"]
    assert diff["diff"] == 0.25 and diff["method"] == "paired"  # game by game: 1, 0, 0, 0
    assert diff["ci"][0] == 0.0 and 0.25 < diff["ci"][1] <= 1.0  # no game where the trained model did worse
    assert "sft_rl_minus_random_legal" not in train_common.baseline_figures({"random_legal": random_legal},
                                                                            {"score": None})["score"]


def test_the_baselines_script_adds_the_games_to_recorded_runs(tmp_path):
    from examples import baselines

    row = {"sft_rl": {"mean": 0.6, "ci": [0.5, 0.7]}}
    entry = {"settings": {"minimax_games": 2}, "eval": {"seeds": "100000..100009"},
             "vs_random": {"score": row}, "vs_minimax": {"score": row}}  # fmt: skip
    paired = {**entry, "baselines": {"headline": {"method": "paired", "diff": 0.1}}}
    results = tmp_path / "examples.json"
    results.write_text(json.dumps({"tictactoe": {"cpu-seed0": entry, "cpu-seed1": paired}, "art_e": {"x": {}}}))
    with contextlib.redirect_stdout(io.StringIO()):
        baselines.main(["tictactoe", "--results", str(results)])
    data = json.loads(results.read_text())
    assert data["tictactoe"]["cpu-seed1"] == paired and data["art_e"] == {"x": {}}  # paired figures are kept
    block = data["tictactoe"]["cpu-seed0"]["baselines"]
    assert block["games"] == 10 and block["seeds"] == "100000..100009" and set(block["players"]) == {"random_legal", "teacher"}
    rand = block["vs_random"]["score"]["random_legal"]
    head = block["headline"]
    assert head["table"] == "vs_random" and head["metric"] == "score" and head["method"] == "interval ends"
    assert head["diff"] == pytest.approx(0.6 - rand["mean"])
    assert head["ci"] == pytest.approx([0.5 - rand["ci"][1], 0.7 - rand["ci"][0]])
    assert "sft_rl_minus_random_legal" in block["vs_minimax"]["score"]
    assert "sft_rl_minus_random_legal" not in block["vs_random"]["win_rate"]  # the run recorded no win rate
    assert set(block["vs_random"]["win_rate"]) == {"random_legal", "teacher"}
    with pytest.raises(SystemExit):
        with contextlib.redirect_stderr(io.StringIO()):
            baselines.main(["art_e", "--results", str(results)])


@pytest.mark.parametrize("name", GAMES)
def test_recorded_baselines_cover_every_table_and_metric_of_their_run(name):
    from examples import baselines

    for run, entry in json.loads(baselines.RESULTS.read_text())[name].items():
        block = entry["baselines"]
        tables = {k: v for k, v in block.items() if k not in ("games", "seeds", "players", "headline")}
        assert tables and all(set(rows) == set(entry[t]) for t, rows in tables.items()), run
        assert block["headline"]["table"] in tables and block["seeds"] == entry["eval"]["seeds"], run
        assert all({"random_legal", "teacher", "sft_rl_minus_random_legal"} <= set(row) for rows in tables.values()
                   for row in rows.values()), run


def test_the_results_table_shows_the_baselines(tmp_path):
    cell = {"mean": 0.5, "ci": [0.25, 0.75]}
    base = {"random_legal": cell, "teacher": {"mean": 1.0, "ci": [1.0, 1.0]},
            "sft_rl_minus_random_legal": {"diff": 0.0, "ci": [-0.5, 0.5], "method": "interval ends"}}
    entry = {"model": "m", "metrics": {"score": {"sft_rl": cell}, "moves": {"sft_rl": cell}},
             "baselines": {"games": 4, "seeds": "1..4", "players": {}, "metrics": {"score": base}, "headline": {}}}
    lines = table_lines(tmp_path, {"game": {"cpu-seed0": entry}})
    assert lines[2].endswith("| SFT+RL - SFT | random legal | teacher | SFT+RL - random legal |")
    assert lines[3].count("|---") == 9
    assert ("| metrics score | - | - | 0.500 [0.250, 0.750] | - | - | 0.500 [0.250, 0.750] | 1.000 [1.000, 1.000] "
            "| +0.000 [-0.500, +0.500] |") in lines
    assert "| metrics moves | - | - | 0.500 [0.250, 0.750] | - | - | - | - | - |" in lines


def test_the_results_table_shows_only_the_baselines_a_run_has(tmp_path):
    """A distillation run has a teacher and trained - teacher, no random legal player: no empty columns."""
    cell = {"mean": 0.5, "ci": [0.25, 0.75]}
    entry = {"model": "m", "held_out": {"accuracy": {"sft": cell, "sft_rl": cell}},
             "baselines": {"players": {"teacher": "qwen"},
                           "held_out": {"accuracy": {"teacher": {"mean": 0.8, "ci": [0.7, 0.9]},
                                                     "trained_minus_teacher": {"diff": -0.3, "ci": [-0.4, -0.2]}}}}}  # fmt: skip
    lines = table_lines(tmp_path, {"distillation": {"cpu-seed0": entry}})
    assert lines[2].endswith("| SFT+RL - SFT | teacher | trained - teacher |") and "random legal" not in lines[2]
    assert lines[4].endswith("| 0.800 [0.700, 0.900] | -0.300 [-0.400, -0.200] |")


def test_the_rl_curve_scores_the_held_out_tasks_every_n_steps_but_not_after_the_last():
    due = [s + 1 for s in range(10) if train_common.curve_scores_held_out({"eval_every": 4, "rl_steps": 10}, s)]
    assert due == [4, 8]
    assert [s + 1 for s in range(8) if train_common.curve_scores_held_out({"eval_every": 4, "rl_steps": 8}, s)] == [4]
    assert not any(train_common.curve_scores_held_out({"eval_every": 0, "rl_steps": 8}, s) for s in range(8))
    assert not any(train_common.curve_scores_held_out({"rl_steps": 8}, s) for s in range(8))  # no setting: never
