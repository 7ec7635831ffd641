"""A rollout and training loop written the way OpenPipe ART's examples write them (its 2048 and
tic-tac-toe notebooks): `messages_and_choices`, `get_inference_name()`, `ruler_score_group(judge_model=...)`,
`iterate_dataset(use_tqdm=)`, `gather_trajectory_groups(pbar_total_completion_tokens=, max_metrics=)`,
`model.log(metrics=, step=)`, `delete_checkpoints(best_checkpoint_metric=)`, `trajectory_group_batches`.

Only the imports differ from ART (kept in the block below, with ART's lines in comments); the
rest is ART code. docs/porting.md lists the renames.
"""

from __future__ import annotations

import random
from typing import Any

from openai import AsyncOpenAI

# --- the only lines that changed ------------------------------------------------------------------
import art_core as art  # was: import art
from art_core import iterate_dataset  # was: from art.utils import iterate_dataset
from art_train import LocalBackend  # was: from art.local import LocalBackend
from ruler import ruler_score_group  # was: from art.rulers import ruler_score_group

# ---------------------------------------------------------------------------------------------------

SYSTEM = "You are playing a guessing game. Reply with one number from 1 to 9."


async def rollout(model: art.Model, scenario: dict[str, Any]) -> art.Trajectory:
    client = AsyncOpenAI(base_url=model.inference_base_url, api_key=model.inference_api_key)
    trajectory = art.Trajectory(
        messages_and_choices=[{"role": "system", "content": SYSTEM}],
        reward=0,
        metadata={"scenario_id": scenario["id"]},
    )
    for turn in range(2):
        trajectory.messages_and_choices.append({"role": "user", "content": f"Guess {turn + 1}."})
        chat_completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=trajectory.messages(),
            max_completion_tokens=4,
            temperature=1.0,
            logprobs=True,
            extra_body={"return_tokens_as_token_ids": True},
        )
        choice = chat_completion.choices[0]
        trajectory.messages_and_choices.append(choice)
        content = choice.message.content or ""
        if str(scenario["secret"]) in content:
            trajectory.reward = 1
            break
    trajectory.metrics["guesses"] = turn + 1
    return trajectory.finish()


async def train(model: art.TrainableModel, judge: str, judge_params: dict[str, Any]) -> list[dict[str, Any]]:
    """Two steps of ART's loop; returns what each step saw, for the test."""
    scenarios = [{"id": i, "secret": random.Random(i).randint(1, 9)} for i in range(4)]
    seen = []
    for batch in iterate_dataset(
        scenarios, groups_per_step=2, num_epochs=1, initial_step=await model.get_step(), use_tqdm=False
    ):
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(model, s) for _ in range(3)) for s in batch.items),
            pbar_desc="gather",
            max_exceptions=0,
            pbar_total_completion_tokens=False,
            max_metrics=5,
        )
        judged = [
            await ruler_score_group(g, judge_model=judge, extra_litellm_params=judge_params, debug=True)
            for g in groups
        ]
        judged = [g for g in judged if g is not None]
        result = await model.train(judged, config=art.TrainConfig(learning_rate=1e-4))
        await model.log(metrics={"win_rate": sum(t.reward > 0.5 for g in judged for t in g.trajectories) / 6}, step=batch.step)
        seen.append({"step": result.step, "groups": judged})
    await model.delete_checkpoints(best_checkpoint_metric="val/group/win_rate")
    return seen


async def current_style(base_model: str, path: str, judge: str, judge_params: dict[str, Any]) -> list[Any]:
    """ART's current loop: a `with` backend, `backend.train(model, groups, learning_rate=...)`, and every
    step's metrics logged with `model.log(groups, metrics=result.metrics, step=result.step)`."""
    model = art.TrainableModel(name="port-now", project="port", base_model=base_model)
    results = []
    with LocalBackend(path=path) as backend:
        await model.register(backend)
        for step in range(2):
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(rollout(model, {"id": i, "secret": 5}) for _ in range(3)) for i in range(2)),
                pbar_desc=f"step {step}",
            )
            judged = [await ruler_score_group(g, judge_model=judge, extra_litellm_params=judge_params) for g in groups]
            result = await backend.train(model, judged, learning_rate=1e-4, beta=0.0)
            await model.log(judged, metrics=result.metrics, step=result.step)
            results.append(result)
    return results


async def pipelined(model: art.TrainableModel) -> list[int]:
    """ART's `trajectory_group_batches` loop: train on each batch while the next one runs."""
    scenarios = [{"id": i, "secret": 5} for i in range(4)]
    sizes = []
    async for batch in art.trajectory_group_batches(
        (art.TrajectoryGroup(rollout(model, s) for _ in range(2)) for s in scenarios), batch_size=2
    ):
        sizes.append(len(batch))
    return sizes
