"""Codenames with the trainable model in both roles: spymaster and operative, one trajectory each.

A game is one team turn on a seeded board. The spymaster's reply is ``<clue>animal 2</clue>``; the
operative then guesses one word per chat turn (``<guess>tiger</guess>``, or ``<guess>pass</guess>``),
hearing after each whether it was ours. Both roles share the margin reward (our words found minus
theirs, over 3); the assassin costs -1, and so does an illegal clue (the spymaster's) or an
unparsable, off-board or repeated guess (the operative's).

For held-out evaluation each role plays with a fixed scripted partner (`game.best_clue`,
`game.scripted_guesses`), so a role's score does not depend on how the other role was trained.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import art_core as art

try:
    from . import game
except ImportError:
    import game  # type: ignore[no-redef]

__all__ = ["OPERATIVE", "PENALTY", "SPYMASTER", "expert_game", "play", "rollout_pair", "scripted_role"]

SPYMASTER = (
    "You are the spymaster in Codenames. Give a one-word clue and the number of OUR words it points to. "
    "Your teammate guesses board words that fit the clue; THEIR words and the assassin must be avoided, "
    "and the clue must not be a word on the board. Good clue words: {clues}. Reply like <clue>animal 2</clue>."
)
OPERATIVE = (
    "You are the operative in Codenames. Your spymaster's clue points to some of the board words. "
    "Guess one word at a time, like <guess>tiger</guess>, or reply <guess>pass</guess> to stop."
)
PENALTY = -1.0
Reply = Callable[[list[dict[str, Any]]], Awaitable[str]]


def spymaster_messages(board: game.Board) -> list[dict[str, Any]]:
    key = "\n".join(f"{role}: {', '.join(w for w, r in zip(board.words, board.roles, strict=False) if r == role)}"
                    for role in ("ours", "theirs", "neutral", "assassin"))
    return [{"role": "system", "content": SPYMASTER.format(clues=", ".join(sorted(game.CATEGORIES)))},
            {"role": "user", "content": key}]


def _board_line(board: game.Board, turn: game.Turn) -> str:
    return "Words: " + ", ".join(w for w in board.words if w not in turn.guessed)


async def play(board: game.Board, spymaster: Reply, operative: Reply) -> dict[str, Any]:
    """One team turn. Returns both roles' messages and rewards and the outcome."""
    spy = spymaster_messages(board)
    spy.append({"role": "assistant", "content": await spymaster(spy)})
    out: dict[str, Any] = {"spymaster": spy, "operative": None, "clue": None, "guesses": [], "illegal_clue": False,
                           "invalid_guess": False, "assassin": False, "margin": 0}
    try:
        clue, number = game.parse_clue(spy[-1]["content"], board)
    except game.IllegalClue:
        out.update(illegal_clue=True, spymaster_reward=PENALTY, operative_reward=None)
        return out
    out["clue"] = f"{clue} {number}"
    turn = game.Turn(board, clue, number)
    ops = [{"role": "system", "content": OPERATIVE},
           {"role": "user", "content": f"{_board_line(board, turn)}\nClue: {clue} {number}\nYour guess."}]
    while not turn.over:
        ops.append({"role": "assistant", "content": await operative(ops)})
        try:
            word = game.parse_guess(ops[-1]["content"])
            if word is None:
                raise ValueError(f"no <guess> tag in {ops[-1]['content'][:40]!r}")
            role = turn.guess(word)
        except ValueError:
            out["invalid_guess"] = True
            break
        if not turn.over:
            ops.append({"role": "user", "content": f"{turn.guessed[-1]}: {role}.\n{_board_line(board, turn)}\nYour guess."})
    out["operative"] = ops
    out["guesses"] = list(turn.guessed)
    out["margin"] = turn.margin()
    out["assassin"] = turn.hit_assassin
    team = PENALTY if turn.hit_assassin else turn.margin() / 3
    out["spymaster_reward"] = team
    out["operative_reward"] = PENALTY if out["invalid_guess"] else team
    return out


def _scripted_spymaster(board: game.Board) -> Reply:
    async def reply(messages: list[dict[str, Any]]) -> str:
        word, n = game.best_clue(board)
        return f"<clue>{word} {n}</clue>"

    return reply


