"""Codenames on a small board: a bundled word list, seeded boards, the rules, and scripted partners.

The bundled list sorts words into categories, and a category's name is the clue that points at its
words, so the game's "meaning" is checked in code: a clue is legal when it is one word that is not on
the board, and the scripted operative reads a clue as its category. A board has 9 words: 3 ours,
3 theirs, 2 neutral and 1 assassin. The spymaster (who sees the key) gives one clue and a number;
the operative guesses up to that many words, one at a time, and stops at the first word not ours.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

__all__ = [
    "CATEGORIES", "ROLES", "Board", "IllegalClue", "Turn", "best_clue", "deal", "parse_clue", "parse_guess",
    "scripted_guesses",
]

CATEGORIES: dict[str, tuple[str, ...]] = {
    "animal": ("dog", "tiger", "horse", "eagle", "shark", "rabbit"),
    "fruit": ("apple", "banana", "cherry", "grape", "lemon", "mango"),
    "vehicle": ("car", "truck", "bus", "train", "bicycle", "boat"),
    "music": ("piano", "guitar", "violin", "drum", "flute", "trumpet"),
    "weather": ("rain", "snow", "storm", "wind", "thunder", "fog"),
    "body": ("hand", "knee", "elbow", "shoulder", "ankle", "finger"),
    "kitchen": ("spoon", "fork", "pan", "kettle", "plate", "oven"),
    "sport": ("soccer", "tennis", "golf", "hockey", "boxing", "rugby"),
    "space": ("planet", "star", "moon", "comet", "rocket", "galaxy"),
    "clothing": ("shirt", "jacket", "sock", "hat", "scarf", "glove"),
    "tree": ("oak", "pine", "maple", "birch", "willow", "cedar"),
    "job": ("doctor", "teacher", "farmer", "pilot", "chef", "nurse"),
}
CATEGORY_OF = {w: c for c, words in CATEGORIES.items() for w in words}
ROLES = ("ours", "ours", "ours", "theirs", "theirs", "theirs", "neutral", "neutral", "assassin")
_CLUE = re.compile(r"<clue>\s*([A-Za-z]+)\s+([1-3])\s*</clue>")
_GUESS = re.compile(r"<guess>\s*([A-Za-z]+)\s*</guess>")


class IllegalClue(ValueError):
    """A clue that is not one word and a number 1-3, or that is a word on the board."""


@dataclass(frozen=True)
class Board:
    words: tuple[str, ...]
    roles: tuple[str, ...]  # one per word

    def role(self, word: str) -> str | None:
        return self.roles[self.words.index(word)] if word in self.words else None


def deal(seed: int) -> Board:
    """A board from 4 random categories, so that clues can cover 1-3 of our words."""
    rng = random.Random(seed)
    cats = rng.sample(sorted(CATEGORIES), 4)
    words = rng.sample([w for c in cats for w in CATEGORIES[c]], 9)
    roles = list(ROLES)
    rng.shuffle(roles)
    return Board(tuple(words), tuple(roles))


def parse_clue(text: str, board: Board) -> tuple[str, int]:
    """The clue word and number of ``<clue>animal 2</clue>``; IllegalClue if absent or a board word."""
    m = _CLUE.search(text or "")
    if m is None:
        raise IllegalClue(f"no <clue>WORD N</clue> in {text[:40]!r}")
    word = m.group(1).lower()
    if word in board.words:
        raise IllegalClue(f"{word!r} is on the board")
    return word, int(m.group(2))


def parse_guess(text: str) -> str | None:
    m = _GUESS.search(text or "")
    return None if m is None else m.group(1).lower()


def best_clue(board: Board) -> tuple[str, int]:
    """The scripted spymaster: the clue and number whose guesses by the scripted operative score the
    best margin (the assassin counts -3); ties go to a category holding one of our words, then to the
    smaller number."""
    best, best_key = None, None
    ours = {CATEGORY_OF[w] for w, r in zip(board.words, board.roles, strict=False) if r == "ours"}
    for cat in sorted(CATEGORIES):
        for number in (1, 2, 3):
            turn = Turn(board, cat, number)
            for word in scripted_guesses(board, cat, number):
                if turn.over:
                    break
                turn.guess(word)
            key = (-3 if turn.hit_assassin else turn.margin(), cat in ours, -number)
            if best_key is None or key > best_key:
                best, best_key = (cat, number), key
    assert best is not None
    return best


def scripted_guesses(board: Board, clue: str, number: int) -> list[str]:
    """The scripted operative: the board words in the clue's category, in board order, up to `number`."""
    return [w for w in board.words if CATEGORY_OF.get(w) == clue][:number]


@dataclass
class Turn:
    """One team turn: the clue, then guesses until a word not ours, the number, or a pass."""

    board: Board
    clue: str
    number: int
    guessed: list[str] = field(default_factory=list)
    over: bool = False

    def guess(self, word: str) -> str:
        """Reveal a word; returns its role (or "pass"). Raises ValueError for a word not on the board
        or already guessed."""
        if self.over:
            raise ValueError("the turn is over")
        if word == "pass":
            self.over = True
            return "pass"
        role = self.board.role(word)
        if role is None:
            raise ValueError(f"{word!r} is not on the board")
        if word in self.guessed:
            raise ValueError(f"{word!r} was already guessed")
        self.guessed.append(word)
        if role != "ours" or len(self.guessed) >= self.number:
            self.over = True
        return role

    def margin(self) -> int:
        roles = [self.board.role(w) for w in self.guessed]
        return roles.count("ours") - roles.count("theirs")

    @property
    def hit_assassin(self) -> bool:
        return any(self.board.role(w) == "assassin" for w in self.guessed)
