"""ART-E's reward: checked in code against the generated question's known answer and sources.

The shape follows OpenPipe's ART-E:

| outcome                                   | reward                                   |
|-------------------------------------------|------------------------------------------|
| correct answer                            | 1 + 0.1 x source overlap + 0.1 x turns left |
| no answer ("I don't know", out of turns)  | 0 + partial credit                       |
| wrong answer                              | -1 + partial credit                      |
| format error (no tool call, unknown tool, arguments not JSON) | -2                   |

Partial credit is 0.1 for a search that listed a source email and 0.1 for reading one. So a correct
answer (>= 1) beats giving up (<= 0.2), which beats a wrong answer (<= -0.8), which beats a format
error (-2): guessing never pays, and the agent learns to look before it answers.

`wrong` sets the wrong answer's base reward for RL (`--rl-wrong-reward`). At -1, an agent whose answers
are right less than half the time earns more by giving up, so RL on a weak agent can teach it to stop
answering; a milder one (any value between -2 and -0.2) still keeps every wrong answer below every
no-answer and above a format error.

An answer is correct when it states the known value (dates in any common form, amounts to the
cent, other values as words) and no distractor value (the meeting's first date, the old seat):
an answer that hedges between the two is wrong.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Literal

from .inbox import AnswerKind, Question

__all__ = ["Grade", "Outcome", "check_wrong", "grade", "mentions", "score"]

Grade = Literal["correct", "wrong", "none"]

CORRECT, NONE, WRONG, FORMAT_ERROR = 1.0, 0.0, -1.0, -2.0
PARTIAL = 0.1
MAX_ANSWER_CHARS = 200  # a longer "answer" is a dump of the inbox, not an answer
NO_ANSWER = re.compile(
    r"\b(i\s*don'?t\s*know|unknown|not\s+(?:found|sure|mentioned)|cannot\s+find|no\s+information)\b"
)
MONTHS = {m.lower(): i for i, m in enumerate(
    "January February March April May June July August September October November December".split(), 1)}  # fmt: skip
MONTH_WORD = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"


@dataclass
class Outcome:
    """What one rollout did, as the rollout loop saw it."""

    answer: str | None = None  # None: never called return_final_answer
    sources: list[str] = field(default_factory=list)
    format_error: str | None = None  # why the rollout could not be read, if it could not
    turns: int = 0
    found: set[str] = field(default_factory=set)  # email ids listed by a search
    read: set[str] = field(default_factory=set)  # email ids read


def _month(word: str) -> int:
    word = word.lower()
    return next(i for name, i in MONTHS.items() if name.startswith(word[:3]))


def dates_in(text: str) -> set[tuple[int, int]]:
    """(month, day) pairs written in the text: 2025-03-14, March 14, 14 March, Mar 14th, 3/14."""
    t = text.lower()
    found = {(int(m), int(d)) for m, d in re.findall(r"\b\d{4}-(\d{1,2})-(\d{1,2})\b", t)}
    found |= {
        (_month(m), int(d)) for m, d in re.findall(MONTH_WORD + r"\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b", t)
    }
    found |= {
        (_month(m), int(d))
        for d, m in re.findall(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + MONTH_WORD, t)
    }
    found |= {(int(m), int(d)) for m, d in re.findall(r"(?<![\d-])(\d{1,2})/(\d{1,2})(?![\d-])", t)}
    return {(m, d) for m, d in found if 1 <= m <= 12 and 1 <= d <= 31}


def amounts_in(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", text)]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def mentions(text: str, value: str, kind: AnswerKind) -> bool:
    """Whether `text` states `value` (a date, an amount, or a phrase, per `kind`)."""
    if kind == "date":
        d = dt.date.fromisoformat(value)
        return (d.month, d.day) in dates_in(text)
    if kind == "amount":
        return any(abs(x - float(value)) < 0.005 for x in amounts_in(text))
    want = words(value)
    if want and want[0] == "the":  # "the Birch room" may be written "Birch room"
        want = want[1:]
    have = words(text)
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


def grade(answer: str | None, question: Question) -> Grade:
    """'correct', 'wrong', or 'none' (no answer, or one that says it does not know)."""
    if answer is None or not answer.strip() or NO_ANSWER.search(answer.lower()):
        return "none"
    if len(answer) > MAX_ANSWER_CHARS:
        return "wrong"
    if not mentions(answer, question.answer, question.kind):
        return "wrong"
    if any(mentions(answer, d, question.kind) for d in question.distractors):
        return "wrong"  # hedged between the right value and a wrong one
    return "correct"


def check_wrong(wrong: float) -> float:
    """`wrong` if a wrong answer with full partial credit still scores below any no-answer and above
    a format error; otherwise a ValueError naming the range."""
    if not FORMAT_ERROR < wrong < NONE - 2 * PARTIAL:
        raise ValueError(f"the wrong answer's reward must lie between {FORMAT_ERROR} and {NONE - 2 * PARTIAL} "
                         f"(exclusive), so that it stays below giving up and above a format error; got {wrong}")  # fmt: skip
    return wrong


def score(
    outcome: Outcome, question: Question, *, max_turns: int, wrong: float = WRONG
) -> tuple[float, dict[str, float]]:
    """The reward and its parts (logged as trajectory metrics); `wrong`: see the module's docstring."""
    check_wrong(wrong)
    gold = set(question.sources)
    found, read = bool(gold & outcome.found), bool(gold & outcome.read)
    cited = set(outcome.sources)
    overlap = len(cited & gold) / len(cited | gold) if cited | gold else 0.0
    g = grade(outcome.answer, question)
    parts = {
        "correct": float(g == "correct" and outcome.format_error is None),
        "answered": float(g != "none"),
        "format_error": float(outcome.format_error is not None),
        "found_source": float(found),
        "read_source": float(read),
        "source_overlap": overlap,
        "turns": float(outcome.turns),
    }
    if outcome.format_error is not None:
        return FORMAT_ERROR, parts
    partial = PARTIAL * found + PARTIAL * read
    if g == "correct":
        turns_left = max(0.0, 1.0 - outcome.turns / max_turns)
        return CORRECT + PARTIAL * overlap + PARTIAL * turns_left, parts
    if g == "none":
        return NONE + partial, parts
    return wrong + partial, parts
