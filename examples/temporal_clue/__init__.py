"""Temporal Clue: a puzzle generator with a uniqueness-proving solver, the agent, and its training script."""
