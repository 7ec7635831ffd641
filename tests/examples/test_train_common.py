"""The seeds the game examples train on never reach the seeds they are evaluated on."""

from __future__ import annotations

import importlib

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
