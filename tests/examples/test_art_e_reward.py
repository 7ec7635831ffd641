"""ART-E's reward: the grade of an answer, and the ordering correct > no answer > wrong > format error."""

from __future__ import annotations

import pytest

from examples.art_e.inbox import Question
from examples.art_e.reward import FORMAT_ERROR, Outcome, dates_in, grade, score

DATE_Q = Question("q1", "inbox-1", "When?", "2025-03-17", "date", ("a", "b"), distractors=("2025-03-14",))
AMOUNT_Q = Question("q2", "inbox-1", "How much?", "1046.88", "amount", ("c", "d", "e"))
TEXT_Q = Question("q3", "inbox-1", "Where?", "the Birch room", "text", ("f",))


@pytest.mark.parametrize("answer", ["2025-03-17", "March 17", "Mon, Mar 17th", "17 March 2025", "on 3/17"])
def test_dates_in_any_common_form_are_correct(answer):
    assert grade(answer, DATE_Q) == "correct"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("March 14", "wrong"),  # the first date, before the meeting moved
        ("March 14 or March 17", "wrong"),  # a hedge names a distractor
        ("I don't know", "none"),
        ("", "none"),
        (None, "none"),
        ("2025-03-17 " + "x" * 300, "wrong"),  # a dump, not an answer
    ],
)
def test_wrong_hedged_and_missing_answers(answer, expected):
    assert grade(answer, DATE_Q) == expected


def test_amounts_and_phrases():
    assert grade("$1,046.88", AMOUNT_Q) == "correct"
    assert grade("1046.9", AMOUNT_Q) == "wrong"
    assert grade("Birch room", TEXT_Q) == "correct" and grade("The Birch Room.", TEXT_Q) == "correct"
    assert grade("the Cedar room", TEXT_Q) == "wrong"
    assert dates_in("due 2025-06-02, moved from June 1st") == {(6, 2), (6, 1)}


def reward(q, **kw):
    return score(Outcome(**kw), q, max_turns=8)[0]


def test_reward_ordering_holds_at_the_edges():
    # worst correct: no source overlap, every turn used
    worst_correct = reward(DATE_Q, answer="2025-03-17", sources=["zzz"], turns=8)
    best_correct = reward(DATE_Q, answer="2025-03-17", sources=["a", "b"], turns=2, found={"a"}, read={"a"})
    # best no-answer and best wrong answer: found and read the right email
    best_none = reward(DATE_Q, answer="I don't know", found={"a"}, read={"b"}, turns=8)
    out_of_turns = reward(DATE_Q, answer=None, found={"a"}, turns=8)
    best_wrong = reward(DATE_Q, answer="March 14", sources=["a"], found={"a"}, read={"a"}, turns=3)
    worst_wrong = reward(DATE_Q, answer="March 14", turns=3)
    fmt = reward(
        DATE_Q, answer="2025-03-17", format_error="a reply without a tool call", found={"a"}, read={"a"}
    )
    assert best_correct > worst_correct >= 1.0
    assert worst_correct > best_none >= out_of_turns > best_wrong >= worst_wrong > fmt == FORMAT_ERROR
    assert best_none == pytest.approx(0.2) and best_wrong == pytest.approx(-0.8)
    # the bonuses, worked by hand: 1 + 0.1 x overlap(|{a,b}|/|{a,b}|) + 0.1 x (1 - 2/8) = 1.175
    assert best_correct == pytest.approx(1.175)
    assert reward(DATE_Q, answer="2025-03-17", sources=["a"], turns=4) == pytest.approx(1 + 0.05 + 0.05)


def test_parts_are_reported():
    _, parts = score(Outcome(answer="2025-03-17", sources=["a"], found={"a"}, turns=3), DATE_Q, max_turns=8)
    assert parts["correct"] == 1.0 and parts["found_source"] == 1.0 and parts["read_source"] == 0.0
    assert parts["source_overlap"] == pytest.approx(0.5) and parts["turns"] == 3.0
    _, parts = score(Outcome(answer="2025-03-17", format_error="x"), DATE_Q, max_turns=8)
    assert parts["correct"] == 0.0 and parts["format_error"] == 1.0


def test_a_milder_wrong_answer_penalty_keeps_the_ordering_and_bad_values_are_refused():
    best_none = score(Outcome(answer="I don't know", found={"a"}, read={"b"}, turns=8), DATE_Q, max_turns=8)[0]
    gave_up = score(Outcome(answer=None, turns=8), DATE_Q, max_turns=8, wrong=-0.3)[0]
    best_wrong = score(Outcome(answer="March 14", found={"a"}, read={"a"}, turns=3), DATE_Q, max_turns=8, wrong=-0.3)
    assert best_wrong[0] == pytest.approx(-0.1) and best_wrong[1]["answered"] == 1.0
    assert best_none > gave_up > best_wrong[0] > FORMAT_ERROR
    # the default is ART-E's -1; correct answers and no-answers do not depend on `wrong`
    assert score(Outcome(answer="March 14", turns=3), DATE_Q, max_turns=8)[0] == -1.0
    assert reward(DATE_Q, answer="2025-03-17", sources=["a"], turns=4) == score(
        Outcome(answer="2025-03-17", sources=["a"], turns=4), DATE_Q, max_turns=8, wrong=-0.5
    )[0]
    for bad in (-0.2, 0.0, 0.5, -2.0, -3.0):
        with pytest.raises(ValueError, match="between -2.0 and -0.2"):
            score(Outcome(answer="March 14"), DATE_Q, max_turns=8, wrong=bad)
