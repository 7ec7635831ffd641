"""ART-E: SFT warm-up from a scripted teacher, then RL (GRPO) on the same LoRA, scored on held-out inboxes.

    python -m examples.art_e.train                    # CPU configuration (see CONFIGS["cpu"])
    python -m examples.art_e.train --config gpu       # GPU configuration
    python -m examples.art_e.train --config tiny      # a random tiny model: a smoke run in seconds

Stages, all on one LoRA: evaluate the base model (step 0) on held-out questions; SFT on the
teacher's trajectories (one `train_sft` call per batch, the learning rate following a cosine
schedule); evaluate; GRPO on rollouts over the train inboxes with ART-E's reward (or RULER's with
``--judge``); evaluate. Held-out accuracy (1 for a correct answer, else 0) is compared pair by pair
between stages through `art_core.evaluate` / `art_core.compare`. Held-out questions come from inboxes
that no training stage ever sees. Run from the repository root (``python -m``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import resource
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import art_core as art

from ..train_common import figures, record
from .inbox import Inbox, Question, dataset, write_db
from .reward import WRONG, check_wrong
from .rollout import InboxServers, rollout
from .teacher import teach_inboxes

logger = logging.getLogger("art_e")


@dataclass(frozen=True)
class Config:
    base_model: str
    train_inboxes: int = 8
    heldout_inboxes: int = 4
    eval_questions: int = 40  # held-out questions per evaluation (the first n, fixed across stages)
    eval_concurrency: int = 8  # evaluation rollouts run at once (the engine decodes them as one batch)
    sft_examples: int = 48  # teacher trajectories used (0 skips SFT)
    sft_epochs: int = 2
    sft_batch: int = 8
    sft_lr: float = 3e-4
    sft_mask: str = "all"  # "last": only the final assistant turn is a target
    rl_steps: int = 4  # 0 skips RL
    questions_per_step: int = 4
    group_size: int = 4
    rl_lr: float = 1e-4
    rl_temperature: float = 1.0  # sampling temperature of the RL rollouts
    rl_scale_rewards: bool = True  # divide each group's advantages by its std (TrainConfig.scale_rewards)
    rl_wrong_reward: float = WRONG  # a wrong answer's base reward in RL (ART-E's -1; -2 < it < -0.2); evaluations keep -1
    max_turns: int = 6
    max_tokens: int = 80
    max_seq_len: int = 2048
    lora_rank: int = 8
    autocast: str = ""  # ModelConfig.autocast: "auto" (bfloat16 where the CPU has it natively), "bfloat16", "" for none
    sync_probe_tokens: int | None = None  # trained tokens in the weight-sync probe (None: the backend's default; 0: identity + fixed probe)


CONFIGS = {
    # SmolLM2-135M on 2 CPU cores; 120 SFT examples and 24 questions fit 30 minutes in float32 (README)
    "cpu": Config(base_model="smollm2-135m", train_inboxes=12, eval_questions=24, sft_examples=120, sft_epochs=1,
                  sft_batch=4, sft_lr=5e-4, rl_steps=2, rl_lr=1e-3, rl_temperature=0.7, rl_scale_rewards=False,
                  autocast="auto", sync_probe_tokens=0),  # fmt: skip
    # the 0.5B Qwen with native tool calls, or any bigger model, on one GPU
    "gpu": Config(
        base_model="qwen2.5-0.5b",
        train_inboxes=32,
        heldout_inboxes=8,
        eval_questions=150,
        sft_examples=600,
        sft_epochs=2,
        sft_batch=16,
        sft_lr=1e-4,
        rl_steps=40,
        questions_per_step=8,
        group_size=8,
        rl_lr=1e-5,
        max_turns=8,
        max_tokens=256,
        max_seq_len=4096,
        lora_rank=16,
    ),  # fmt: skip
    # a random tiny model: checks the whole pipeline, learns nothing
    "tiny": Config(
        base_model="tiny",
        train_inboxes=1,
        heldout_inboxes=1,
        eval_questions=3,
        sft_examples=4,
        sft_epochs=1,
        sft_batch=2,
        rl_steps=1,
        questions_per_step=2,
        group_size=2,
        max_turns=2,
        max_tokens=8,
        max_seq_len=2048,
        lora_rank=4,
    ),  # fmt: skip
}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Agent:
    """What the stages share: the model, the inbox servers, the questions."""

    def __init__(self, model: art.TrainableModel, servers: InboxServers, inboxes: list[Inbox], cfg: Config):
        self.model, self.servers, self.cfg = model, servers, cfg
        self.owners = {i.id: i.owner.name for i in inboxes}

    async def rollout(self, model: art.Model, q: Question, *, temperature: float, seed: int | None = None,
                      wrong_reward: float = WRONG) -> art.Trajectory:  # fmt: skip
        extra = {"seed": seed} if seed is not None else None
        async with self.servers.session(q.inbox_id) as session:
            return await rollout(model, session, q, self.owners[q.inbox_id], max_turns=self.cfg.max_turns,
                                 temperature=temperature, max_tokens=self.cfg.max_tokens, extra_body=extra,
                                 wrong_reward=wrong_reward)  # fmt: skip

    async def accuracy_rollout(
        self, model: art.Model, q: Question, seed: int | None = None
    ) -> art.Trajectory:
        """Greedy rollout scored 1 for a correct answer, else 0 (ART-E's reward kept in metrics)."""
        traj = await self.rollout(model, q, temperature=0.0, seed=seed)
        traj.metrics["art_e_reward"] = traj.reward
        traj.reward = traj.metrics["correct"]
        return traj

    async def evaluate(self, questions: list[Question], label: str) -> Any:
        result = await art.evaluate(self.model, self.accuracy_rollout, questions, task_id=lambda q: q.id,
                                    max_concurrency=self.cfg.eval_concurrency, max_exceptions=0.1, show_progress=False)  # fmt: skip
        mean_reward = sum(t.metrics["art_e_reward"] for g in result.groups for t in g.trajectories) / max(
            1, sum(len(g.trajectories) for g in result.groups)
        )
        logger.info("%s: %s; mean ART-E reward %.3f", label, result.summary(), mean_reward)
        return result, mean_reward


async def sft_stage(
    agent: Agent, db: Path, train: list[Inbox], run: Path, cfg: Config, seed: int
) -> dict[str, Any]:
    records = await teach_inboxes(db, train)
    path = run / "teacher.jsonl"
    art.write_sft_jsonl(path, records)
    data = art.load_sft_jsonl(path, mask=cfg.sft_mask)  # checked on load, as any user file would be
    random.Random(seed).shuffle(data)
    data = data[: cfg.sft_examples]
    t0 = time.perf_counter()
    losses = []
    for batch in art.iterate_sft(data, batch_size=cfg.sft_batch, num_epochs=cfg.sft_epochs, peak_lr=cfg.sft_lr,
                                 schedule="cosine", warmup_ratio=0.1, seed=seed):  # fmt: skip
        config = art.SFTConfig(learning_rate=batch.learning_rate, batch_size=len(batch.trajectories),
                               max_seq_len=cfg.max_seq_len)  # fmt: skip
        result = await agent.model.train_sft(batch.trajectories, config, verbose=False)
        losses.append(result.metrics["loss"])
        logger.info("sft step %d/%d: lr %.2e, loss %.3f", batch.step + 1, batch.total_steps,
                    batch.learning_rate, result.metrics["loss"])  # fmt: skip
    return {"examples": len(data), "steps": len(losses), "first_loss": losses[0], "last_loss": losses[-1],
            "wall_s": time.perf_counter() - t0}  # fmt: skip


async def rl_stage(agent: Agent, questions: list[Question], cfg: Config, seed: int, judge: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    after_each = None
    if judge is not None:
        import ruler

        async def after_each(group: art.TrajectoryGroup) -> art.TrajectoryGroup | None:
            return await ruler.score_group(group, judge=judge["model"], litellm_params=judge["params"],
                                           swallow_exceptions=True)  # fmt: skip

    t0 = time.perf_counter()
    history = []
    batches = art.iterate_dataset(
        questions, groups_per_step=cfg.questions_per_step, num_epochs=100, seed=seed
    )
    for batch, _ in zip(batches, range(cfg.rl_steps), strict=False):
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(agent.rollout(agent.model, q, temperature=cfg.rl_temperature,
                                               wrong_reward=cfg.rl_wrong_reward) for _ in range(cfg.group_size))
             for q in batch.items),
            after_each=after_each, max_exceptions=0.25, show_progress=False,
        )  # fmt: skip
        trajs = [t for g in groups for t in g.trajectories]
        config = art.TrainConfig(learning_rate=cfg.rl_lr, max_seq_len=cfg.max_seq_len,
                                 scale_rewards=cfg.rl_scale_rewards)  # fmt: skip
        result = await agent.model.train(groups, config=config, verbose=False)
        row = {"step": result.step, "reward": sum(t.reward for t in trajs) / max(1, len(trajs)),
               "correct": sum(t.metrics["correct"] for t in trajs) / max(1, len(trajs)),
               "format_error": sum(t.metrics["format_error"] for t in trajs) / max(1, len(trajs))}  # fmt: skip
        history.append(row)
        logger.info("rl step %d: %s", result.step, {k: round(v, 3) for k, v in row.items()})
    return {"steps": len(history), "history": history, "wall_s": time.perf_counter() - t0}


