"""Train a small model to use the bundled calculator MCP server, on CPU.

The tasks are arithmetic questions with known answers, so the reward needs no judge: 1 for the
right number in the final answer, else partial credit for using `calculate` and for a near miss. Pass
``--judge openai/<model>`` (and ``--judge-api-base``) to score groups with RULER instead.

    python examples/mcp_rl/train_calculator.py                    # smollm2-135m, a few minutes on 2 cores
    python examples/mcp_rl/train_calculator.py --tiny --steps 1   # a random tiny model: a smoke run in seconds
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import art_core as art
import art_mcp

SYSTEM = (
    "You answer arithmetic questions. Always call the `calculate` tool with the expression, then call "
    "`complete_task` with the number it returned."
)


def make_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        a, b, c = rng.randint(12, 99), rng.randint(3, 29), rng.randint(1, 50)
        expression = f"{a} * {b} + {c}"
        tasks.append({"id": f"calc-{i}", "task": f"What is {expression}?", "answer": a * b + c})
    return tasks


def reward(traj: art.Trajectory, answer: int) -> float:
    """1 for the exact answer; else 0.2 for using `calculate` plus up to 0.5 for a near miss.

    The partial credit gives GRPO something to compare while a small model rarely gets it exact.
    """
    final = traj.metadata.get("final_answer") or ""
    numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", final.replace(",", ""))]
    if float(answer) in numbers:
        return 1.0
    used = any(c["name"] == "calculate" and not c["is_error"] for c in traj.metadata.get("mcp_calls", []))
    error = min((abs(x - answer) / answer for x in numbers), default=1.0)
    return 0.2 * used + 0.5 * max(0.0, 1.0 - error)


async def main(args: argparse.Namespace) -> None:
    from art_train import LocalBackend

    base_model = args.base_model
    if args.tiny:
        from art_train.models import build_tiny_model

        base_model = str(build_tiny_model(Path(tempfile.gettempdir()) / "art-example-tiny"))
    tasks = make_tasks(args.tasks_per_step * args.steps + 4, args.seed)
    train, val = tasks[:-4], tasks[-4:]

    model = art.TrainableModel(name="calculator-agent", project="mcp-rl", base_model=base_model)
    backend = LocalBackend(path=args.output)
    await model.register(backend)

    async def one(pool: art_mcp.ServerPool, task: dict[str, Any]) -> art.Trajectory:
        traj = await art_mcp.rollout(
            model, pool, task, system_prompt=SYSTEM, max_turns=3, max_tokens=args.max_tokens, temperature=1.0
        )
        traj.reward = reward(traj, task["answer"])
        return traj

    after_each = None
    if args.judge:
        import ruler

        params = {"api_base": args.judge_api_base, "api_key": args.judge_api_key or "none"}

        async def after_each(group: art.TrajectoryGroup) -> art.TrajectoryGroup | None:
            return await ruler.score_group(
                group, judge=args.judge, litellm_params=params, swallow_exceptions=True
            )

    async def evaluate(pool: art_mcp.ServerPool, label: str) -> float:
        trajs = await art.gather_trajectories(
            (one(pool, t) for t in val), pbar_desc=label, max_exceptions=len(val)
        )
        return statistics.fmean(t.reward for t in trajs) if trajs else 0.0

    try:
        # the calculator keeps no state, so one shared server process serves every rollout
        async with art_mcp.ServerPool(art_mcp.bundled_server("calculator"), isolation="shared") as pool:
            before = await evaluate(pool, "eval before")
            for step in range(args.steps):
                batch = train[step * args.tasks_per_step : (step + 1) * args.tasks_per_step]
                groups = await art.gather_trajectory_groups(
                    (art.TrajectoryGroup(one(pool, t) for _ in range(args.group_size)) for t in batch),
                    after_each=after_each,
                    max_exceptions=0.25,
                    pbar_desc=f"step {step + 1}",
                )
                result = await model.train(groups, config=art.TrainConfig(learning_rate=args.learning_rate))
                mean = statistics.fmean(t.reward for g in groups for t in g.trajectories)
                print(f"step {result.step}: mean reward {mean:.3f}")
            after = await evaluate(pool, "eval after")
    finally:
        await backend.close()
    print(f"held-out reward: before {before:.3f}, after {after:.3f} (run directory: {args.output})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-model", default="smollm2-135m")
    parser.add_argument(
        "--tiny", action="store_true", help="use a random tiny model (a smoke run, learns nothing)"
    )
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument(
        "--judge", help="score groups with RULER using this litellm model instead of the answer check"
    )
    parser.add_argument("--judge-api-base")
    parser.add_argument("--judge-api-key")
    parser.add_argument("--output", default=".art-example", help="run-directory root")
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
