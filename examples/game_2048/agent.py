"""The 2048 agent: one move per turn, the reward, and games of the greedy heuristic for SFT.

Each turn the model sees the current board and the moves that change it (a fresh prompt: the board
is the whole state, and a growing chat would pass the context length within a game) and answers
``<move>left</move>``. All
turns of a game land in one trajectory, as separate histories that share its reward.

Reward: on a win, 2 (a fixed bonus); on a stuck board or the move cap, the largest tile and the
board's sum as fractions of the winning tile, 0.5 each (so under 1); -1 for an unparsable reply or a
move that changes nothing, which ends the game.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from typing import Any

import art_core as art

try:
    from . import game
except ImportError:
    import game  # type: ignore[no-redef]

__all__ = ["INVALID_REWARD", "SYSTEM", "WIN_REWARD", "expert_trajectory", "keep_turns", "play_game", "prompt",
           "random_trajectory", "reward_for", "rollout"]

SYSTEM = (
    "You play 2048. Reach the tile {target}. A move slides all tiles left, right, up or down; equal "
    "tiles merge. Reply with your move only, like <move>left</move>."
)
WIN_REWARD = 2.0
INVALID_REWARD = -1.0

Chooser = Callable[[list[dict[str, Any]], game.Board], Awaitable[str]]


def prompt(board: game.Board) -> str:
    """The turn's user message: the board, then the moves that change it."""
    return f"{game.render(board)}\nMoves that change the board: {', '.join(game.valid_moves(board))}."


def reward_for(g: game.Game, invalid: bool) -> float:
    if invalid:
        return INVALID_REWARD
    if g.won:
        return WIN_REWARD
    return 0.5 * math.log2(g.max_tile) / math.log2(g.target) + 0.5 * min(sum(g.board) / g.target, 1.0) * 0.99


async def play_game(choose: Chooser, seed: int, target: int, max_moves: int) -> tuple[game.Game, bool, list]:
    """Play until a win, a stuck board, the move cap, or an invalid reply; returns the game, whether it
    ended on an invalid move, and each turn's messages."""
    g = game.Game(seed, target)
    turns = []
    while not g.won and not g.stuck and g.moves < max_moves:
        messages = [{"role": "system", "content": SYSTEM.format(target=target)},
                    {"role": "user", "content": prompt(g.board)}]
        reply = await choose(messages, g.board)
        turns.append([*messages, {"role": "assistant", "content": reply}])
        try:
            direction = game.parse_move(reply)
            if direction is None:
                raise game.InvalidMove(f"no <move> tag in {reply[:40]!r}")
            g.move(direction)
        except game.InvalidMove:
            return g, True, turns
    return g, False, turns


def _score(traj: art.Trajectory, g: game.Game, invalid: bool) -> art.Trajectory:
    traj.reward = reward_for(g, invalid)
    traj.metrics.update(win=float(g.won), invalid=float(invalid), max_tile=g.max_tile, moves=g.moves)
    return traj


def keep_turns(traj: art.Trajectory, k: int | None, seed: int) -> art.Trajectory:
    """Keep `k` of the game's turns (always the last, which decided the outcome), chosen at random.

    Every turn of a game shares its reward, so training on a random subset of turns estimates the
    same gradient from fewer sequences; on CPU a trained sequence is the expensive unit.
    """
    histories = traj.histories()
    if k is None or len(histories) <= k:
        return traj
    rng = random.Random(seed)
    keep = sorted(rng.sample(range(len(histories) - 1), k - 1)) + [len(histories) - 1]
    chosen = [histories[i] for i in keep]
    traj.turns, traj.tools = chosen[0].turns, chosen[0].tools
    traj.additional_histories = chosen[1:]
    traj.metrics["turns_kept"] = len(chosen)
    return traj


async def rollout(model: art.Model, seed: int, *, target: int = 64, max_moves: int = 80, temperature: float = 1.0,
                  max_tokens: int = 10, client: Any = None) -> art.Trajectory:
    """One game by the model; every turn is captured for training."""
    client = client or model.openai_client()

    async def choose(messages: list[dict[str, Any]], board: game.Board) -> str:
        r = await client.chat.completions.create(model=model.served_name(), messages=messages,
                                                 max_tokens=max_tokens, temperature=temperature)
        return r.choices[0].message.content or ""

    with art.capture() as traj:
        g, invalid, _ = await play_game(choose, seed, target, max_moves)
    return _score(traj, g, invalid)


async def expert_trajectory(seed: int, *, target: int = 64, max_moves: int = 80) -> art.Trajectory:
    """A game of the greedy heuristic, one history per move, for SFT."""

    async def choose(messages: list[dict[str, Any]], board: game.Board) -> str:
        return f"<move>{game.greedy_move(board)}</move>"

    g, invalid, turns = await play_game(choose, seed, target, max_moves)
    traj = art.Trajectory(messages=turns[0], additional_histories=[art.History(messages=t) for t in turns[1:]])
    return _score(traj, g, invalid)


async def random_trajectory(seed: int, *, target: int = 64, max_moves: int = 80) -> art.Trajectory:
    """A game of moves chosen uniformly among those that change the board (dice of its own, seeded by
    the game): the random legal baseline."""
    rng = random.Random(f"random-legal-{seed}")

    async def choose(messages: list[dict[str, Any]], board: game.Board) -> str:
        return f"<move>{rng.choice(game.valid_moves(board))}</move>"

    g, invalid, turns = await play_game(choose, seed, target, max_moves)
    traj = art.Trajectory(messages=turns[0], additional_histories=[art.History(messages=t) for t in turns[1:]])
    return _score(traj, g, invalid)
