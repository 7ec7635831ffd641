"""Train the LangGraph app in `app.py` with ART: one changed line, one decorator, a programmatic reward.

    python examples/langgraph_agent/train.py                    # bundled SmolLM2-135M, 2 steps (CPU: minutes)
    python examples/langgraph_agent/train.py --tiny --steps 1   # a tiny random model: a smoke run in seconds

Each step runs `--groups` tasks `--rollouts` times each, scores every rollout (the writer's number
against the right answer, plus a small bonus when the researcher used a tool), and trains one GRPO
step on the researcher's and the writer's turns. Before and after training, `--eval-tasks` held-out
tasks (another seed, none a training task) are answered greedily and scored 1 for the right number:
`art_core.evaluate` gives each accuracy with a 95% interval, `art_core.compare` the paired difference.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import re
import tempfile
from pathlib import Path

from app import build_app  # this folder: run as `python examples/langgraph_agent/train.py`

import art_core as art
import art_graph

logger = logging.getLogger("langgraph_agent")


def make_tasks(n: int, seed: int = 0) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    tasks = []
    for _ in range(n):
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 20)
        tasks.append(
            (
                f"A box holds {a} rows of {b} apples, and {c} more apples lie beside it. How many apples?",
                a * b + c,
            )
        )
    return tasks


def last_number(text: str) -> float | None:
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text or "")
    return float(numbers[-1]) if numbers else None


def heldout_tasks(n: int, train: list[tuple[str, float]], seed: int) -> list[tuple[str, float]]:
    """`n` tasks from another seed range, none of them a training task."""
    seen = {q for q, _ in train}
    return [t for t in make_tasks(4 * n + 16, seed=10_000 + seed) if t[0] not in seen][:n]


def correct(answer: str, expected: float) -> float:
    got = last_number(answer)
    return 1.0 if got is not None and abs(got - expected) < 1e-6 else 0.0


def score(answer: str, expected: float, used_tool: bool) -> float:
    got = last_number(answer)
    correct = 1.0 if got is not None and abs(got - expected) < 1e-6 else 0.0
    close = 0.5 if got is not None and not correct and abs(got - expected) <= 0.1 * abs(expected) else 0.0
    return correct + close + (0.1 if used_tool else 0.0)


async def main(args: argparse.Namespace) -> dict[str, float]:
    from art_train import LocalBackend

    home = Path(args.home or tempfile.mkdtemp(prefix="art-langgraph-"))
    base_model = args.base_model
    if args.tiny:
        from art_train.models import build_tiny_model

        base_model = str(build_tiny_model(home / "tiny-llama"))
    backend = LocalBackend(path=home)
    model = art.TrainableModel(name="langgraph-agent", project="examples", base_model=base_model)
    await model.register(backend)
    try:
        app = build_app(art_graph.chat_model(model, max_tokens=args.max_tokens, temperature=1.0))

        @art_graph.rollout
        async def rollout(question: str, expected: float) -> dict[str, float]:
            state = await app.ainvoke({"messages": [("user", question)]})
            used_tool = any(m.type == "tool" for m in state["messages"])
            answer = str(state["messages"][-1].content)
            # per-node rewards: the writer is judged on the answer, the researcher also on using tools
            return {
                "writer": score(answer, expected, False),
                "researcher": score(answer, expected, used_tool),
            }

        async def eval_rollout(at_step: art.Model, task: tuple[str, float], seed: int | None = None) -> art.Trajectory:
            """Greedy, seeded, scored 1 for the right number: held-out accuracy."""
            greedy = build_app(art_graph.chat_model(at_step, max_tokens=args.max_tokens, temperature=0.0, seed=seed))

            @art_graph.rollout
            async def run(question: str, expected: float) -> float:
                state = await greedy.ainvoke({"messages": [("user", question)]})
                return correct(str(state["messages"][-1].content), expected)

            return await run(*task)

        tasks = make_tasks(args.groups * args.steps, seed=args.seed)
        evals = heldout_tasks(args.eval_tasks, tasks, args.seed)
        evaluate = {"task_id": lambda t: t[0], "show_progress": False, "max_concurrency": 8, "max_exceptions": 0.1}
        base = await art.evaluate(model, eval_rollout, evals, step=0, **evaluate) if evals else None
        last: dict[str, float] = {}
        for step in range(args.steps):
            batch = tasks[step * args.groups : (step + 1) * args.groups]
            groups = await art.gather_trajectory_groups(
                [art.TrajectoryGroup(rollout(q, e) for _ in range(args.rollouts)) for q, e in batch],
                max_exceptions=args.rollouts,
                show_progress=False,
            )
            rewards = [t.reward for g in groups for t in g.trajectories]
            reports = [t.metadata["capture"] for g in groups for t in g.trajectories]
            to_train = art_graph.node_groups(groups) if args.per_node else groups
            result = await model.train(
                to_train, config=art.TrainConfig(learning_rate=args.learning_rate), verbose=False
            )
            last = {
                "step": result.step,
                "mean_reward": sum(rewards) / max(len(rewards), 1),
                "llm_calls": sum(r["calls"] for r in reports),
                "turns_without_token_ids": sum(r["turns_without_token_ids"] for r in reports),
            }
            logger.info("step %d: %s", result.step, last)
        if base is not None:
            trained = await art.evaluate(model, eval_rollout, evals, **evaluate)
            comparison = art.compare(base, trained)
            logger.info("held-out accuracy, step 0 vs step %d:\n%s", trained.step, comparison.table())
            last.update(base_accuracy=base.mean, base_ci=base.ci, trained_accuracy=trained.mean,
                        trained_ci=trained.ci, diff=comparison.diff, diff_ci=comparison.ci,
                        eval_tasks=len(evals))  # fmt: skip
        return last
    finally:
        await backend.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train the LangGraph calculator agent with ART.")
    p.add_argument("--base-model", default="smollm2-135m", help="base model name or path")
    p.add_argument("--tiny", action="store_true", help="use a tiny random model (smoke run)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--groups", type=int, default=2, help="tasks per step")
    p.add_argument("--rollouts", type=int, default=4, help="rollouts per task")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--per-node", action="store_true", help="train each node on its own reward (node_groups)")
    p.add_argument("--eval-tasks", type=int, default=32, help="held-out tasks scored at step 0 and at the end (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--home", default=None, help="run directory root (default: a temporary folder)")
    return p.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per LLM call is noise here
    print(asyncio.run(main(parse_args())))  # noqa: T201 - a script's result
