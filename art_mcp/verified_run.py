"""`art autorl` without a judge: verified tasks, SFT on their gold runs, GRPO on checked rewards.

Tasks come from the server's tool schemas alone (`verified.generate_verified_tasks`) and are
split into training and held-out tasks (or, with ``--val-seed``, the held-out tasks come from gold
walks of their own seed, and any that equals a training task is dropped). The held-out tasks are
answered greedily and scored against their gold runs after each stage: base (the untrained model),
SFT (one `train_sft` on the training tasks' gold runs, skipped with ``--sft-epochs 0``), and SFT+RL
(``--steps`` GRPO steps on the training tasks, each rollout scored against its task's gold run).
Each stage gets a 95% interval (`art_core.evaluate`), each pair of stages a paired difference with
its interval (`art_core.compare`); ``report.json`` holds them all.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from art_core import (
    Backend,
    EvalResult,
    Model,
    ModelConfig,
    SFTConfig,
    TrainableModel,
    TrainConfig,
    TrajectoryGroup,
    atomic_write_text,
    compare,
    evaluate,
    gather_trajectory_groups,
)

from .autorl import save_tasks, split_tasks
from .pool import ServerPool
from .servers import bundled_server
from .session import ServerSpec, connect
from .verified import (
    VerifiedTask,
    generate_verified_tasks,
    gold_trajectory,
    load_verified_tasks,
    reword_tasks,
    verified_rollout,
)

console = Console(stderr=True)
logger = logging.getLogger(__name__)

SFT_EPOCHS = 2  # --sft-epochs default without a judge


async def _split(
    args: argparse.Namespace, spec: ServerSpec, base: Model | None
) -> tuple[list[VerifiedTask], list[VerifiedTask]]:
    """Training and held-out tasks: one draw split by --val-fraction, or with --val-seed two draws."""
    if args.tasks:
        tasks = load_verified_tasks(args.tasks)
        console.print(f"[bold]tasks[/bold]: loaded {len(tasks)} verified tasks from {args.tasks}")
        return split_tasks(tasks, val_fraction=args.val_fraction, seed=args.seed)
    if getattr(args, "val_seed", None) is None:
        tasks = await _reword(args, base, await _sample(args, spec, args.num_tasks, args.seed))
        return split_tasks(tasks, val_fraction=args.val_fraction, seed=args.seed)
    n_val = max(1, round(args.num_tasks * args.val_fraction))
    train = await _sample(args, spec, args.num_tasks - n_val, args.seed)
    seen = {t.id for t in train}
    drawn = await _sample(args, spec, 2 * n_val, args.val_seed)  # room for the ones dropped
    val = [t for t in drawn if t.id not in seen][:n_val]
    console.print(f"  held-out: {len(val)} tasks of seed {args.val_seed} "
                  f"({sum(t.id in seen for t in drawn)} equal to a training task dropped)")  # fmt: skip
    if not val:
        raise ValueError(f"every held-out task of seed {args.val_seed} is also a training task; ask for more tasks")
    return await _reword(args, base, train), await _reword(args, base, val)


async def _sample(args: argparse.Namespace, spec: ServerSpec, n: int, seed: int) -> list[VerifiedTask]:
    console.print(
        f"[bold]tasks[/bold]: sampling {n} verified tasks from the tool schemas (gold runs, seed {seed})"
    )
    tasks = await generate_verified_tasks(spec, n, seed=seed, walk_length=args.walk_length,
                                          tools=getattr(args, "tools", None))  # fmt: skip
    kinds = {k: sum(t.kind == k for t in tasks) for k in ("answer", "state")}
    console.print(f"  {len(tasks)} tasks: {kinds['answer']} checked by answer, {kinds['state']} by state")
    return tasks


async def _reword(args: argparse.Namespace, base: Model | None, tasks: list[VerifiedTask]) -> list[VerifiedTask]:
    """The tasks worded by --generator (the kept ones only), or as sampled without one."""
    if not args.generator:
        return tasks
    params = {k: v for k, v in {"api_base": args.generator_api_base, "api_key": args.generator_api_key,
                                "max_tokens": args.generator_max_tokens}.items() if v}  # fmt: skip
    generator = args.generator
    if base is not None:
        params.update(base.litellm_params())
        generator = params.pop("model")
    console.print(f"  rewording {len(tasks)} tasks with {args.generator}")
    return await reword_tasks(tasks, generator, litellm_params=params)


SELF = "self"  # --generator / --judge value: the base model, served untrained by the run's backend


def server_spec(text: str) -> ServerSpec:
    """`--mcp`'s value as a server spec: bundled:NAME, or a command line or URL as it is."""
    if text.startswith("bundled:"):
        return bundled_server(text.removeprefix("bundled:"))
    return text


