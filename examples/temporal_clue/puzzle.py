"""Temporal Clue: small who/what/where/when deduction puzzles, a generator, and a solver.

A solution picks one option per field (a suspect, a weapon, a room, an hour). Clues are facts
about it: "it was not the rope", "it happened before 9 pm", "if it was in the library, it was
not Mustard", "it was Plum or it was in the hall". The solver enumerates every combination of
options and keeps those that satisfy all clues; a puzzle is valid when exactly one survives,
which the exhaustive enumeration proves. The generator adds clues true of a random solution
until the solver finds it unique, then drops every clue that is not needed.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass

__all__ = ["FIELDS", "OPTIONS", "Clue", "Puzzle", "generate", "parse_answer", "render_answer", "right", "score", "solve"]

FIELDS = ("who", "what", "where", "when")
OPTIONS: dict[str, tuple[str, ...]] = {
    "who": ("Plum", "Mustard", "Scarlet", "Green", "Peacock"),
    "what": ("rope", "knife", "candlestick", "wrench", "revolver"),
    "where": ("library", "kitchen", "hall", "study", "garden"),
    "when": ("7 pm", "8 pm", "9 pm", "10 pm", "11 pm"),
}
Solution = dict[str, str]


def _hour(option: str) -> int:
    return int(option.split()[0])


@dataclass(frozen=True)
class Clue:
    """One fact. kind: "not" (a != x), "before"/"after" (when < or > an hour), "if_not" (a=x -> b!=y),
    "or" (a=x or b=y)."""

    kind: str
    a: str
    x: str
    b: str = ""
    y: str = ""

    def holds(self, s: Solution) -> bool:
        if self.kind == "not":
            return s[self.a] != self.x
        if self.kind == "before":
            return _hour(s["when"]) < _hour(self.x)
        if self.kind == "after":
            return _hour(s["when"]) > _hour(self.x)
        if self.kind == "if_not":
            return s[self.a] != self.x or s[self.b] != self.y
        if self.kind == "or":
            return s[self.a] == self.x or s[self.b] == self.y
        raise ValueError(f"unknown clue kind {self.kind!r}")

    def text(self) -> str:
        say = {"who": "it was {}", "what": "it was done with the {}", "where": "it happened in the {}",
               "when": "it happened at {}"}
        neg = {"who": "it was not {}", "what": "it was not done with the {}", "where": "it did not happen in the {}",
               "when": "it did not happen at {}"}
        if self.kind == "not":
            return "I" + neg[self.a].format(self.x)[1:] + "."
        if self.kind in ("before", "after"):
            return f"It happened {self.kind} {self.x}."
        if self.kind == "if_not":
            return f"If {say[self.a].format(self.x)}, then {neg[self.b].format(self.y)}."
        return f"Either {say[self.a].format(self.x)}, or {say[self.b].format(self.y)}."


@dataclass(frozen=True)
class Puzzle:
    options: dict[str, tuple[str, ...]]
    clues: tuple[Clue, ...]
    solution: tuple[tuple[str, str], ...]

    def answer(self) -> Solution:
        return dict(self.solution)

    def text(self) -> str:
        lines = [f"{f}: {', '.join(self.options[f])}" for f in FIELDS]
        return "Options\n" + "\n".join(lines) + "\nClues\n" + "\n".join(f"- {c.text()}" for c in self.clues)


def solve(options: dict[str, tuple[str, ...]], clues: tuple[Clue, ...] | list[Clue]) -> list[Solution]:
    """Every combination of options that satisfies all clues (exhaustive, so an answer of length one
    proves the puzzle has exactly one solution)."""
    out = []
    for combo in itertools.product(*(options[f] for f in FIELDS)):
        s = dict(zip(FIELDS, combo, strict=False))
        if all(c.holds(s) for c in clues):
            out.append(s)
    return out


def _random_true_clue(rng: random.Random, options: dict[str, tuple[str, ...]], s: Solution) -> Clue:
    while True:
        kind = rng.choice(["not", "not", "not", "time", "if_not", "or"])
        a, b = rng.sample(FIELDS, 2)
        if kind == "not":
            clue = Clue("not", a, rng.choice([o for o in options[a] if o != s[a]]))
        elif kind == "time":
            hours = options["when"]
            clue = Clue(rng.choice(["before", "after"]), "when", rng.choice(hours))
        elif kind == "if_not":
            clue = Clue("if_not", a, rng.choice(options[a]), b, rng.choice(options[b]))
        else:
            clue = Clue("or", a, rng.choice(options[a]), b, rng.choice(options[b]))
        if clue.holds(s) and (kind != "or" or s[a] != clue.x or s[b] != clue.y):
            return clue


def generate(seed: int, size: int = 3) -> Puzzle:
    """A puzzle with `size` options per field, exactly one solution, and no clue it could do without."""
    rng = random.Random(seed)
    options = {f: tuple(rng.sample(OPTIONS[f], size)) for f in FIELDS}
    options["when"] = tuple(sorted(options["when"], key=_hour))
    s = {f: rng.choice(options[f]) for f in FIELDS}
    clues: list[Clue] = []
    while len(solve(options, clues)) > 1:
        clue = _random_true_clue(rng, options, s)
        if clue not in clues and len(solve(options, [*clues, clue])) < len(solve(options, clues)):
            clues.append(clue)
    for clue in list(clues):  # drop clues the others make redundant
        rest = [c for c in clues if c != clue]
        if len(solve(options, rest)) == 1:
            clues = rest
    rng.shuffle(clues)
    assert solve(options, clues) == [s]
    return Puzzle(options=options, clues=tuple(clues), solution=tuple(s.items()))


_TAG = {f: re.compile(rf"<{f}>\s*(.*?)\s*</{f}>", re.S | re.I) for f in FIELDS}


def parse_answer(text: str) -> dict[str, str]:
    """The fields tagged in a reply (``<who>Plum</who>`` ...); missing fields are absent."""
    out = {}
    for f, pattern in _TAG.items():
        m = pattern.search(text or "")
        if m:
            out[f] = m.group(1).strip()
    return out


def render_answer(s: Solution) -> str:
    return "".join(f"<{f}>{s[f]}</{f}>" for f in FIELDS)


def right(answer: dict[str, str], solution: Solution, field: str) -> bool:
    """Whether the answer names the solution's option for `field` (case and spacing ignored)."""
    return " ".join(answer.get(field, "").lower().split()) == " ".join(solution[field].lower().split())


def score(answer: dict[str, str], solution: Solution) -> float:
    """The fraction of the four fields right."""
    return sum(right(answer, solution, f) for f in FIELDS) / len(FIELDS)
