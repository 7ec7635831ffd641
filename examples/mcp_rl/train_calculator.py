"""Train a small model to use the bundled calculator MCP server: SFT warm-up, then GRPO, on CPU.

    python examples/mcp_rl/train_calculator.py --seed 0 --record benchmarks/results/examples.json
    python examples/mcp_rl/train_calculator.py --tiny      # a random tiny model: a smoke run in seconds
    python examples/mcp_rl/train_calculator.py --judge openai/gpt-4.1-mini --judge-api-base URL   # RULER

The tasks are arithmetic questions (``What is 47 * 12 + 9?``) with known answers. Stages, all on one
LoRA, each evaluated on the same held-out tasks, answered greedily (temperature 0, at most
`max_turns` model calls):

1. base: the model as it ships (step 0);
2. SFT: a scripted teacher's runs through the real server (call `calculate`, then `complete_task`
   with what it returned), one `train_sft` call; ``--sft-tasks 0`` skips it;
3. SFT + RL ("sft_rl", so named even when SFT was skipped): GRPO steps, each on `tasks_per_step`
   new tasks `group_size` times. The reward is 1 for the right number, else 0.2 for using
   `calculate` plus up to 0.5 for a near miss, so GRPO has differences to learn from while a small
   model rarely gets it exact; ``--judge`` scores the groups with RULER instead.

Accuracy (1 when the last number of the final answer is the right one, else 0) is the headline;
the shaped reward is kept as a second metric. `art_core.evaluate` gives each a 95% interval,
`art_core.compare` the paired differences between stages.

Held-out tasks come from a fixed seed range (test: 100000+; dev: 50000+ with ``--split dev``, for
choosing settings), training tasks from seeds derived from ``--seed``. Each expression also
belongs to exactly one split by its hash, so no training task is a held-out one, whatever the seeds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import re
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import art_core as art
import art_mcp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/, for train_common
import train_common as common  # noqa: E402

logger = logging.getLogger("mcp_rl")

SYSTEM = (
    "You answer arithmetic questions. Always call the `calculate` tool with the expression, then call "
    "`complete_task` with the number it returned."
)
MAX_SEQ_LEN = 1024  # the prompt with the server's tool specs is ~500 tokens; a teacher run ~610

CONFIGS: dict[str, dict[str, Any]] = {
    # fixed before the first measured run; never tuned on the held-out tasks
    "cpu": dict(base_model="smollm2-135m", sft_tasks=24, sft_epochs=2, sft_batch=4, sft_lr=5e-4, rl_steps=3,
                tasks_per_step=4, group_size=4, rl_lr=2e-5, eval_tasks=40, max_turns=3, max_tokens=96),
    # a random tiny model: checks the whole pipeline, learns nothing
    "tiny": dict(base_model="tiny", sft_tasks=4, sft_epochs=1, sft_batch=2, sft_lr=1e-3, rl_steps=1,
                 tasks_per_step=2, group_size=2, rl_lr=2e-5, eval_tasks=4, max_turns=2, max_tokens=8),
}  # fmt: skip
FLAG_ALIASES = {"rl_steps": ["--steps"], "rl_lr": ["--learning-rate"]}  # the names this script had first


@dataclass(frozen=True)
class Task:
    id: str
    task: str  # the question, where art_mcp.rollout reads it
    expression: str
    answer: int


def split_of(expression: str) -> str:
    """The split an expression belongs to, by its hash: a tenth each to test and dev, the rest to training."""
    return {0: "test", 1: "dev"}.get(zlib.crc32(expression.encode()) % 10, "train")


def draw(rng: random.Random) -> tuple[str, int]:
    """One expression `a * b + c` and its value."""
    a, b, c = rng.randint(12, 99), rng.randint(3, 29), rng.randint(1, 50)
    return f"{a} * {b} + {c}", a * b + c


def make_task(seed: int, split: str) -> Task:
    """Seed `seed`'s task in `split`: the first expression its random stream draws that belongs there."""
    rng = random.Random(seed)
    while True:
        expression, answer = draw(rng)
        if split_of(expression) == split:
            return Task(f"{split}-{seed}", f"What is {expression}?", expression, answer)


