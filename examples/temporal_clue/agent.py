"""The Temporal Clue agent: one reply with the four fields tagged; the reward is the fraction right."""

from __future__ import annotations

import random
from typing import Any

import art_core as art

try:
    from . import puzzle
except ImportError:
    import puzzle  # type: ignore[no-redef]

__all__ = ["SYSTEM", "expert_trajectory", "messages_for", "random_trajectory", "rollout"]

SYSTEM = (
    "Solve the murder puzzle. Exactly one choice of who, what, where and when fits every clue. "
    "Reply with the answer only, like <who>Plum</who><what>rope</what><where>hall</where><when>8 pm</when>."
)


def messages_for(p: puzzle.Puzzle) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p.text()}]


def _score(traj: art.Trajectory, text: str, p: puzzle.Puzzle) -> art.Trajectory:
    answer = puzzle.parse_answer(text)
    solution = p.answer()
    traj.reward = puzzle.score(answer, solution)
    traj.metrics["solved"] = float(traj.reward == 1.0)
    traj.metrics["formatted"] = float(len(answer) == len(puzzle.FIELDS))
    for f in puzzle.FIELDS:
        traj.metrics[f"{f}_right"] = float(puzzle.right(answer, solution, f))
    return traj


async def rollout(model: art.Model, seed: int, *, size: int = 3, temperature: float = 1.0, max_tokens: int = 48,
                  client: Any = None) -> art.Trajectory:
    """Answer the puzzle generated from `seed`; the model's turn is captured for training."""
    client = client or model.openai_client()
    p = puzzle.generate(seed, size)
    with art.capture() as traj:
        r = await client.chat.completions.create(model=model.served_name(), messages=messages_for(p),
                                                 max_tokens=max_tokens, temperature=temperature)
    traj.metadata["seed"] = seed
    return _score(traj, r.choices[0].message.content or "", p)


def expert_trajectory(seed: int, size: int = 3) -> art.Trajectory:
    """The solver's answer to the puzzle from `seed`, as a trajectory for SFT."""
    p = puzzle.generate(seed, size)
    (solution,) = puzzle.solve(p.options, p.clues)
    text = puzzle.render_answer(solution)
    traj = art.Trajectory(messages=[*messages_for(p), {"role": "assistant", "content": text}])
    return _score(traj, text, p)


def random_trajectory(seed: int, size: int = 3) -> art.Trajectory:
    """An answer of one option per field chosen uniformly (dice seeded by the puzzle): the random
    legal baseline."""
    p = puzzle.generate(seed, size)
    rng = random.Random(f"random-legal-{seed}")
    text = puzzle.render_answer({f: rng.choice(p.options[f]) for f in puzzle.FIELDS})
    return _score(art.Trajectory(messages=[*messages_for(p), {"role": "assistant", "content": text}]), text, p)