def _scripted_operative(board: game.Board) -> Reply:
    async def reply(messages: list[dict[str, Any]]) -> str:
        clue, number = messages[1]["content"].split("Clue: ")[1].split("\n")[0].split()
        planned = game.scripted_guesses(board, clue, int(number))
        done = sum(1 for m in messages if m["role"] == "assistant")
        return f"<guess>{planned[done] if done < len(planned) else 'pass'}</guess>"

    return reply


def _random_spymaster(board: game.Board, rng: random.Random) -> Reply:
    """A clue word from the prompt's list (never a board word) and a number 1-3, uniformly."""
    async def reply(messages: list[dict[str, Any]]) -> str:
        return f"<clue>{rng.choice(sorted(game.CATEGORIES))} {rng.randint(1, 3)}</clue>"

    return reply


def _random_operative(board: game.Board, rng: random.Random) -> Reply:
    """A board word not yet guessed, or pass, uniformly."""
    guessed: list[str] = []

    async def reply(messages: list[dict[str, Any]]) -> str:
        word = rng.choice([w for w in board.words if w not in guessed] + ["pass"])
        guessed.append(word)
        return f"<guess>{word}</guess>"

    return reply


def _model_reply(model: art.Model, client: Any, temperature: float, max_tokens: int) -> Reply:
    async def reply(messages: list[dict[str, Any]]) -> str:
        r = await client.chat.completions.create(model=model.served_name(), messages=messages,
                                                 max_tokens=max_tokens, temperature=temperature)
        return r.choices[0].message.content or ""

    return reply


def _trajectory(traj: art.Trajectory, result: dict[str, Any], role: str) -> art.Trajectory:
    traj.reward = result[f"{role}_reward"]
    traj.metrics.update(margin=result["margin"], assassin=float(result["assassin"]),
                        illegal_clue=float(result["illegal_clue"]), invalid_guess=float(result["invalid_guess"]))
    traj.metadata.update(role=role, clue=result["clue"], guesses=result["guesses"])
    return traj


async def rollout_pair(
    model: art.Model, seed: int, *, roles: tuple[str, ...] = ("spymaster", "operative"), temperature: float = 1.0,
    client: Any = None,
) -> dict[str, art.Trajectory | None]:
    """One game on the board from `seed`; the model plays `roles`, scripted partners the rest.

    Returns a trajectory for each role the model played (None for the operative when the clue was
    illegal, since no guessing happened).
    """
    client = client or model.openai_client()
    board = game.deal(seed)
    spy = _model_reply(model, client, temperature, 12) if "spymaster" in roles else _scripted_spymaster(board)
    ops = _model_reply(model, client, temperature, 10) if "operative" in roles else _scripted_operative(board)
    # each role's calls are captured into its own trajectory
    spy_traj, ops_traj = art.Trajectory(), art.Trajectory()

    async def spy_captured(messages: list[dict[str, Any]]) -> str:
        with art.capture(spy_traj):
            return await spy(messages)

    async def ops_captured(messages: list[dict[str, Any]]) -> str:
        with art.capture(ops_traj):
            return await ops(messages)

    result = await play(board, spy_captured, ops_captured)
    out: dict[str, art.Trajectory | None] = {}
    if "spymaster" in roles:
        out["spymaster"] = _trajectory(spy_traj, result, "spymaster")
    if "operative" in roles:
        out["operative"] = None if result["operative"] is None else _trajectory(ops_traj, result, "operative")
    return out


async def expert_game(seed: int) -> list[art.Trajectory]:
    """A game of the scripted spymaster and operative: one trajectory per role, for SFT."""
    board = game.deal(seed)
    result = await play(board, _scripted_spymaster(board), _scripted_operative(board))
    trajs = [_trajectory(art.Trajectory(messages=result["spymaster"]), result, "spymaster")]
    if result["operative"] is not None:
        trajs.append(_trajectory(art.Trajectory(messages=result["operative"]), result, "operative"))
    return trajs


async def scripted_role(seed: int, role: str, player: str) -> art.Trajectory:
    """A game on the board from `seed` with `player` ("random_legal" or "teacher") in `role` beside the
    scripted partner, as `rollout_pair` sets up the model's evaluation; the role's trajectory."""
    board = game.deal(seed)
    rng = random.Random(f"random-legal-{seed}")
    spy = _random_spymaster(board, rng) if (role, player) == ("spymaster", "random_legal") else _scripted_spymaster(board)
    ops = _random_operative(board, rng) if (role, player) == ("operative", "random_legal") else _scripted_operative(board)
    result = await play(board, spy, ops)
    return _trajectory(art.Trajectory(messages=result[role]), result, role)
