"""2048 rules: slides, merges (once per tile per move), invalid moves, spawns, wins; the greedy expert."""

from __future__ import annotations

import asyncio

import pytest

from examples.game_2048 import agent, game


@pytest.mark.parametrize("row, out, points", [
    ([2, 2, 2, 2], [4, 4, 0, 0], 8),      # two merges, not one 8
    ([2, 2, 4, 0], [4, 4, 0, 0], 4),      # a merged tile does not merge again
    ([4, 0, 4, 8], [8, 8, 0, 0], 8),      # slides over gaps
    ([0, 0, 0, 2], [2, 0, 0, 0], 0),
    ([2, 4, 8, 16], [2, 4, 8, 16], 0),
    ([8, 8, 8, 0], [16, 8, 0, 0], 16),    # the pair nearest the wall merges first
])  # fmt: skip
def test_slide_row(row, out, points):
    assert game.slide_row(row) == (out, points)


def test_slide_in_each_direction():
    b = (2, 0, 0, 2,
         0, 4, 0, 0,
         0, 4, 0, 0,
         0, 0, 0, 0)  # fmt: skip
    assert game.slide(b, "left")[0][:4] == (4, 0, 0, 0)
    assert game.slide(b, "right")[0][:4] == (0, 0, 0, 4)
    up, points = game.slide(b, "up")
    assert up[:8] == (2, 8, 0, 2, 0, 0, 0, 0) and points == 8
    down, _ = game.slide(b, "down")
    assert down[12:] == (2, 8, 0, 2)


def test_a_move_that_changes_nothing_is_invalid():
    b = (2, 4, 0, 0) + (0,) * 12
    with pytest.raises(game.InvalidMove, match="left moves no tile"):
        game.slide(b, "left")
    with pytest.raises(game.InvalidMove, match="not a direction"):
        game.slide(b, "sideways")
    assert set(game.valid_moves(b)) == {"right", "down"}


def test_game_spawns_one_tile_after_each_move_and_is_seeded():
    g = game.Game(seed=5)
    assert sum(1 for v in g.board if v) == 2
    before = sum(g.board)
    g.move(game.valid_moves(g.board)[0])
    assert sum(g.board) - before in (2, 4) and g.moves == 1  # merges keep the sum; the spawn adds 2 or 4
    assert game.Game(seed=5).board == game.Game(seed=5).board


def test_stuck_board_and_win():
    g = game.Game(seed=0, target=64)
    g.board = (2, 4, 2, 4, 4, 2, 4, 2, 2, 4, 2, 4, 4, 2, 4, 2)
    assert g.stuck and not g.won
    g.board = (64,) + (0,) * 15
    assert g.won and not g.stuck


def test_parse_move():
    assert game.parse_move("<move>Left</move>") == "left"
    assert game.parse_move("<move>diagonal</move>") is None
    assert game.parse_move("left") is None


def test_greedy_expert_wins_64_and_rewards_order_outcomes():
    trajs = [asyncio.run(agent.expert_trajectory(s, target=64, max_moves=120)) for s in range(20)]
    assert all(t.metrics["win"] for t in trajs)
    assert all(t.reward == agent.WIN_REWARD for t in trajs)
    t = trajs[0]
    assert len(t.histories()) == t.metrics["moves"]  # one history (a fresh board prompt) per move
    lost = game.Game(seed=0, target=64)
    lost.board = (32, 16) + (0,) * 14
    assert 0 < agent.reward_for(lost, invalid=False) < 1 < agent.WIN_REWARD
    assert agent.reward_for(lost, invalid=True) == agent.INVALID_REWARD < 0


def test_each_turn_lists_exactly_the_moves_that_change_the_board():
    t = asyncio.run(agent.expert_trajectory(4, target=64, max_moves=120))
    for history in t.histories():
        user, reply = history.messages()[1:]
        board = tuple(int(v) if v != "." else 0 for v in user["content"].split("\nMoves")[0].split())
        listed = user["content"].split("Moves that change the board: ")[1].rstrip(".").split(", ")
        changes = []
        for d in game.DIRECTIONS:
            try:
                game.slide(board, d)  # raises when d moves no tile
                changes.append(d)
            except game.InvalidMove:
                pass
        assert listed == changes and game.parse_move(reply["content"]) in listed
    assert agent.prompt((2, 2) + (0,) * 14) == game.render((2, 2) + (0,) * 14) + (
        "\nMoves that change the board: left, right, down.")


def test_invalid_reply_ends_the_game():
    async def choose(messages, board):
        return "up!"

    g, invalid, turns = asyncio.run(agent.play_game(choose, seed=1, target=64, max_moves=80))
    assert invalid and g.moves == 0 and len(turns) == 1


def test_keep_turns_samples_moves_and_keeps_the_last():
    t = asyncio.run(agent.expert_trajectory(2, target=64, max_moves=120))
    last = t.histories()[-1].messages()
    kept = agent.keep_turns(t.model_copy(deep=True), 4, seed=0)
    assert len(kept.histories()) == 4 and kept.histories()[-1].messages() == last
    assert kept.reward == t.reward
    assert len(agent.keep_turns(t.model_copy(deep=True), None, seed=0).histories()) == len(t.histories())


def test_random_legal_player_plays_only_moves_that_change_the_board_and_repeats_per_seed():
    async def games(seeds: range) -> list:
        return [await agent.random_trajectory(s, target=64, max_moves=60) for s in seeds]

    played = asyncio.run(games(range(40)))
    assert all(t.metrics["invalid"] == 0.0 and t.reward > agent.INVALID_REWARD for t in played)
    assert all(t.metrics["moves"] == len(t.histories()) for t in played)  # one history per (valid) move
    moves = [[game.parse_move(h.messages()[-1]["content"]) for h in t.histories()] for t in played]
    assert moves == [[game.parse_move(h.messages()[-1]["content"]) for h in t.histories()] for t in asyncio.run(games(range(40)))]
    assert {m for game_moves in moves for m in game_moves} == set(game.DIRECTIONS)


def test_baselines_on_the_held_out_games():
    from examples import train_common
    from examples.game_2048 import train

    seeds = train_common.held_out_seeds("test", 12)
    groups = asyncio.run(train.baselines({"target": 64, "max_moves": 60}, seeds))
    assert set(groups) == {"metrics"} and set(groups["metrics"]) == set(train.METRICS)
    rows = groups["metrics"]
    assert rows["score"]["teacher"]["mean"] >= rows["score"]["random_legal"]["mean"]
    assert rows["invalid_rate"]["random_legal"]["mean"] == rows["invalid_rate"]["teacher"]["mean"] == 0.0
