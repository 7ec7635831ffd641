"""Tic Tac Toe: the board, its rules, a random opponent and a perfect (minimax) player.

Cells are named by row letter (A-C, top to bottom) and column number (1-3, left to right), so
``A1`` is the top-left corner and ``B2`` the centre. The board is a tuple of nine strings, each
``"X"``, ``"O"`` or ``"."``, in reading order.
"""

from __future__ import annotations

import random
import re
from functools import cache

__all__ = [
    "EMPTY", "IllegalMove", "LINES", "best_moves", "cell_index", "cell_name", "empty_board", "legal_moves",
    "minimax_value", "other", "parse_move", "perfect_move", "play", "random_move", "render", "winner",
]

EMPTY = "."
Board = tuple[str, ...]
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
_MOVE = re.compile(r"<move>\s*([A-Ca-c])\s*([1-3])\s*</move>")


class IllegalMove(ValueError):
    """A move to an occupied cell, off the board, or after the game has ended."""


def empty_board() -> Board:
    return (EMPTY,) * 9


def other(mark: str) -> str:
    return "O" if mark == "X" else "X"


def cell_name(index: int) -> str:
    return "ABC"[index // 3] + str(index % 3 + 1)


def cell_index(name: str) -> int:
    """``"B2"`` -> 4; raises IllegalMove for a name that is not a cell."""
    name = name.strip().upper()
    if len(name) != 2 or name[0] not in "ABC" or name[1] not in "123":
        raise IllegalMove(f"{name!r} is not a cell; cells are A1..C3")
    return "ABC".index(name[0]) * 3 + int(name[1]) - 1


def parse_move(text: str) -> int | None:
    """The cell of the first ``<move>B2</move>`` tag in a reply, or None when there is none."""
    m = _MOVE.search(text or "")
    return None if m is None else cell_index(m.group(1) + m.group(2))


def winner(board: Board) -> str | None:
    """``"X"`` or ``"O"`` for three in a line, ``"draw"`` for a full board, else None (game on)."""
    for a, b, c in LINES:
        if board[a] != EMPTY and board[a] == board[b] == board[c]:
            return board[a]
    return "draw" if EMPTY not in board else None


def legal_moves(board: Board) -> list[int]:
    return [] if winner(board) else [i for i, c in enumerate(board) if c == EMPTY]


def play(board: Board, index: int, mark: str) -> Board:
    """The board after ``mark`` plays ``index``; IllegalMove if the cell is taken or the game is over."""
    if not 0 <= index < 9:
        raise IllegalMove(f"cell {index} is off the board")
    if winner(board):
        raise IllegalMove("the game is over")
    if board[index] != EMPTY:
        raise IllegalMove(f"{cell_name(index)} is taken by {board[index]}")
    return board[:index] + (mark,) + board[index + 1 :]


def render(board: Board) -> str:
    rows = [f"{'ABC'[r]} {' '.join(board[r * 3 : r * 3 + 3])}" for r in range(3)]
    return "\n".join(["  1 2 3", *rows])


@cache
def minimax_value(board: Board, to_move: str) -> int:
    """+1 if the player to move wins with perfect play from here, 0 for a draw, -1 for a loss."""
    result = winner(board)
    if result == "draw":
        return 0
    if result is not None:
        return 1 if result == to_move else -1
    return max(-minimax_value(play(board, i, to_move), other(to_move)) for i in legal_moves(board))


def best_moves(board: Board, to_move: str) -> list[int]:
    """Every move that keeps the best value for the player to move (perfect play)."""
    moves = legal_moves(board)
    values = {i: -minimax_value(play(board, i, to_move), other(to_move)) for i in moves}
    top = max(values.values())
    return [i for i in moves if values[i] == top]


def random_move(board: Board, rng: random.Random) -> int:
    return rng.choice(legal_moves(board))


def perfect_move(board: Board, to_move: str, rng: random.Random) -> int:
    """A minimax move (an immediate win first); other ties broken at random so that games vary."""
    moves = best_moves(board, to_move)
    wins = [i for i in moves if winner(play(board, i, to_move)) == to_move]
    return rng.choice(wins or moves)
