"""Tic Tac Toe: the game, an agent that plays it one move per turn, and its training script."""
