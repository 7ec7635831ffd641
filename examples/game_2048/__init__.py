"""2048 with a lowered winning tile: the game, a one-move-per-turn agent, and its training script."""
