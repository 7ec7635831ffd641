"""Tic Tac Toe rules, the minimax player, and the one-move-per-turn game loop."""

from __future__ import annotations

import asyncio
import random

import pytest

from examples.tictactoe import agent, game


def board(rows: str) -> tuple[str, ...]:
    cells = tuple(rows.replace(" ", "").replace("\n", ""))
    assert len(cells) == 9
    return cells


def test_cell_names_round_trip():
    assert [game.cell_name(i) for i in (0, 4, 8)] == ["A1", "B2", "C3"]
    assert all(game.cell_index(game.cell_name(i)) == i for i in range(9))
    with pytest.raises(game.IllegalMove, match="not a cell"):
        game.cell_index("D4")


@pytest.mark.parametrize("text, cell", [
    ("<move>B2</move>", 4), ("I think <move> c3 </move> wins", 8), ("<move>A1</move><move>C3</move>", 0),
    ("B2", None), ("<move>D1</move>", None), ("<move>B4</move>", None), ("", None),
])  # fmt: skip
def test_parse_move(text, cell):
    assert game.parse_move(text) == cell


def test_winner_rows_columns_diagonals_and_draw():
    assert game.winner(board("XXX ... OO.")) == "X"
    assert game.winner(board("OX. OX. O.X")) == "O"
    assert game.winner(board("X.O .XO ..X")) == "X"
    assert game.winner(board("..O .O. O.X")) == "O"
    assert game.winner(board("XOX XOO OXX")) == "draw"
    assert game.winner(board("XO. ... ...")) is None


def test_illegal_moves_raise_and_leave_the_board():
    b = game.play(game.empty_board(), 4, "X")
    with pytest.raises(game.IllegalMove, match="B2 is taken by X"):
        game.play(b, 4, "O")
    with pytest.raises(game.IllegalMove, match="off the board"):
        game.play(b, 9, "O")
    with pytest.raises(game.IllegalMove, match="over"):
        game.play(board("XXX OO. ..."), 8, "O")
    assert b == board("... .X. ...")


def test_minimax_values_and_moves():
    assert game.minimax_value(game.empty_board(), "X") == 0  # perfect play draws
    assert game.best_moves(board("XX. OO. ..."), "X") == [2]  # take the win
    assert game.best_moves(board("OO. X.. ..X"), "X") == [2]  # block the only threat
    assert game.minimax_value(board("XX. OO. ..."), "O") == 1  # O to move wins at once
    rng = random.Random(0)
    assert game.perfect_move(board("XX. OO. X.."), "O", rng) == 5  # an immediate win over a slower one


def test_perfect_player_never_loses():
    async def games(opponent: str) -> list:
        return [await agent.expert_trajectory(s, opponent) for s in range(150)]

    vs_random = asyncio.run(games("random"))
    vs_minimax = asyncio.run(games("minimax"))
    assert not any(t.metadata["outcome"] in ("loss", "illegal") for t in vs_random)
    assert sum(t.metadata["outcome"] == "win" for t in vs_random) > 100
    assert all(t.metadata["outcome"] == "draw" for t in vs_minimax)
    assert {t.metadata["mark"] for t in vs_random} == {"X", "O"}


def test_expert_game_is_a_chat_of_board_and_move_turns():
    t = asyncio.run(agent.expert_trajectory(3))
    roles = [m["role"] for m in t.messages()]
    assert roles[:3] == ["system", "user", "assistant"] and roles.count("assistant") == t.metrics["moves"]
    assert all(game.parse_move(m["content"]) is not None for m in t.messages() if m["role"] == "assistant")
    assert t.reward == agent.reward_for(t.metadata["outcome"])