def stage_dict(result: Any, mean_reward: float) -> dict[str, Any]:
    return {"step": result.step, "accuracy": result.mean, "ci": list(result.ci), "art_e_reward": mean_reward,
            "questions": len(result.task_ids), "task_ids": result.task_ids, "scores": result.scores}  # fmt: skip


def start_from(source: Path, run: Path, name: str, cfg: Config) -> dict[str, Any]:
    """Copy the SFT checkpoint of an earlier run (its folder: `--output` of that run) into this run as
    its starting step; return that run's results. RL variants can then share one SFT warm-up."""
    results = source / "results.json"
    if not results.is_file():
        raise SystemExit(f"--init-from {source}: no results.json there; give the --output folder of an "
                         "earlier train.py run that finished its SFT stage")  # fmt: skip
    prior = json.loads(results.read_text())
    sft = prior.get("stages", {}).get("sft")
    if sft is None:
        raise SystemExit(f"--init-from {source}: that run has no evaluated SFT stage in results.json; "
                         "let it run past SFT (or use --rl-steps 0) first")  # fmt: skip
    for key in ("base_model", "lora_rank", "max_seq_len"):
        if prior["settings"][key] != getattr(cfg, key):
            raise SystemExit(f"--init-from {source}: that run used {key}={prior['settings'][key]!r}, this one "
                             f"{getattr(cfg, key)!r}; pass --{key.replace('_', '-')} {prior['settings'][key]}")  # fmt: skip
    found = sorted((source / "art").glob(f"*/models/*/checkpoints/{sft['step']:04d}"))
    if len(found) != 1:
        raise SystemExit(f"--init-from {source}: expected one checkpoint {sft['step']} (its SFT step) under "
                         f"{source / 'art'}, found {len(found)}")  # fmt: skip
    dest = run / "art" / "art-e" / "models" / name / "checkpoints"
    if dest.exists():
        raise SystemExit(f"--init-from: {run} already holds checkpoints of {name}; give a new --output folder")  # fmt: skip
    shutil.copytree(found[0], dest / found[0].name)
    logger.info("starting from %s (step %d of %s)", found[0], sft["step"], source)
    return prior


