"""Codenames on a small board: the game, the model in both roles, and its training script."""
