"""Distillation from a real teacher model: qwen2.5-0.5b's right answers train smollm2-135m by SFT, then RL.

    python examples/distillation/train.py --seed 0 --record benchmarks/results/examples.json
    python examples/distillation/train.py --split dev --rl-steps 12     # choosing settings: the dev split
    python examples/distillation/train.py --tiny                        # a random tiny model: a smoke run

The task is `art demo`'s two-digit addition ("What is 23 + 45? Reply with the number only.", reward 1
when the last number of the reply is the sum, else 0; art_train/demo_tasks.py). Both models are
served by one LocalBackend; the teacher is registered as a plain, untrained model. Stages, each
scored greedily on the same held-out questions (the test split's 64, or dev's with ``--split dev``):

1. teacher: qwen2.5-0.5b (Qwen2.5-Coder-0.5B-Instruct) as it ships;
2. base: the student, smollm2-135m, as it ships;
3. distilled ("sft"): the student after SFT on the teacher's replies to `distill_questions` training
   questions (`teacher_samples` each at `teacher_temperature`), kept only where the reward is at
   least `min_reward` (1: right answers only);
4. distilled + RL ("sft_rl"): then `rl_steps` GRPO steps, each on `groups` new training questions
   sampled `group_size` times, rewarded by the same check. With `eval_every` N > 0 the held-out
   questions are also scored every N steps (the RL curve, in `curve`). `dtype` is the student's
   (`ModelConfig.dtype`): "auto" serves it in bfloat16 on a CPU with native bfloat16 while the trainer
   stays in float32; "float32" makes the sampler's numbers the trainer's.

Training questions come from the task's train split (no pair of a held-out question is ever in it),
drawn by ``--seed``: the first `distill_questions` for the teacher, the next ones for RL. Each stage
gets a 95% interval and each pair of stages a paired difference (`art_core.evaluate`,
`art_core.compare`); the teacher's figures sit beside them as the run's baseline, with the trained
student's paired difference from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import art_core as art
from art_train.demo_tasks import ADDITION, Question

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/, for train_common
import train_common as common  # noqa: E402

logger = logging.getLogger("distillation")

MAX_SEQ_LEN = 256  # a question and its reply are ~40 tokens

CONFIGS: dict[str, dict[str, Any]] = {
    # fixed before the first measured run: the RL stage is art demo's (lr, groups, group size,
    # temperature); never tuned on the test split
    "cpu": dict(base_model="smollm2-135m", teacher="qwen2.5-0.5b", distill_questions=256, teacher_samples=1,
                teacher_temperature=0.0, min_reward=1.0, sft_epochs=2, sft_batch=8, sft_lr=5e-4, rl_steps=8,
                groups=8, group_size=6, rl_lr=3e-4, rl_temperature=0.7, eval_questions=64, eval_every=0, dtype="auto"),
    # a random tiny model as teacher and student: checks the whole pipeline, learns nothing (it keeps
    # every teacher reply, since a random model gets none right)
    "tiny": dict(base_model="tiny", teacher="tiny", distill_questions=8, teacher_samples=1,
                 teacher_temperature=0.0, min_reward=0.0, sft_epochs=1, sft_batch=4, sft_lr=1e-3, rl_steps=1,
                 groups=2, group_size=2, rl_lr=3e-4, rl_temperature=0.7, eval_questions=4, eval_every=0, dtype="auto"),
}  # fmt: skip


def training_questions(seed: int, n_distill: int, n_rl: int) -> tuple[list[Question], list[Question]]:
    """`--seed`'s draw from the train split: the teacher's questions, then the RL steps' (no overlap)."""
    drawn = random.Random(seed).sample(ADDITION.splits["train"], n_distill + n_rl)
    return drawn[:n_distill], drawn[n_distill:]


def held_out(split: str, n: int) -> list[Question]:
    questions = ADDITION.splits[split]
    if n > len(questions):
        raise SystemExit(f"--eval-questions {n}: the {split} split has {len(questions)} questions")
    return questions[:n]


