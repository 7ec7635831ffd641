"""2048 on a 4x4 board, with a lowered winning tile so a small model can win in dozens of moves.

The board is a tuple of 16 ints in reading order (0 for an empty cell). A move slides every tile
as far as it goes toward one side; two equal tiles that meet merge into one of twice the value,
and a merged tile does not merge again in the same move. A move that changes nothing is invalid.
After each valid move a 2 (nine times in ten) or a 4 appears on a random empty cell.
"""

from __future__ import annotations

import random
import re

__all__ = ["DIRECTIONS", "InvalidMove", "Game", "greedy_move", "parse_move", "render", "slide", "slide_row", "valid_moves"]

DIRECTIONS = ("left", "right", "up", "down")
Board = tuple[int, ...]
_MOVE = re.compile(r"<move>\s*(left|right|up|down)\s*</move>", re.I)


class InvalidMove(ValueError):
    """A move that would leave the board unchanged (or a direction that does not exist)."""


def slide_row(row: list[int]) -> tuple[list[int], int]:
    """Slide one row toward index 0 and merge; returns the new row and the points (sum of merged tiles)."""
    tiles = [v for v in row if v]
    out: list[int] = []
    points = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] * 2)
            points += tiles[i] * 2
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(row) - len(out)), points


def _lines(direction: str) -> list[list[int]]:
    """Cell indices of each line, ordered from the side the tiles slide toward."""
    rows = [[r * 4 + c for c in range(4)] for r in range(4)]
    cols = [[r * 4 + c for r in range(4)] for c in range(4)]
    return {"left": rows, "right": [r[::-1] for r in rows], "up": cols, "down": [c[::-1] for c in cols]}[direction]


def slide(board: Board, direction: str) -> tuple[Board, int]:
    """The board after sliding (no new tile) and the points; InvalidMove if nothing moves."""
    if direction not in DIRECTIONS:
        raise InvalidMove(f"{direction!r} is not a direction; use one of {', '.join(DIRECTIONS)}")
    cells = list(board)
    points = 0
    for line in _lines(direction):
        new, p = slide_row([board[i] for i in line])
        points += p
        for i, v in zip(line, new, strict=False):
            cells[i] = v
    out = tuple(cells)
    if out == board:
        raise InvalidMove(f"{direction} moves no tile")
    return out, points


def valid_moves(board: Board) -> list[str]:
    """The directions that change the board, in DIRECTIONS order."""
    out = []
    for d in DIRECTIONS:
        try:
            slide(board, d)
            out.append(d)
        except InvalidMove:
            pass
    return out


def parse_move(text: str) -> str | None:
    m = _MOVE.search(text or "")
    return None if m is None else m.group(1).lower()


def render(board: Board) -> str:
    return "\n".join(" ".join(str(v) if v else "." for v in board[r * 4 : r * 4 + 4]) for r in range(4))


class Game:
    """One seeded game: the board, the spawn dice, and the state of play."""

    def __init__(self, seed: int, target: int = 64) -> None:
        self.rng = random.Random(seed)
        self.target = target
        self.board: Board = (0,) * 16
        self.moves = 0
        self.score = 0
        self._spawn()
        self._spawn()

    def _spawn(self) -> None:
        empty = [i for i, v in enumerate(self.board) if v == 0]
        i = self.rng.choice(empty)
        v = 4 if self.rng.random() < 0.1 else 2
        self.board = self.board[:i] + (v,) + self.board[i + 1 :]

    def move(self, direction: str) -> None:
        """Play a move; InvalidMove (board unchanged) if it moves nothing."""
        self.board, points = slide(self.board, direction)
        self.score += points
        self.moves += 1
        self._spawn()

    @property
    def max_tile(self) -> int:
        return max(self.board)

    @property
    def won(self) -> bool:
        return self.max_tile >= self.target

    @property
    def stuck(self) -> bool:
        return not valid_moves(self.board)


def greedy_move(board: Board) -> str:
    """A one-ply heuristic: the valid move that leaves the most empty cells, then the most points,
    keeping big tiles in the bottom-left corner (down and left preferred)."""
    best, best_key = None, None
    for rank, d in enumerate(("down", "left", "right", "up")):
        try:
            after, points = slide(board, d)
        except InvalidMove:
            continue
        corner = after[12] == max(after)
        key = (corner, after.count(0) + (2 if points else 0), points, -rank)
        if best_key is None or key > best_key:
            best, best_key = d, key
    if best is None:
        raise InvalidMove("no move changes the board")
    return best
