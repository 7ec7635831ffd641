"""Train the LangGraph app in `app.py` with ART: one changed line, one decorator, a programmatic reward.

    python examples/langgraph_agent/train.py                  # CPU: smollm2-135m, under 30 minutes on 2 cores
    python examples/langgraph_agent/train.py --config gpu     # qwen2.5-0.5b, more tasks and steps, CUDA
    python examples/langgraph_agent/train.py --tiny           # a random tiny model: a smoke run in seconds

Stages, all on one LoRA, each evaluated on held-out tasks (another seed range, none a training
task), answered greedily and scored 1 for the right number:

1. base: the model as it ships;
2. SFT: the app run with a scripted teacher (`teacher.py`, where a hosted model would stand),
   captured through the real graph with `art_graph.capturing`, then `train_sft`;
3. SFT + RL: GRPO steps; each step runs `groups` tasks `rollouts` times and scores each rollout
   (the writer's number against the right answer, plus a small bonus when the researcher used a tool).

`art_core.evaluate` gives each accuracy a 95% interval, `art_core.compare` the paired differences.
`--sft-tasks 0` skips the SFT stage (then "sft" is absent from the results).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app import build_app  # this folder: run as `python examples/langgraph_agent/train.py`
from teacher import ScriptedTeacher

import art_core as art
import art_graph

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/, for train_common
import train_common as common  # noqa: E402

logger = logging.getLogger("langgraph_agent")

CONFIGS: dict[str, dict[str, Any]] = {
    # fixed before the first measured run; never tuned on the held-out tasks
    "cpu": dict(base_model="smollm2-135m", sft_tasks=64, sft_epochs=2, sft_lr=5e-4, sft_batch=4, steps=3, groups=4,
                rollouts=4, learning_rate=1e-4, eval_tasks=64, max_tokens=48, device=None),
    "gpu": dict(base_model="qwen2.5-0.5b", sft_tasks=400, sft_epochs=2, sft_lr=2e-4, sft_batch=8, steps=30,
                groups=8, rollouts=8, learning_rate=5e-5, eval_tasks=300, max_tokens=96, device="cuda"),
    "tiny": dict(base_model="tiny", sft_tasks=4, sft_epochs=1, sft_lr=1e-3, sft_batch=2, steps=1, groups=2,
                 rollouts=2, learning_rate=1e-4, eval_tasks=4, max_tokens=8, device=None),
}  # fmt: skip


def make_tasks(n: int, seed: int = 0) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    tasks = []
    for _ in range(n):
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 20)
        tasks.append((f"A box holds {a} rows of {b} apples, and {c} more apples lie beside it. How many apples?", a * b + c))
    return tasks


def last_number(text: str) -> float | None:
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text or "")
    return float(numbers[-1]) if numbers else None


def heldout_tasks(n: int, seed: int) -> list[tuple[str, float]]:
    """`n` distinct held-out tasks; the training tasks (`training_tasks`) never include them."""
    out: dict[str, float] = {}
    for q, e in make_tasks(8 * n + 64, seed=10_000 + seed):
        out.setdefault(q, e)
    return list(out.items())[:n]


def training_tasks(n: int, seed: int, held_out: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """`n` tasks from this seed's stream, held-out ones left out."""
    unseen = {q for q, _ in held_out}
    stream = (t for t in make_tasks(8 * n + 64, seed=seed) if t[0] not in unseen)
    return [next(stream) for _ in range(n)]


def correct(answer: str, expected: float) -> float:
    got = last_number(answer)
    return 1.0 if got is not None and abs(got - expected) < 1e-6 else 0.0


def score(answer: str, expected: float, used_tool: bool) -> float:
    got = last_number(answer)
    right = correct(answer, expected)
    close = 0.5 if got is not None and not right and abs(got - expected) <= 0.1 * abs(expected) else 0.0
    return right + close + (0.1 if used_tool else 0.0)