async def distill_data(teacher: art.Model, questions: list[Question], cfg: dict[str, Any]) -> tuple[list[list[dict[str, str]]], dict[str, Any]]:  # fmt: skip
    """The teacher's replies to `questions` as SFT conversations, with what was kept."""
    groups = await art.gather_trajectory_groups(
        (art.TrajectoryGroup(ADDITION.rollout(teacher, q, cfg["teacher_temperature"], seed=i * 100 + k)
                             for k in range(cfg["teacher_samples"])) for i, q in enumerate(questions)),
        max_exceptions=0, show_progress=False,
    )  # fmt: skip
    return keep(questions, groups, cfg["min_reward"])


def keep(questions: list[Question], groups: list[art.TrajectoryGroup], min_reward: float) -> tuple[list[list[dict[str, str]]], dict[str, Any]]:  # fmt: skip
    """Each reply scoring at least `min_reward` as a conversation (question, reply); the others dropped."""
    kept: list[list[dict[str, str]]] = []
    replies = [(q, t) for q, g in zip(questions, groups, strict=True) for t in g.trajectories]
    for q, traj in replies:
        if traj.reward >= min_reward:
            kept.append([*ADDITION.messages(q), {"role": "assistant", "content": traj.messages()[-1].get("content") or ""}])
    right = sum(t.reward == 1.0 for _, t in replies)
    return kept, {"questions": len(questions), "replies": len(replies), "kept": len(kept),
                  "teacher_train_accuracy": right / max(1, len(replies))}  # fmt: skip