def make_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` tasks of one random stream, any split: the first-turn tool-call check of benchmarks/models.py."""
    rng = random.Random(seed)
    return [
        {"id": f"calc-{i}", "task": f"What is {e}?", "answer": v}
        for i, (e, v) in enumerate(draw(rng) for _ in range(n))
    ]


def heldout_tasks(split: str, n: int) -> list[Task]:
    """The first `n` tasks of an evaluation split ("test" or "dev"): the same for every run and seed."""
    return [make_task(s, split) for s in common.held_out_seeds(split, n)]


def sft_tasks(seed: int, n: int) -> list[Task]:
    return [make_task(s, "train") for s in common.sft_seeds(seed, n)]


def rl_tasks(seed: int, step: int, n: int) -> list[Task]:
    """RL step `step`'s tasks, one per group."""
    return [make_task(s, "train") for s in common.rl_seeds(seed, step, n)]


def final_number(traj: art.Trajectory) -> float | None:
    numbers = re.findall(r"-?\d+(?:\.\d+)?", (traj.metadata.get("final_answer") or "").replace(",", ""))
    return float(numbers[-1]) if numbers else None


def correct(traj: art.Trajectory, answer: int) -> float:
    """1 when the last number of the final answer is `answer`, else 0."""
    return float(final_number(traj) == answer)


def reward(traj: art.Trajectory, answer: int) -> float:
    """1 for the exact answer; else 0.2 for using `calculate` plus up to 0.5 for a near miss."""
    if correct(traj, answer):
        return 1.0
    used = any(c["name"] == "calculate" and not c["is_error"] for c in traj.metadata.get("mcp_calls", []))
    got = final_number(traj)
    error = 1.0 if got is None else abs(got - answer) / answer
    return 0.2 * used + 0.5 * max(0.0, 1.0 - error)


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


async def teacher_trajectory(session: art_mcp.McpSession, task: Task) -> art.Trajectory:
    """The scripted teacher's run of `task` through the real server: `calculate`, then `complete_task`."""
    result = await session.call("calculate", {"expression": task.expression}, tool_call_id="call_0")
    if result.is_error or float(result.text) != task.answer:
        raise RuntimeError(
            f"{task.id}: calculate({task.expression!r}) gave {result.text!r}, expected {task.answer}"
        )
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.task},
                _call("call_0", "calculate", {"expression": task.expression}), result.message(),
                _call("call_1", art_mcp.COMPLETE_TASK, {"answer": str(task.answer)})]  # fmt: skip
    return art.Trajectory(messages=messages, tools=[*session.openai_tools(), art_mcp.COMPLETE_TASK_TOOL])


def results(stages: dict[str, art.EvalResult], cfg: dict[str, Any], args: argparse.Namespace,
            model: art.TrainableModel, wall: float, sft: dict[str, Any] | None,
            curve: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """The run's results entry: each stage's accuracy and shaped reward with intervals, and their differences."""
    entry = common.run_entry("mcp_rl", cfg, args, model, wall)
    first = common.SPLITS[args.split]
    entry["steps"] = {"sft": int(sft is not None), "rl": cfg["rl_steps"]}
    entry["eval"] = {"tasks": cfg["eval_tasks"], "greedy": True, "max_turns": cfg["max_turns"],
                     "seeds": f"{first}-{first + cfg['eval_tasks'] - 1}",
                     "stage_steps": {name: r.step for name, r in stages.items()}}  # fmt: skip
    entry.update(common.figures(stages, {"accuracy": None, "shaped_reward": "shaped_reward"}))
    entry.update(sft=sft, curve=curve, judge=args.judge)
    return entry


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from art_train import LocalBackend

    cfg = common.settings(CONFIGS, args)
    t0 = time.perf_counter()
    run = Path(args.output or tempfile.mkdtemp(prefix="art-mcp-rl-"))
    model = art.TrainableModel(name=f"calculator-{args.config}-s{args.seed}", project="mcp-rl",
                               base_model=common.base_model_path(cfg["base_model"]),
                               config=art.ModelConfig(max_seq_len=MAX_SEQ_LEN, seed=args.seed))  # fmt: skip
    backend = LocalBackend(path=run)
    evals = heldout_tasks(args.split, cfg["eval_tasks"])
    stages: dict[str, art.EvalResult] = {}
    curve: list[dict[str, Any]] = []
    sft: dict[str, Any] | None = None
    entry: dict[str, Any] = {}

    after_each = None
    if args.judge:
        import ruler

        params = {"api_base": args.judge_api_base, "api_key": args.judge_api_key or "none"}

        async def after_each(group: art.TrajectoryGroup) -> art.TrajectoryGroup | None:
            return await ruler.score_group(
                group, judge=args.judge, litellm_params=params, swallow_exceptions=True
            )

    try:
        await model.register(backend)
        if await model.get_step() > 0:
            raise SystemExit(f"{run} already holds {model.name}'s checkpoints; pass a new --output")
        # the calculator keeps no state, so one shared server process serves every rollout
        async with art_mcp.ServerPool(art_mcp.bundled_server("calculator"), isolation="shared") as pool:

            async def rollout(at: art.Model, task: Task, *, temperature: float, seed: int | None = None) -> art.Trajectory:  # fmt: skip
                traj = await art_mcp.rollout(at, pool, task, system_prompt=SYSTEM, max_turns=cfg["max_turns"],
                                             max_tokens=cfg["max_tokens"], temperature=temperature,
                                             extra_body={"seed": seed} if seed is not None else None)  # fmt: skip
                traj.reward = reward(traj, task.answer)
                traj.metrics["correct"] = correct(traj, task.answer)
                return traj

            async def accuracy_rollout(at: art.Model, task: Task, seed: int | None = None) -> art.Trajectory:
                """Greedy, scored 1 for the exact answer, else 0 (the shaped reward kept in metrics)."""
                traj = await rollout(at, task, temperature=0.0, seed=seed)
                traj.metrics["shaped_reward"] = traj.reward
                traj.reward = traj.metrics["correct"]
                return traj

            async def stage(name: str) -> None:
                nonlocal entry
                stages[name] = await art.evaluate(model, accuracy_rollout, evals, step=await model.get_step(),
                                                  task_id=lambda t: t.id, max_concurrency=16, max_exceptions=0.1,
                                                  show_progress=False)  # fmt: skip
                logger.info("%s: held-out accuracy %s", name, stages[name].summary())
                entry = results(stages, cfg, args, model, time.perf_counter() - t0, sft, curve)
                (run / "results.json").write_text(json.dumps(entry, indent=2))  # kept if a later stage fails

            await stage("base")
            if cfg["sft_tasks"] > 0:
                teach = sft_tasks(args.seed, cfg["sft_tasks"])
                async with pool.session() as session:
                    data = [await teacher_trajectory(session, t) for t in teach]
                config = art.SFTConfig(learning_rate=cfg["sft_lr"], num_epochs=cfg["sft_epochs"],
                                       batch_size=cfg["sft_batch"], max_seq_len=MAX_SEQ_LEN)  # fmt: skip
                result = await model.train_sft(data, config, verbose=False)
                sft = {"examples": len(data), "step": result.step, "loss": result.metrics.get("loss")}
                logger.info("sft: %s", sft)
                await stage("sft")
            for step in range(cfg["rl_steps"]):
                groups = await art.gather_trajectory_groups(
                    (art.TrajectoryGroup(rollout(model, t, temperature=1.0) for _ in range(cfg["group_size"]))
                     for t in rl_tasks(args.seed, step, cfg["tasks_per_step"])),
                    after_each=after_each, max_exceptions=0.25, show_progress=False,
                )  # fmt: skip
                trajs = [t for g in groups for t in g.trajectories]
                result = await model.train(groups, config=art.TrainConfig(learning_rate=cfg["rl_lr"],
                                                                          max_seq_len=MAX_SEQ_LEN), verbose=False)  # fmt: skip
                curve.append({"step": result.step, "reward": sum(t.reward for t in trajs) / max(1, len(trajs)),
                              "correct": sum(t.metrics["correct"] for t in trajs) / max(1, len(trajs))})  # fmt: skip
                logger.info("rl step %d: mean reward %.3f, exact %.3f", step + 1, curve[-1]["reward"],
                            curve[-1]["correct"])  # fmt: skip
            if cfg["rl_steps"] > 0:
                await stage("sft_rl")
    finally:
        await backend.close()
    for a, b in (("base", "sft"), ("base", "sft_rl"), ("sft", "sft_rl")):
        if a in stages and b in stages:
            print(f"\n{b} vs {a} (held-out accuracy):\n{art.compare(stages[a], stages[b]).table()}")  # noqa: T201
    if args.record:
        common.record(Path(args.record), "mcp_rl", entry)
    figures = {k: entry[k] for k in ("accuracy", "shaped_reward")}
    for name in stages:
        print(f"{name}: {common.figures_line(figures, name)}")  # noqa: T201
    where = run / "results.json"
    print(f"wall {entry['wall_s']:.0f} s, peak RSS {entry['peak_rss_mb']} MB; results: {where}")  # noqa: T201
    return entry


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    p.add_argument("--tiny", action="store_const", const="tiny", dest="config", help="same as --config tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--split",
        choices=sorted(common.SPLITS),
        default="test",
        help="evaluate on the held-out test tasks, or on the dev tasks used for choosing settings",
    )
    p.add_argument("--output", help="run folder, where results.json goes (default: a new temporary folder)")
    p.add_argument(
        "--record", help="add the run's figures to this JSON file (benchmarks/results/examples.json)"
    )
    p.add_argument(
        "--judge", help="score RL groups with RULER using this litellm model instead of the answer check"
    )
    p.add_argument("--judge-api-base", help="the judge's OpenAI-compatible base URL")
    p.add_argument("--judge-api-key")
    for key, default in CONFIGS["cpu"].items():  # every setting can be overridden: --rl-steps 1
        flag = f"--{key.replace('_', '-')}"
        p.add_argument(flag, *FLAG_ALIASES.get(key, []), dest=key, type=type(default), default=None)
    return p.parse_args(argv)


if __name__ == "__main__":
    common.setup_logging()
    for noisy in ("mcp", "art_mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    asyncio.run(main(parse_args()))