async def run(
    args: argparse.Namespace, *, make_backend: Callable[[argparse.Namespace], Backend]
) -> dict[str, Any]:
    """The whole verified run for parsed `args` (see the module docstring); returns the report."""
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    spec = server_spec(args.mcp)
    t0 = time.time()
    backend = make_backend(args)
    config = ModelConfig(chat_template=args.chat_template, max_seq_len=args.max_seq_len,
                         gradient_checkpointing=args.gradient_checkpointing, seed=args.seed)  # fmt: skip
    model = TrainableModel(name=args.name, project=args.project, base_model=args.base_model, config=config)
    base = None
    if args.generator == SELF and not args.tasks:
        base = TrainableModel(name=f"{args.name}-base", project=args.project, base_model=args.base_model,
                              config=config, report_to=[])  # fmt: skip
    stages: dict[str, EvalResult] = {}
    history: list[dict[str, Any]] = []
    sft: dict[str, Any] | None = None
    try:
        if base is not None:
            await base.register(backend)
        train, val = await _split(args, spec, base)
        tasks = train + val
        save_tasks(out / "tasks.train.jsonl", train)
        save_tasks(out / "tasks.val.jsonl", val)
        console.print(f"  {len(train)} training and {len(val)} held-out tasks written to {out}")
        isolation = args.isolation
        if isolation == "shared" and any(t.setup or t.kind == "state" for t in tasks):
            console.print(
                "  [yellow]--isolation shared: state tasks need their own server; using per_rollout[/yellow]"
            )
            isolation = "per_rollout"

        console.print(f"[bold]model[/bold]: registering {args.name} on {args.base_model}")
        await model.register(backend)
        async with ServerPool(spec, isolation=isolation, max_processes=args.max_processes) as pool:
            kw = {"max_turns": args.max_turns, "max_tokens": args.max_tokens}

            async def greedy(at: Model, task: VerifiedTask, seed: int | None = None) -> Any:
                return await verified_rollout(at, pool, task, temperature=0.0, **kw,
                                              extra_body={"seed": seed} if seed is not None else None)  # fmt: skip

            async def stage(name: str) -> None:
                stages[name] = await evaluate(model, greedy, val, task_id=lambda t: t.id, seed=args.seed,
                                              max_concurrency=args.concurrency, max_exceptions=0.1)  # fmt: skip
                console.print(f"  {name}: held-out verified reward {stages[name].summary()}")

            console.print(f"[bold]eval base[/bold]: {len(val)} held-out tasks, greedy")
            await stage("base")
            if args.sft_epochs > 0:
                async with connect(spec) as session:
                    tools = session.openai_tools()
                data = [gold_trajectory(t, tools) for t in train]
                console.print(f"[bold]sft[/bold]: {len(data)} gold runs x {args.sft_epochs} epochs")
                result = await model.train_sft(data, SFTConfig(learning_rate=args.sft_learning_rate,
                                                               num_epochs=args.sft_epochs, batch_size=args.sft_batch_size,
                                                               max_seq_len=args.max_seq_len), verbose=False)  # fmt: skip
                sft = {"examples": len(data), "step": result.step, "loss": result.metrics.get("loss")}
                await stage("sft")
            for step in range(args.steps):
                batch = [
                    train[(step * args.tasks_per_step + i) % len(train)] for i in range(args.tasks_per_step)
                ]
                groups = [TrajectoryGroup((verified_rollout(model, pool, t, temperature=args.temperature, **kw)
                                           for _ in range(args.group_size)), metadata={"task_id": t.id})
                          for t in batch]  # fmt: skip
                groups = await gather_trajectory_groups(groups, max_exceptions=0.5, max_concurrency=args.concurrency,
                                                        pbar_desc=f"step {step + 1}")  # fmt: skip
                rewards = [t.reward for g in groups for t in g.trajectories]
                result = await model.train(
                    groups, config=TrainConfig(learning_rate=args.learning_rate), verbose=False
                )
                history.append({"step": result.step, "reward": statistics.fmean(rewards) if rewards else None,
                                "groups": len(groups)})  # fmt: skip
                console.print(f"  step {result.step}: mean verified reward {history[-1]['reward']}")
            if args.steps > 0:
                await stage("sft_rl" if sft else "rl")
    finally:
        await backend.close()
    report = {
        "mode": "verified",
        "stages": {name: r.to_dict() for name, r in stages.items()},
        "differences": {
            f"{b} - {a}": compare(stages[a], stages[b]).to_dict() for a, b in _pairs(list(stages))
        },  # fmt: skip
        "sft": sft,
        "history": history,
        "tasks": {"train": len(train), "val": len(val), "val_state": sum(t.kind == "state" for t in val)},
        "seconds": round(time.time() - t0, 1),
        "output": str(out),
    }
    atomic_write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    _print(report)
    return report


def _pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]


def _print(report: dict[str, Any]) -> None:
    table = Table(title="held-out verified reward (greedy), 95% intervals")
    table.add_column("stage / difference")
    table.add_column("mean", justify="right")
    table.add_column("95% interval", justify="right")
    for name, r in report["stages"].items():
        table.add_row(name, f"{r['mean']:.3f}", f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]")
    for name, d in report["differences"].items():
        table.add_row(name, f"{d['diff']:+.3f}", f"[{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]")
    console.print(table)
    console.print(f"{report['seconds']} s; report: {report['output']}/report.json")


__all__ = ["SFT_EPOCHS", "run"]