def results(stages: dict[str, art.EvalResult], teacher: art.EvalResult | None, cfg: dict[str, Any],
            args: argparse.Namespace, model: art.TrainableModel, wall: float, extra: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The run's results entry: each stage's held-out accuracy with its interval, the differences, the teacher."""
    entry = common.run_entry("distillation", cfg, args, model, wall)
    entry["steps"] = {"sft": int("sft" in stages), "rl": cfg["rl_steps"]}
    entry["eval"] = {"questions": cfg["eval_questions"], "split": args.split, "greedy": True,
                     "stage_steps": {name: r.step for name, r in stages.items()}}  # fmt: skip
    entry["held_out"] = common.figures(stages, {"accuracy": None})
    if teacher is not None:
        row: dict[str, Any] = {"teacher": {"mean": teacher.mean, "ci": list(teacher.ci)}}
        last = stages.get("sft_rl") or stages.get("sft")
        if last is not None:
            c = art.compare(teacher, last)
            row["trained_minus_teacher"] = {"diff": c.diff, "ci": list(c.ci), "p_value": c.p_value,
                                            "method": "paired"}  # fmt: skip
        entry["baselines"] = {"players": {"teacher": f"{cfg['teacher']} as it ships, greedy"},
                              "held_out": {"accuracy": row}}  # fmt: skip
    entry.update(extra)
    return entry


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from art_train import LocalBackend

    cfg = common.settings(CONFIGS, args)
    t0 = time.perf_counter()
    run = Path(args.output or tempfile.mkdtemp(prefix="art-distillation-"))
    student = art.TrainableModel(name=f"student-{args.config}-s{args.seed}", project="distillation",
                                 base_model=common.base_model_path(cfg["base_model"]),
                                 config=art.ModelConfig(max_seq_len=MAX_SEQ_LEN, seed=args.seed, dtype=cfg["dtype"]))  # fmt: skip
    teacher = art.Model(name=f"teacher-{args.config}", project="distillation",
                        base_model=common.base_model_path(cfg["teacher"]))  # fmt: skip
    evals = held_out(args.split, cfg["eval_questions"])
    distill_qs, rl_qs = training_questions(args.seed, cfg["distill_questions"], cfg["rl_steps"] * cfg["groups"])
    stages: dict[str, art.EvalResult] = {}
    teacher_result: art.EvalResult | None = None
    extra: dict[str, Any] = {"curve": []}
    entry: dict[str, Any] = {}
    backend = LocalBackend(path=run)

    async def score(model: art.Model, step: int | None) -> art.EvalResult:
        return await art.evaluate(model, ADDITION.eval_rollout, evals, step=step, task_id=lambda q: q.id,
                                  seed=args.seed, max_concurrency=64, show_progress=False)  # fmt: skip

    def save() -> None:
        nonlocal entry
        entry = results(stages, teacher_result, cfg, args, student, time.perf_counter() - t0, extra)
        (run / "results.json").write_text(json.dumps(entry, indent=2))  # kept if a later stage fails

    try:
        await teacher.register(backend)
        await student.register(backend)
        if await student.get_step() > 0:
            raise SystemExit(f"{run} already holds {student.name}'s checkpoints; pass a new --output")
        teacher_result = await score(teacher, None)
        logger.info("teacher: held-out accuracy %s", teacher_result.summary())
        stages["base"] = await score(student, 0)
        logger.info("base: held-out accuracy %s", stages["base"].summary())
        data, extra["distill"] = await distill_data(teacher, distill_qs, cfg)
        logger.info("teacher on %d training questions: %d of %d replies kept", len(distill_qs),
                    extra["distill"]["kept"], extra["distill"]["replies"])  # fmt: skip
        if not data:
            raise SystemExit(f"the teacher got none of {len(distill_qs)} training questions right "
                             f"(min_reward {cfg['min_reward']}): nothing to distill")  # fmt: skip
        config = art.SFTConfig(learning_rate=cfg["sft_lr"], num_epochs=cfg["sft_epochs"], batch_size=cfg["sft_batch"],
                               max_seq_len=MAX_SEQ_LEN)  # fmt: skip
        result = await student.train_sft(data, config, verbose=False)
        extra["sft"] = {"examples": len(data), "step": result.step, "loss": result.metrics.get("loss")}
        stages["sft"] = await score(student, result.step)
        logger.info("distilled: held-out accuracy %s", stages["sft"].summary())
        save()
        for step in range(cfg["rl_steps"]):
            batch = rl_qs[step * cfg["groups"]:(step + 1) * cfg["groups"]]
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(ADDITION.rollout(student, q, cfg["rl_temperature"]) for _ in range(cfg["group_size"]))
                 for q in batch), max_exceptions=0, show_progress=False,
            )  # fmt: skip
            trained = await student.train(groups, config=art.TrainConfig(learning_rate=cfg["rl_lr"],
                                                                          max_seq_len=MAX_SEQ_LEN), verbose=False)  # fmt: skip
            rewards = [t.reward for g in groups for t in g.trajectories]
            extra["curve"].append({"step": trained.step, "reward": sum(rewards) / max(1, len(rewards))})
            logger.info("rl step %d: training reward %.3f", step + 1, extra["curve"][-1]["reward"])
            if common.curve_scores_held_out(cfg, step):
                held = await score(student, trained.step)  # the RL curve on the held-out questions
                extra["curve"][-1]["held_out"] = common.curve_point(held)
                logger.info("rl step %d: held-out accuracy %s", step + 1, held.summary())
        if cfg["rl_steps"] > 0:
            stages["sft_rl"] = await score(student, await student.get_step())
            logger.info("distilled + RL: held-out accuracy %s", stages["sft_rl"].summary())
        save()
    finally:
        await backend.close()
    for a, b in (("base", "sft"), ("sft", "sft_rl")):
        if a in stages and b in stages:
            print(f"\n{b} vs {a} (held-out accuracy):\n{art.compare(stages[a], stages[b]).table()}")  # noqa: T201
    if args.record:
        common.record(Path(args.record), "distillation", entry)
    for name in stages:
        print(f"{name}: {common.figures_line(entry['held_out'], name)}")  # noqa: T201
    if teacher_result is not None:
        print(f"teacher: accuracy {teacher_result.summary()}")  # noqa: T201
    print(f"wall {entry['wall_s']:.0f} s, peak RSS {entry['peak_rss_mb']} MB; results: {run / 'results.json'}")  # noqa: T201
    return entry


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    p.add_argument("--tiny", action="store_const", const="tiny", dest="config", help="same as --config tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=["test", "dev"], default="test",
                   help="evaluate on the held-out test questions, or on the dev ones used for choosing settings")
    p.add_argument("--output", help="run folder, where results.json goes (default: a new temporary folder)")
    p.add_argument("--record", help="add the run's figures to this JSON file (benchmarks/results/examples.json)")
    for key, default in CONFIGS["cpu"].items():  # every setting can be overridden: --rl-steps 12
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=type(default), default=None)
    return p.parse_args(argv)


if __name__ == "__main__":
    common.setup_logging()
    asyncio.run(main(parse_args()))
