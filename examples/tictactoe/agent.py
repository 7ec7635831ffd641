"""The Tic Tac Toe agent: one move per turn in a chat, the reward, and minimax games for SFT.

The agent plays a side drawn from the game's seed (X moves first) against an opponent that picks a
random empty cell, or against a perfect (minimax) player. Each turn the user message shows the board
and lists the free cells; the agent answers ``<move>B2</move>``. An unparsable reply or a move to a
taken cell ends the game.

Reward: 1 win, 0.5 draw, 0 loss, -1 for an illegal or unparsable move.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import art_core as art

try:  # imported as a package (tests) or run as a script from this folder
    from . import game
except ImportError:
    import game  # type: ignore[no-redef]

__all__ = ["ILLEGAL_REWARD", "SYSTEM", "balanced_seeds", "expert_trajectory", "opening", "play_game", "prompt",
           "random_trajectory", "reward_for", "rollout"]

SYSTEM = (
    "You play Tic Tac Toe as {mark}. Cells are a row letter (A, B, C from the top) and a column "
    "number (1, 2, 3 from the left). Empty cells are '.'. Play one of the free cells. Reply with your "
    "move only, the cell in a move tag: <move>cell</move>."
)
ILLEGAL_REWARD = -1.0
OPPONENTS: dict[str, Callable[[game.Board, str, random.Random], int]] = {
    "random": lambda board, mark, rng: game.random_move(board, rng),
    "minimax": game.perfect_move,
}

Chooser = Callable[[list[dict[str, Any]], game.Board, str], Awaitable[str]]


def reward_for(outcome: str) -> float:
    return {"win": 1.0, "draw": 0.5, "loss": 0.0}.get(outcome, ILLEGAL_REWARD)


def side_for(seed: int) -> str:
    return "X" if random.Random(seed).random() < 0.5 else "O"


def prompt(board: game.Board) -> str:
    """The turn's user message: the board and the free cells.

    It no longer names the opponent's last cell. On the dev split nearly every illegal move after SFT
    was that cell played back (X opens B2, O answers B2); without the line the rate stayed the same
    (0.060 -> 0.055), so the cause is O's favourite first reply, not the line, which only cost tokens.
    """
    free = ", ".join(game.cell_name(i) for i in game.legal_moves(board))
    return f"{game.render(board)}\nFree cells: {free}.\nYour move."


def opponent_rng(seed: int) -> random.Random:
    """The opponent's dice in game `seed` (what `play_game` and `opening` both draw from)."""
    return random.Random(seed * 7919 + 1)


def opening(seed: int) -> int | None:
    """The random opponent's first cell in game `seed` when it plays X (None: the agent is X)."""
    if side_for(seed) == "X":
        return None
    return game.random_move(game.empty_board(), opponent_rng(seed))


def balanced_seeds(candidates: Iterable[int], count: int, centre_share: float = 1 / 3) -> list[int]:
    """`count` seeds from `candidates`: half the games as X, half as O, `centre_share` of those O games
    opening on X's centre (B2).

    Minimax answers every corner opening on B2, so in plain random games B2 is O's first reply in over
    half the SFT games, and the model learns to play it even when X has taken it: that was nearly every
    illegal move on the dev games. Showing the centre opening as often as the rest breaks the habit.
    """
    quotas = {"X": count - count // 2, "O-centre": round(count // 2 * centre_share)}
    quotas["O-other"] = count // 2 - quotas["O-centre"]
    chosen: list[int] = []
    for seed in candidates:
        first = opening(seed)
        kind = "X" if first is None else ("O-centre" if first == 4 else "O-other")
        if quotas[kind] > 0:
            quotas[kind] -= 1
            chosen.append(seed)
            if len(chosen) == count:
                return chosen
    raise ValueError(f"only {len(chosen)} of {count} balanced seeds among the candidates: give more candidates")


async def play_game(choose: Chooser, seed: int, opponent: str = "random") -> tuple[list[dict[str, Any]], dict]:
    """Play one game; ``choose(messages, board, mark)`` returns the agent's reply text.

    Returns the conversation and the result: outcome ("win", "draw", "loss", "illegal"), the agent's
    mark, and the number of agent moves.
    """
    rng = opponent_rng(seed)
    mark = side_for(seed)
    pick = OPPONENTS[opponent]
    board = game.empty_board()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM.format(mark=mark)}]
    if mark == "O":
        board = game.play(board, pick(board, "X", rng), "X")
    moves = 0
    while True:
        messages.append({"role": "user", "content": prompt(board)})
        reply = await choose(messages, board, mark)
        messages.append({"role": "assistant", "content": reply})
        moves += 1
        try:
            cell = game.parse_move(reply)
            if cell is None:
                raise game.IllegalMove(f"no <move> tag in {reply[:40]!r}")
            board = game.play(board, cell, mark)
        except game.IllegalMove:
            return messages, {"outcome": "illegal", "mark": mark, "moves": moves}
        if game.winner(board) is None:
            board = game.play(board, pick(board, game.other(mark), rng), game.other(mark))
        result = game.winner(board)
        if result is not None:
            outcome = "draw" if result == "draw" else ("win" if result == mark else "loss")
            return messages, {"outcome": outcome, "mark": mark, "moves": moves}


def _score(traj: art.Trajectory, result: dict) -> art.Trajectory:
    outcome = result["outcome"]
    traj.reward = reward_for(outcome)
    for name in ("win", "draw", "loss", "illegal"):
        traj.metrics[name] = float(outcome == name)
    traj.metrics["moves"] = result["moves"]
    replies = [m["content"] for m in traj.messages() if m["role"] == "assistant"]
    traj.metrics["tagged"] = sum(game.parse_move(r) is not None for r in replies) / max(len(replies), 1)
    traj.metadata.update(result)
    return traj


async def rollout(
    model: art.Model, seed: int, *, opponent: str = "random", temperature: float = 1.0,
    max_tokens: int = 10, sampling_seed: int | None = None, client: Any = None,
) -> art.Trajectory:
    """One game of the model against ``opponent``; every model turn is captured for training."""
    client = client or model.openai_client()

    async def choose(messages: list[dict[str, Any]], board: game.Board, mark: str) -> str:
        extra = {} if sampling_seed is None else {"seed": sampling_seed}
        r = await client.chat.completions.create(
            model=model.served_name(), messages=messages, max_tokens=max_tokens, temperature=temperature, **extra)
        return r.choices[0].message.content or ""

    with art.capture() as traj:
        _, result = await play_game(choose, seed, opponent)
    return _score(traj, result)


async def expert_trajectory(seed: int, opponent: str = "random") -> art.Trajectory:
    """A game the minimax player plays in the agent's seat, as a trajectory for SFT."""
    rng = random.Random(seed)

    async def choose(messages: list[dict[str, Any]], board: game.Board, mark: str) -> str:
        return f"<move>{game.cell_name(game.perfect_move(board, mark, rng))}</move>"

    messages, result = await play_game(choose, seed, opponent)
    return _score(art.Trajectory(messages=messages), result)


async def random_trajectory(seed: int, opponent: str = "random") -> art.Trajectory:
    """A game in which the agent's seat plays a free cell chosen uniformly (its own dice, seeded by the
    game): the random legal baseline."""
    rng = random.Random(f"random-legal-{seed}")

    async def choose(messages: list[dict[str, Any]], board: game.Board, mark: str) -> str:
        return f"<move>{game.cell_name(game.random_move(board, rng))}</move>"

    messages, result = await play_game(choose, seed, opponent)
    return _score(art.Trajectory(messages=messages), result)
