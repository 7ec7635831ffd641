"""Codenames rules: the deal, legal clues, guessing until a miss, scripted partners, the rewards."""

from __future__ import annotations

import asyncio
import collections

import pytest

from examples.codenames import agent, game


def test_deal_is_seeded_with_the_right_roles():
    b = game.deal(3)
    assert b == game.deal(3) and b != game.deal(4)
    assert len(set(b.words)) == 9
    assert collections.Counter(b.roles) == {"ours": 3, "theirs": 3, "neutral": 2, "assassin": 1}
    assert all(w in game.CATEGORY_OF for w in b.words)


def test_clue_legality():
    b = game.deal(0)
    assert game.parse_clue("<clue>Animal 2</clue>", b) == ("animal", 2)
    with pytest.raises(game.IllegalClue, match="is on the board"):
        game.parse_clue(f"<clue>{b.words[0]} 1</clue>", b)
    for bad in ("<clue>animal</clue>", "<clue>big cat 1</clue>", "<clue>animal 7</clue>", "animal 2"):
        with pytest.raises(game.IllegalClue, match="no <clue>"):
            game.parse_clue(bad, b)


def board_of(**roles: str) -> game.Board:
    return game.Board(tuple(roles), tuple(roles.values()))


def test_turn_stops_at_a_miss_or_the_number_and_counts_the_margin():
    b = board_of(dog="ours", tiger="ours", horse="theirs", apple="ours", lemon="neutral", car="assassin",
                 bus="theirs", pan="theirs", fog="neutral")
    t = game.Turn(b, "animal", 3)
    assert t.guess("dog") == "ours" and not t.over
    assert t.guess("horse") == "theirs" and t.over
    assert t.margin() == 0
    with pytest.raises(ValueError, match="over"):
        t.guess("tiger")
    t = game.Turn(b, "animal", 2)
    t.guess("dog")
    with pytest.raises(ValueError, match="already guessed"):
        t.guess("dog")
    with pytest.raises(ValueError, match="not on the board"):
        t.guess("zebra")
    assert t.guess("tiger") == "ours" and t.over and t.margin() == 2
    t = game.Turn(b, "vehicle", 1)
    t.guess("car")
    assert t.hit_assassin and t.over


def test_scripted_spymaster_picks_the_best_clue_for_the_scripted_operative():
    b = board_of(dog="ours", tiger="neutral", horse="theirs", apple="ours", lemon="ours", car="assassin",
                 bus="theirs", pan="ours", fog="neutral")
    # animal 2 stops at tiger (margin 1); fruit 2 finds apple and lemon (margin 2)
    assert game.best_clue(b) == ("fruit", 2)
    assert game.scripted_guesses(b, "fruit", 2) == ["apple", "lemon"]
    margins = []
    for seed in range(200):
        b = game.deal(seed)
        clue, n = game.best_clue(b)
        out = asyncio.run(agent.play(b, reply(f"<clue>{clue} {n}</clue>"), agent._scripted_operative(b)))
        assert not out["assassin"]
        margins.append(out["margin"])
    assert 0.8 < sum(margins) / len(margins) < 2  # about one word a turn: the boards are not trivial


def test_expert_game_gives_one_trajectory_per_role():
    spy, ops = asyncio.run(agent.expert_game(1))
    assert spy.metadata["role"] == "spymaster" and ops.metadata["role"] == "operative"
    assert spy.reward == ops.reward == spy.metrics["margin"] / 3 > 0
    assert [m["role"] for m in spy.messages()] == ["system", "user", "assistant"]
    assert game.parse_clue(spy.messages()[-1]["content"], game.deal(1))


def reply(*texts: str):
    it = iter(texts)

    async def f(messages):
        return next(it)

    return f


def test_illegal_clue_is_the_spymasters_penalty_and_ends_the_game():
    b = game.deal(2)
    out = asyncio.run(agent.play(b, reply(f"<clue>{b.words[0]} 2</clue>"), reply()))
    assert out["illegal_clue"] and out["spymaster_reward"] == agent.PENALTY and out["operative"] is None


def test_assassin_and_invalid_guesses_are_penalised():
    b = board_of(dog="ours", tiger="ours", horse="theirs", apple="ours", lemon="neutral", car="assassin",
                 bus="theirs", pan="theirs", fog="neutral")
    out = asyncio.run(agent.play(b, reply("<clue>vehicle 1</clue>"), reply("<guess>car</guess>")))
    assert out["assassin"] and out["spymaster_reward"] == out["operative_reward"] == agent.PENALTY
    out = asyncio.run(agent.play(b, reply("<clue>animal 2</clue>"), reply("<guess>dog</guess>", "tiger?")))
    assert out["invalid_guess"] and out["operative_reward"] == agent.PENALTY
    assert out["spymaster_reward"] == pytest.approx(1 / 3)  # the spymaster keeps the margin so far
    out = asyncio.run(agent.play(b, reply("<clue>animal 2</clue>"), reply("<guess>dog</guess>", "<guess>pass</guess>")))
    assert not out["invalid_guess"] and out["operative_reward"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("role", ["spymaster", "operative"])
def test_random_legal_player_gives_only_legal_clues_and_guesses_and_repeats_per_seed(role):
    async def games(seeds: range) -> list:
        return [await agent.scripted_role(s, role, "random_legal") for s in seeds]

    played = asyncio.run(games(range(200)))
    assert all(t.metrics["illegal_clue"] == 0.0 and t.metrics["invalid_guess"] == 0.0 for t in played)
    assert all(t.metadata["role"] == role for t in played)
    again = asyncio.run(games(range(20)))
    assert [t.messages() for t in again] == [t.messages() for t in played[:20]]
    if role == "spymaster":
        clues = collections.Counter(t.metadata["clue"] for t in played)
        assert len(clues) > 20 and all(c.split()[0] in game.CATEGORIES for c in clues)
    else:
        assert sum(t.metrics["assassin"] for t in played) > 0  # it guesses blind, unlike the scripted operative
        assert any(t.messages()[-1]["content"] == "<guess>pass</guess>" for t in played)


def test_teacher_in_either_role_is_the_scripted_game():
    for seed in range(5):
        expert = asyncio.run(agent.expert_game(seed))
        for t in expert:
            role = t.metadata["role"]
            assert asyncio.run(agent.scripted_role(seed, role, "teacher")).messages() == t.messages()


def test_baselines_on_the_held_out_boards():
    from examples import train_common
    from examples.codenames import train

    seeds = train_common.held_out_seeds("test", 20)
    groups = asyncio.run(train.baselines({}, seeds))
    assert set(groups) == {"both_roles", "spymaster", "operative"}
    assert set(groups["both_roles"]) == {"score"} and set(groups["spymaster"]) == set(train.METRICS)
    for table in groups.values():
        assert table["score"]["teacher"]["mean"] >= table["score"]["random_legal"]["mean"]
    spy, ops = groups["spymaster"]["score"]["random_legal"]["mean"], groups["operative"]["score"]["random_legal"]["mean"]
    assert groups["both_roles"]["score"]["random_legal"]["mean"] == pytest.approx((spy + ops) / 2)