def earlier_stage(prior: dict[str, Any], name: str, split: str, questions: list[Question]) -> Any:
    """An earlier run's evaluation of stage `name` as (EvalResult, mean reward), if it scored these very
    questions; None otherwise (runs before per-question scores were kept, another split)."""
    stage = prior.get("stages", {}).get(name, {})
    if prior.get("split") != split or stage.get("task_ids") != [q.id for q in questions]:
        return None
    result = art.EvalResult(model=f"{prior.get('name', 'earlier')}@{stage['step']}", step=stage["step"],
                            task_ids=stage["task_ids"], rewards=[[s] for s in stage["scores"]])  # fmt: skip
    return result, stage["art_e_reward"]


def summarise(out: dict[str, Any], stages: dict[str, Any], wall: float) -> dict[str, Any]:
    """Put the stages so far, their paired differences, wall time and RSS in `out`; return the comparisons."""
    out["stages"] = {name: stage_dict(*r) for name, r in stages.items()}
    names = list(stages)
    pairs = [(names[0], n) for n in names[1:]] + ([("sft", "rl")] if {"sft", "rl"} <= set(stages) else [])
    compared = {f"{b}-{a}": art.compare(stages[a][0], stages[b][0]) for a, b in pairs}
    out["differences"] = {
        k: {"diff": c.diff, "ci": list(c.ci), "p_value": c.p_value} for k, c in compared.items()
    }
    # the same figures in the shape every example records (benchmarks/examples_table.py reads it)
    out.update(figures({{"rl": "sft_rl"}.get(n, n): stages[n][0] for n in names}, {"accuracy": None}))
    out["wall_s"] = wall
    out["peak_rss_mb"] = peak_rss_mb()
    return compared


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from art_train import LocalBackend

    cfg = CONFIGS[args.config]
    overrides = {k: v for k, v in vars(args).items() if k in Config.__dataclass_fields__ and v is not None}
    cfg = replace(cfg, **overrides)
    try:
        check_wrong(cfg.rl_wrong_reward)
    except ValueError as exc:
        raise SystemExit(f"--rl-wrong-reward: {exc}") from None
    if cfg.eval_concurrency < 1:
        raise SystemExit(f"--eval-concurrency {cfg.eval_concurrency}: at least 1 evaluation rollout must run at once")
    run = Path(args.output or tempfile.mkdtemp(prefix="art-e-"))
    run.mkdir(parents=True, exist_ok=True)
    base_model = cfg.base_model
    if base_model == "tiny":
        from art_train.models import build_tiny_model

        base_model = str(build_tiny_model(run / "tiny-model"))
    train, heldout = dataset(cfg.train_inboxes, cfg.heldout_inboxes, split=args.split)
    db = run / "inboxes.sqlite"
    db.unlink(missing_ok=True)
    write_db([*train, *heldout], db)
    train_q = [q for i in train for q in i.questions]
    eval_q = [q for i in heldout for q in i.questions][: cfg.eval_questions]
    judge = (
        {"model": args.judge, "params": {"api_base": args.judge_api_base, "api_key": "none"}}
        if args.judge
        else None
    )

    t0 = time.perf_counter()
    name = f"art-e-{args.config}-s{args.seed}"
    prior = start_from(Path(args.init_from), run, name, cfg) if args.init_from else None
    model = art.TrainableModel(name=name, project="art-e", base_model=base_model,
                               config=art.ModelConfig(lora_rank=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank,
                                                      max_seq_len=cfg.max_seq_len, seed=args.seed,
                                                      autocast=cfg.autocast or None))  # fmt: skip
    backend = LocalBackend(path=run / "art", sync_probe_tokens=cfg.sync_probe_tokens)
    out: dict[str, Any] = {"config": args.config, "split": args.split, "model": cfg.base_model, "settings": asdict(cfg), "seed": args.seed,
                           "name": name, "train_questions": len(train_q), "heldout_inboxes": [i.id for i in heldout]}  # fmt: skip
    stages: dict[str, Any] = {}
    compared: dict[str, Any] = {}

    async def stage(name: str, label: str, earlier: Any = None) -> None:
        stages[name] = earlier or await agent.evaluate(eval_q, label)
        compared.update(summarise(out, stages, time.perf_counter() - t0))
        (run / "results.json").write_text(json.dumps(out, indent=2))  # kept if a later stage fails

    try:
        await model.register(backend)
        async with InboxServers(db) as servers:
            agent = Agent(model, servers, [*train, *heldout], cfg)
            # from an earlier run: its SFT stage, evaluated again unless it scored these very questions
            if prior is not None:
                out["init_from"], out["sft"] = str(args.init_from), prior.get("sft")
                await stage("sft", "after SFT", earlier_stage(prior, "sft", args.split, eval_q))
                logger.info("after SFT (%s): %s", args.init_from, stages["sft"][0].summary())
            else:
                await stage("base", "base")
            if cfg.sft_examples > 0 and prior is None:
                out["sft"] = await sft_stage(agent, db, train, run, cfg, args.seed)
                await stage("sft", "after SFT")
            if cfg.rl_steps > 0:
                out["rl"] = await rl_stage(agent, train_q, cfg, args.seed, judge)
                await stage("rl", "after RL")
    finally:
        await backend.close()
    for key, c in compared.items():
        print(f"\n{key.replace('-', ' vs ')} (held-out accuracy):\n{c.table()}")  # noqa: T201 - the script's report
    if args.record:
        record(Path(args.record), "art_e", out)
    print(json.dumps({k: out[k] for k in ("stages", "differences", "wall_s", "peak_rss_mb")}, indent=2))  # noqa: T201
    return out


def _flag(text: str) -> bool:
    """A boolean setting on the command line: true/false, yes/no, 1/0."""
    value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=["heldout", "dev"], default="heldout",
                   help="evaluate on held-out inboxes (9000+) or dev ones (5000+), where recipes are chosen")  # fmt: skip
    p.add_argument("--output", help="run folder (default: a new temporary folder)")
    p.add_argument(
        "--record", help="add the run's figures to this JSON file (benchmarks/results/examples.json)"
    )
    p.add_argument("--init-from", metavar="RUN",
                   help="start from the SFT checkpoint of an earlier run's --output folder: no base evaluation, no SFT")  # fmt: skip
    p.add_argument("--judge", help="score RL groups with RULER using this litellm model (e.g. openai/NAME)")
    p.add_argument("--judge-api-base", help="the judge's OpenAI-compatible base URL")
    for name in Config.__dataclass_fields__:  # every setting can be overridden: --rl-steps 3
        kind = type(getattr(CONFIGS["cpu"], name))
        p.add_argument(f"--{name.replace('_', '-')}", type=_flag if kind is bool else kind, default=None)
    return p.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "mcp", "art_mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    asyncio.run(main(parse_args()))