async def teacher_trajectories(tasks: list[tuple[str, float]]) -> list[art.Trajectory]:
    """The app run with the scripted teacher on `tasks`, each run captured as one trajectory."""
    app = build_app(ScriptedTeacher())
    out = []
    for question, expected in tasks:
        with art_graph.capturing() as traj:
            state = await app.ainvoke({"messages": [("user", question)]})
        traj.reward = correct(str(state["messages"][-1].content), expected)
        out.append(traj)
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from art_train import LocalBackend

    cfg = common.settings(CONFIGS, args)
    t_start = time.perf_counter()
    home = Path(args.home or tempfile.mkdtemp(prefix="art-langgraph-"))
    base_model = cfg["base_model"]
    if base_model == "tiny":
        from art_train.models import build_tiny_model

        base_model = str(build_tiny_model(home / "tiny-llama"))
    backend = LocalBackend(path=home, device=cfg["device"])
    model = art.TrainableModel(name="langgraph-agent", project="examples", base_model=base_model,
                               config=art.ModelConfig(seed=args.seed))  # fmt: skip
    await model.register(backend)
    stages: dict[str, art.EvalResult] = {}
    curve: list[dict[str, Any]] = []
    try:
        app = build_app(art_graph.chat_model(model, max_tokens=cfg["max_tokens"], temperature=1.0))

        @art_graph.rollout
        async def rollout(question: str, expected: float) -> dict[str, float]:
            state = await app.ainvoke({"messages": [("user", question)]})
            used_tool = any(m.type == "tool" for m in state["messages"])
            answer = str(state["messages"][-1].content)
            # per-node rewards: the writer is judged on the answer, the researcher also on using tools
            return {"writer": score(answer, expected, False), "researcher": score(answer, expected, used_tool)}

        async def eval_rollout(at_step: art.Model, task: tuple[str, float], seed: int | None = None) -> art.Trajectory:
            """Greedy, seeded, scored 1 for the right number: held-out accuracy."""
            greedy = build_app(art_graph.chat_model(at_step, max_tokens=cfg["max_tokens"], temperature=0.0, seed=seed))

            @art_graph.rollout
            async def run(question: str, expected: float) -> float:
                state = await greedy.ainvoke({"messages": [("user", question)]})
                return correct(str(state["messages"][-1].content), expected)

            return await run(*task)

        evals = heldout_tasks(cfg["eval_tasks"], args.seed)
        train = training_tasks(cfg["sft_tasks"] + cfg["steps"] * cfg["groups"], args.seed, evals)
        sft_tasks, rl_tasks = train[: cfg["sft_tasks"]], train[cfg["sft_tasks"] :]
        options = {"task_id": lambda t: t[0], "max_concurrency": 16, "max_exceptions": 0.1}

        async def stage(name: str) -> None:
            if evals:
                stages[name] = await art.evaluate(model, eval_rollout, evals, step=await model.get_step(), **options)
                logger.info("%s: held-out accuracy %s", name, stages[name].summary())

        await stage("base")
        if sft_tasks:
            data = await teacher_trajectories(sft_tasks)
            sft = art.SFTConfig(learning_rate=cfg["sft_lr"], num_epochs=cfg["sft_epochs"], batch_size=cfg["sft_batch"],
                                max_seq_len=1024)  # fmt: skip
            await model.train_sft(data, sft)
            await stage("sft")
        last: dict[str, Any] = {}
        for step in range(cfg["steps"]):
            batch = rl_tasks[step * cfg["groups"] : (step + 1) * cfg["groups"]]
            groups = await art.gather_trajectory_groups(
                [art.TrajectoryGroup(rollout(q, e) for _ in range(cfg["rollouts"])) for q, e in batch],
                max_exceptions=cfg["rollouts"], pbar_desc=f"rl step {step + 1}",
            )  # fmt: skip
            rewards = [t.reward for g in groups for t in g.trajectories]
            reports = [t.metadata["capture"] for g in groups for t in g.trajectories]
            to_train = art_graph.node_groups(groups) if args.per_node else groups
            result = await model.train(to_train, config=art.TrainConfig(learning_rate=cfg["learning_rate"]), verbose=False)
            last = {"step": result.step, "mean_reward": sum(rewards) / max(len(rewards), 1),
                    "llm_calls": sum(r["calls"] for r in reports),
                    "turns_without_token_ids": sum(r["turns_without_token_ids"] for r in reports)}  # fmt: skip
            curve.append({"step": result.step, "reward": last["mean_reward"]})
            logger.info("rl step %d: %s", step + 1, last)
        await stage("sft_rl" if sft_tasks else "rl")
    finally:
        await backend.close()
    wall = time.perf_counter() - t_start
    out = summary(stages, cfg, args, wall, curve, last)
    if args.record and stages:
        common.record(Path(args.record), "langgraph_agent", out)
    return out


def summary(stages: dict[str, art.EvalResult], cfg: dict[str, Any], args: argparse.Namespace, wall: float,
            curve: list[dict[str, Any]], last: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The run's results entry; the last RL step's counters stay at the top level."""
    out: dict[str, Any] = {**last, "example": "langgraph_agent", "model": cfg["base_model"], "config": common.config_name(cfg, args),
                           "settings": cfg, "seed": args.seed, "wall_s": round(wall, 1), "curve": curve,
                           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}  # fmt: skip
    if not stages:
        return out
    trained = "sft_rl" if "sft_rl" in stages else "rl"
    named = {("sft_rl" if k == "rl" else k): v for k, v in stages.items()}  # common.figures' stage names
    out["eval"] = {"tasks": len(stages["base"].task_ids), "greedy": True, "seeds": f"{10_000 + args.seed}"}
    out["accuracy"] = common.figures(named, {"accuracy": None})["accuracy"]
    base, final = stages["base"], stages[trained]
    out.update(base_accuracy=base.mean, trained_accuracy=final.mean, eval_tasks=len(base.task_ids))
    for key, diff in out["accuracy"].items():  # the paired differences common.figures computed
        if key.endswith("_minus_base") or key == "sft_rl_minus_sft":
            logger.info("held-out accuracy %s: %+.3f [%+.3f, %+.3f], p %.4f", key, diff["diff"], *diff["ci"],
                        diff["p_value"])
    logger.info("wall %.0f s, peak RSS %d MB", wall, out["peak_rss_mb"])
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    p.add_argument("--tiny", action="store_const", const="tiny", dest="config", help="same as --config tiny")
    p.add_argument("--base-model", default=None, help="base model name or path (default: the configuration's)")
    for key in ("sft_tasks", "sft_epochs", "sft_batch", "steps", "groups", "rollouts", "eval_tasks", "max_tokens"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int)
    for key in ("sft_lr", "learning_rate"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=float)
    p.add_argument("--per-node", action="store_true", help="train each node on its own reward (node_groups)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--home", default=None, help="run directory root (default: a temporary folder)")
    p.add_argument("--record", help="add the run's figures to this JSON file (benchmarks/results/examples.json)")
    return p.parse_args(argv)


if __name__ == "__main__":
    common.setup_logging()
    print(asyncio.run(main(parse_args())))  # noqa: T201 - a script's result
