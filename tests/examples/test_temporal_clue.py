"""Temporal Clue: clue semantics, the solver's uniqueness proof, the generator's minimal puzzles."""

from __future__ import annotations

import pytest

from examples.temporal_clue import agent, puzzle
from examples.temporal_clue.puzzle import Clue

S = {"who": "Plum", "what": "rope", "where": "hall", "when": "9 pm"}


@pytest.mark.parametrize("clue, holds", [
    (Clue("not", "who", "Plum"), False), (Clue("not", "who", "Green"), True),
    (Clue("before", "when", "10 pm"), True), (Clue("before", "when", "9 pm"), False),
    (Clue("after", "when", "8 pm"), True), (Clue("after", "when", "9 pm"), False),
    (Clue("if_not", "where", "hall", "who", "Plum"), False), (Clue("if_not", "where", "study", "who", "Plum"), True),
    (Clue("or", "who", "Green", "what", "rope"), True), (Clue("or", "who", "Green", "what", "knife"), False),
])  # fmt: skip
def test_clue_semantics(clue, holds):
    assert clue.holds(S) is holds


def test_solver_enumerates_every_combination():
    options = {"who": ("Plum", "Green"), "what": ("rope", "knife"), "where": ("hall",), "when": ("8 pm", "9 pm")}
    assert len(puzzle.solve(options, [])) == 8
    clues = [Clue("not", "who", "Green"), Clue("after", "when", "8 pm"), Clue("or", "who", "Green", "what", "rope")]
    assert puzzle.solve(options, clues) == [S]


@pytest.mark.parametrize("size", [3, 4])
def test_generated_puzzles_have_one_solution_and_no_spare_clue(size):
    for seed in range(25):
        p = puzzle.generate(seed, size)
        assert puzzle.solve(p.options, p.clues) == [p.answer()]  # exhaustive: exactly one solution
        for i in range(len(p.clues)):  # every clue is needed
            rest = p.clues[:i] + p.clues[i + 1 :]
            assert len(puzzle.solve(p.options, rest)) > 1
        assert all(len(p.options[f]) == size for f in puzzle.FIELDS)


def test_generation_is_seeded_and_varied():
    assert puzzle.generate(7) == puzzle.generate(7)
    assert len({puzzle.generate(s).solution for s in range(30)}) > 20


def test_puzzle_text_lists_options_and_clues():
    p = puzzle.generate(0)
    text = p.text()
    assert all(o in text for f in puzzle.FIELDS for o in p.options[f])
    assert all(c.text() in text for c in p.clues)
    assert "It was not plum" not in text  # names keep their capital


def test_answer_parsing_and_partial_credit():
    text = "<who>plum</who> <what> rope </what><where>study</where>"
    answer = puzzle.parse_answer(text)
    assert answer == {"who": "plum", "what": "rope", "where": "study"}
    assert puzzle.score(answer, S) == 0.5  # who and what right; where wrong; when missing
    assert puzzle.score(puzzle.parse_answer(puzzle.render_answer(S)), S) == 1.0
    assert puzzle.score({}, S) == 0.0


def test_expert_trajectory_is_the_solvers_answer():
    t = agent.expert_trajectory(11)
    assert t.reward == 1.0 and t.metrics["solved"] == 1.0
    assert [m["role"] for m in t.messages()] == ["system", "user", "assistant"]


def test_random_legal_answer_names_an_option_for_every_field_and_repeats_per_seed():
    played = [agent.random_trajectory(s) for s in range(60)]
    for s, t in zip(range(60), played, strict=True):
        answer = puzzle.parse_answer(t.messages()[-1]["content"])
        options = puzzle.generate(s).options
        assert all(answer[f] in options[f] for f in puzzle.FIELDS)
    assert all(t.metrics["formatted"] == 1.0 for t in played)
    assert [t.messages() for t in played[:10]] == [agent.random_trajectory(s).messages() for s in range(10)]
    assert 0.2 < sum(t.reward for t in played) / 60 < 0.5  # a third of the fields right, by chance


def test_baselines_on_the_held_out_puzzles():
    import asyncio

    from examples import train_common
    from examples.temporal_clue import train

    seeds = train_common.held_out_seeds("test", 20)
    groups = asyncio.run(train.baselines({"size": 3}, seeds))
    assert set(groups) == {"metrics"} and set(groups["metrics"]) == set(train.METRICS)
    rows = groups["metrics"]
    assert rows["score"]["teacher"] == {"mean": 1.0, "ci": [1.0, 1.0]}
    assert rows["score"]["teacher"]["mean"] >= rows["score"]["random_legal"]["mean"]