def test_each_turn_lists_exactly_the_free_cells():
    t = asyncio.run(agent.expert_trajectory(5))
    msgs = t.messages()
    for i, m in enumerate(msgs):
        if m["role"] != "user":
            continue
        grid = m["content"].split("  1 2 3\n")[1].split("\n")[:3]
        cells = "".join(row[2:].replace(" ", "") for row in grid)
        free = m["content"].split("Free cells: ")[1].split(".\n")[0].split(", ")
        assert free == [game.cell_name(j) for j, c in enumerate(cells) if c == "."]
        assert game.cell_name(game.parse_move(msgs[i + 1]["content"])) in free  # the expert's move is one of them
    assert agent.prompt(board("XOX OXO OX.")) == game.render(board("XOX OXO OX.")) + (
        "\nFree cells: C3.\nYour move.")


@pytest.mark.parametrize("replies, outcome", [(["B2 please"], "illegal"), (["<move>B2</move>"] * 2, "illegal")])
def test_unparsable_or_taken_cell_ends_the_game_with_the_penalty(replies, outcome):
    it = iter(replies)

    async def choose(messages, b, mark):
        return next(it)

    seed = next(s for s in range(100) if agent.side_for(s) == "X")  # X: B2 is free on the first move
    messages, result = asyncio.run(agent.play_game(choose, seed))
    assert result["outcome"] == outcome and result["moves"] == len(replies)
    assert agent.reward_for(outcome) == agent.ILLEGAL_REWARD < 0
    assert messages[-1] == {"role": "assistant", "content": replies[-1]}


def test_rewards():
    assert [agent.reward_for(o) for o in ("win", "draw", "loss", "illegal")] == [1.0, 0.5, 0.0, -1.0]


def test_balanced_seeds_show_the_centre_opening_to_a_third_of_the_o_games():
    from examples import train_common

    band = train_common.sft_seeds(0, 10_000)
    seeds = agent.balanced_seeds(band, 120)
    assert len(set(seeds)) == 120 and set(seeds) <= set(band)
    as_o = [s for s in seeds if agent.side_for(s) == "O"]
    assert len(as_o) == 60
    assert sum(agent.opening(s) == 4 for s in as_o) == 20  # B2, 1 in 9 of plain random openings
    # the opening really is the game's: the expert game as O starts with X on that cell
    first = asyncio.run(agent.expert_trajectory(as_o[0])).messages()[1]["content"]
    assert game.render(game.play(game.empty_board(), agent.opening(as_o[0]), "X")) in first
    with pytest.raises(ValueError, match="more candidates"):
        agent.balanced_seeds(range(10), 10)


def test_random_legal_player_plays_only_free_cells_and_repeats_per_seed():
    async def games(opponent: str, seeds: range) -> list:
        return [await agent.random_trajectory(s, opponent) for s in seeds]

    played = asyncio.run(games("random", range(300))) + asyncio.run(games("minimax", range(50)))
    assert not any(t.metadata["outcome"] == "illegal" for t in played)  # a taken cell would end the game "illegal"
    assert {t.metadata["outcome"] for t in played[:300]} == {"win", "draw", "loss"}
    again = asyncio.run(games("random", range(20)))
    assert [t.messages() for t in again] == [t.messages() for t in played[:20]]
    firsts = {t.messages()[2]["content"] for t in played[:300] if t.metadata["mark"] == "X"}
    assert len(firsts) > 5  # its dice are not the minimax player's: it opens all over the board


def test_baselines_on_the_held_out_games():
    from examples import train_common
    from examples.tictactoe import train

    seeds = train_common.held_out_seeds("test", 30)
    groups = asyncio.run(train.baselines({"minimax_games": 10}, seeds))
    assert set(groups) == {"vs_random", "vs_minimax"}
    assert set(groups["vs_random"]) == set(train.METRICS) and set(groups["vs_minimax"]) == set(train.METRICS) - {"win_rate"}
    score = groups["vs_random"]["score"]
    assert score["teacher"]["mean"] >= score["random_legal"]["mean"]
    assert groups["vs_minimax"]["score"]["teacher"] == {"mean": 0.5, "ci": [0.5, 0.5]}  # minimax against minimax draws
    assert groups["vs_random"]["illegal_rate"]["random_legal"]["mean"] == 0.0
    low, high = score["random_legal"]["ci"]
    assert low <= score["random_legal"]["mean"] <= high and low < high
