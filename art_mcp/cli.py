"""`art autorl`: a zero-data run on an MCP server.

Without ``--judge`` the run is verified (`verified_run.py`: tasks sampled from the tool schemas,
rewards checked against gold runs). With ``--judge``, this module's RULER run:
Generate tasks from the server's tool schemas -> split train / validation -> roll out the agent on
the validation tasks (before) -> for each step: rollouts on a batch of training tasks, score each
group with RULER, train -> roll out on the validation tasks again (after) -> score each validation
task's before and after rollouts together in one RULER group, so the comparison is one judge's
relative call -> report both, and write ``report.json``.

This module imports only `art_core` (and this package). What it runs against is handed in by
its caller: `make_backend(args)` builds the backend (the bundled `LocalBackend`, or a `RemoteBackend`
for ``--backend URL``) and `make_scorer(args, judge)` the group scorer (RULER with ``--judge``). The
`art` command (`art_train.cli`) composes them; a program of your own can pass its own.

``--generator self`` and ``--judge self`` need no API: the base model itself, registered on the same
backend as a second `TrainableModel` (``<name>-base``, same config, never trained), writes the tasks
and/or judges. `make_scorer` then gets that `Model` as its judge instead of a litellm name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from art_core import (
    Backend,
    Model,
    ModelConfig,
    TrainableModel,
    TrainConfig,
    Trajectory,
    TrajectoryGroup,
    atomic_write_text,
    gather_trajectory_groups,
)

from . import verified_run
from .agent import rollout
from .autorl import (
    Task,
    TaskGenerationError,
    generate_tasks,
    import_litellm,
    load_tasks,
    save_tasks,
    split_tasks,
)
from .pool import ServerPool
from .preflight import check_llm
from .servers import BUNDLED
from .session import ServerSpec, connect
from .verified_run import SELF, SFT_EPOCHS, server_spec

console = Console(stderr=True)
logger = logging.getLogger(__name__)

Scorer = Callable[[TrajectoryGroup], Awaitable[TrajectoryGroup | None]]  # None: the group is dropped
# make_scorer(args, judge): judge is the --judge litellm name, or the served base model for --judge self
MakeScorer = Callable[[argparse.Namespace, str | Model], Scorer]

# reply caps for a served base model: a small one that never closes its JSON would run to its context's end
SELF_MAX_TOKENS = {"generator": 2048, "judge": 1024}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="art autorl",
        description="Train an agent on an MCP server's tools from zero data. Without --judge (the default): "
        "verified tasks sampled from the tool schemas, rewards checked against gold runs, SFT on the gold runs, "
        "then RL (docs/mcp.md). With --judge: LLM-written tasks scored by RULER.",
    )
    p.add_argument(
        "--mcp",
        required=True,
        help=f"server: a command line, an http(s):// URL, or bundled:NAME ({', '.join(BUNDLED)})",
    )
    p.add_argument(
        "--generator",
        help="litellm model that writes the tasks (with --judge) or rewords the verified ones (without), "
        "e.g. openai/gpt-4.1; or 'self': --base-model itself, "
        "served untrained by the run's backend as <name>-base (no API needed; a small model rarely "
        "writes valid tasks, see --tasks)",
    )
    p.add_argument(
        "--judge",
        help="litellm model that scores groups (RULER); without it, rewards are checked against gold runs "
        "(verified tasks; the server must be deterministic); or 'self': --base-model itself, served untrained "
        "by the run's backend as <name>-base (no API needed; a group the judge cannot score is dropped "
        "and counted in the report)",
    )
    p.add_argument("--base-model", required=True, help="model to train: HF id, local folder or smollm2-135m")
    p.add_argument("--generator-api-base", help="api_base for the generator (an OpenAI-compatible URL)")
    p.add_argument("--generator-api-key", help="api_key for the generator")
    p.add_argument(
        "--generator-max-tokens",
        type=int,
        help=f"cap on each generator reply (default: {SELF_MAX_TOKENS['generator']} with --generator self, "
        "else none)",
    )
    p.add_argument("--judge-api-base", help="api_base for the judge")
    p.add_argument("--judge-api-key", help="api_key for the judge")
    p.add_argument(
        "--judge-max-tokens",
        type=int,
        help=f"cap on each judge reply (default: {SELF_MAX_TOKENS['judge']} with --judge self, else none)",
    )
    p.add_argument("--backend", help="URL of an `art serve` backend (default: LocalBackend in this process)")
    p.add_argument("--backend-api-key", help="API key of that backend")
    p.add_argument("--tasks", help="JSONL of tasks to use instead of generating them")
    p.add_argument("--num-tasks", type=int, default=24, help="tasks to generate (default 24)")
    p.add_argument("--instructions", help="extra guidance for the task generator")
    p.add_argument(
        "--val-fraction", type=float, default=0.25, help="held-out share of the tasks (default 0.25)"
    )
    p.add_argument("--steps", type=int, default=4, help="training steps (default 4)")
    p.add_argument("--tasks-per-step", type=int, default=4, help="groups per training step (default 4)")
    p.add_argument("--group-size", type=int, default=4, help="rollouts per task (default 4)")
    p.add_argument(
        "--eval-rollouts", type=int, default=2, help="rollouts per held-out task, before and after"
    )
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--max-turns", type=int, default=6, help="model calls per rollout (default 6)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per model call (default 256)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--isolation", choices=["per_rollout", "shared"], default="per_rollout")
    p.add_argument("--max-processes", type=int, default=4, help="live MCP server processes at most")
    p.add_argument("--concurrency", type=int, default=8, help="rollouts at once")
    p.add_argument("--chat-template", help="chat template for the base model (text or a TRL template name)")
    p.add_argument(
        "--max-seq-len",
        type=int,
        default=4096,
        help="longest sequence served or trained (default 4096); with 'self' it bounds the judge's group "
        "prompt too (smollm2-135m takes 8192)",
    )
    p.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="recompute activations in backward (default on: agent prompts carry every tool schema, and "
        "a smollm2-135m step without it passed 24 GB)",
    )
    p.add_argument("--project", default="autorl")
    p.add_argument("--name", default="mcp-agent", help="model name")
    p.add_argument(
        "--output", default="autorl-run", help="folder for tasks, the run directory and report.json"
    )
    p.add_argument("--seed", type=int, default=0)
    verified = p.add_argument_group("verified tasks (no --judge)")
    verified.add_argument("--walk-length", type=int, default=6, help="successful calls per gold walk (default 6)")
    verified.add_argument("--sft-epochs", type=int, default=SFT_EPOCHS,
                          help=f"epochs of SFT on the training tasks' gold runs before RL; 0 skips (default {SFT_EPOCHS})")
    verified.add_argument("--tools", type=lambda v: [t for t in v.split(",") if t],
                          help="comma-separated tools whose calls become tasks (default: every tool); leave out "
                               "one that reads a clock or draws random numbers")  # fmt: skip
    verified.add_argument("--val-seed", type=int,
                          help="draw the held-out tasks from gold walks of this seed, apart from the training "
                               "tasks' (--seed); a held-out task equal to a training one is dropped. "
                               "Default: --val-fraction of one draw")  # fmt: skip
    verified.add_argument("--sft-learning-rate", type=float, default=5e-4)
    verified.add_argument("--sft-batch-size", type=int, default=4)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return p


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject option combinations that cannot work (argparse's exit 2) and fill the 'self' reply caps."""
    if args.judge and not (args.generator or args.tasks):
        parser.error("--judge (RULER) needs tasks: pass --generator MODEL or --tasks FILE.jsonl")
    for opt in ("tools", "val_seed"):
        if getattr(args, opt) is not None and (args.judge or args.tasks):
            parser.error(f"--{opt.replace('_', '-')} is for verified tasks sampled from the server; "
                         "it does not apply with --judge or --tasks")  # fmt: skip
    if args.val_seed is not None and args.val_seed == args.seed:
        parser.error(f"--val-seed {args.val_seed} equals --seed: held-out walks need a seed of their own")
    if args.val_seed is not None and not 0 < args.val_fraction < 1:
        parser.error(f"--val-fraction must be between 0 and 1, got {args.val_fraction}")
    for role in ("generator", "judge"):
        cap = getattr(args, f"{role}_max_tokens")
        if cap is not None and cap < 1:
            parser.error(f"--{role}-max-tokens must be at least 1, got {cap}")
        if getattr(args, role) != SELF:
            continue
        for opt in ("api_base", "api_key"):
            if getattr(args, f"{role}_{opt}"):
                parser.error(
                    f"--{role}-{opt.replace('_', '-')} is for a litellm {role}; with --{role} self the "
                    "backend serves --base-model itself (drop the option, or name a litellm model)"
                )
        if cap is None:
            cap = min(SELF_MAX_TOKENS[role], args.max_seq_len // 2)
            setattr(args, f"{role}_max_tokens", cap)
        if cap >= args.max_seq_len:
            parser.error(
                f"--{role}-max-tokens {cap} leaves no room for the prompt within --max-seq-len "
                f"{args.max_seq_len} (the served {role} shares it); lower the cap or raise --max-seq-len"
            )


def _params(api_base: str | None, api_key: str | None) -> dict[str, Any]:
    return {k: v for k, v in {"api_base": api_base, "api_key": api_key}.items() if v}


async def _rollouts(
    model: TrainableModel,
    pool: ServerPool,
    tasks: list[Task],
    n: int,
    args: argparse.Namespace,
    desc: str,
    after_each: Any = None,
) -> list[TrajectoryGroup]:
    def one(task: Task) -> Any:
        return rollout(
            model,
            pool,
            task,
            max_turns=args.max_turns,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
        )

    groups = [TrajectoryGroup((one(t) for _ in range(n)), metadata={"task_id": t.id}) for t in tasks]
    return await gather_trajectory_groups(
        groups, max_exceptions=0.5, max_concurrency=args.concurrency, after_each=after_each, pbar_desc=desc
    )


async def _tasks(args: argparse.Namespace, spec: ServerSpec, base: TrainableModel | None) -> list[Task]:
    """The run's tasks: loaded from ``--tasks``, or written by the generator from the server's tools."""
    if args.tasks:
        tasks = load_tasks(args.tasks)
        console.print(f"[bold]tasks[/bold]: loaded {len(tasks)} from {args.tasks}")
        return tasks
    generator, params = args.generator, _params(args.generator_api_base, args.generator_api_key)
    label = generator
    if args.generator == SELF:
        assert base is not None
        params = base.litellm_params()
        generator = params.pop("model")
        label = f"{args.base_model} (--generator self, served as {base.name})"
    if args.generator_max_tokens:
        params["max_tokens"] = args.generator_max_tokens
    console.print(f"[bold]tasks[/bold]: asking {label} for {args.num_tasks} tasks")
    return await _generate(args, spec, generator, params)


async def _generate(args: argparse.Namespace, spec: ServerSpec, generator: str, params: dict[str, Any]) -> list[Task]:
    async with connect(spec) as session:  # a {rollout_dir} in --mcp gets a temporary directory from connect
        console.print(f"  {session.label}: tools {', '.join(session.tool_names())}")
        try:
            return await generate_tasks(
                session,
                args.num_tasks,
                generator=generator,
                instructions=args.instructions,
                litellm_params=params,
                exact_schema=args.generator == SELF,  # ART's engines decode under the whole schema
            )
        except TaskGenerationError as exc:
            if args.generator != SELF:
                raise
            raise TaskGenerationError(
                f"--generator self: {args.base_model}, served untrained, produced no valid tasks ({exc}). "
                "A small base model rarely writes the task JSON: pass --tasks FILE.jsonl or a stronger --generator"
            ) from None


async def run(
    args: argparse.Namespace,
    *,
    make_backend: Callable[[argparse.Namespace], Backend],
    make_scorer: MakeScorer,
) -> dict[str, Any]:
    """The whole run for parsed `args`; `make_backend` and `make_scorer` supply the backend and the judge.

    `make_scorer(args, judge)` gets ``args.judge``, or with ``--judge self`` the served base model (a
    registered `TrainableModel` that is never trained) to judge with.
    """
    if args.judge is None:  # the default: verified tasks and rewards (verified_run.py)
        if args.generator not in (None, SELF) and not args.tasks:  # a generator rewords the tasks: check it first
            check_llm(import_litellm(), "generator", args.generator, args.generator_api_base, args.generator_api_key)
        return await verified_run.run(args, make_backend=make_backend)
    litellm = import_litellm()

    litellm.suppress_debug_info = True  # its "Provider List" banners would break up the progress output

    for role in ("judge", "generator"):  # before anything starts: a judge that cannot answer trains nothing
        if getattr(args, role) != SELF and not (role == "generator" and args.tasks):
            check_llm(litellm, role, getattr(args, role), getattr(args, f"{role}_api_base"),
                      getattr(args, f"{role}_api_key"))
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    spec = server_spec(args.mcp)
    t0 = time.time()

    backend = make_backend(args)  # nothing starts until a model registers
    config = ModelConfig(
        chat_template=args.chat_template,
        max_seq_len=args.max_seq_len,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    model = TrainableModel(name=args.name, project=args.project, base_model=args.base_model, config=config)
    # 'self': the base model served next to the agent; the same config, so both share one engine
    roles = [
        r
        for r in ("generator", "judge")
        if getattr(args, r) == SELF and not (r == "generator" and args.tasks)
    ]
    base = None
    if roles:
        base = TrainableModel(
            name=f"{args.name}-base",
            project=args.project,
            base_model=args.base_model,
            config=config,
            report_to=[],
        )
    judge: str | Model = args.judge
    judge_label = args.judge
    if base is not None and args.judge == SELF:
        judge, judge_label = base, f"{args.base_model} (--judge self, served as {base.name})"
    scorer = make_scorer(args, judge)
    judged = {"groups_scored": 0, "groups_dropped": 0}

    async def score(group: TrajectoryGroup) -> TrajectoryGroup | None:
        result = await scorer(group)
        judged["groups_dropped" if result is None else "groups_scored"] += 1
        return result

    try:
        if base is not None:
            console.print(
                f"[bold]self[/bold]: serving {args.base_model} untrained as {base.name} ({' and '.join(roles)})"
            )
            await base.register(backend)
        # 1. tasks
        tasks = await _tasks(args, spec, base)
        train, val = split_tasks(tasks, val_fraction=args.val_fraction, seed=args.seed)
        save_tasks(out / "tasks.train.jsonl", train)
        save_tasks(out / "tasks.val.jsonl", val)
        console.print(f"  {len(train)} training and {len(val)} held-out tasks written to {out}")

        # 2. the model
        console.print(f"[bold]model[/bold]: registering {args.name} on {args.base_model}")
        await model.register(backend)
        async with ServerPool(spec, isolation=args.isolation, max_processes=args.max_processes) as pool:
            # 3. held-out rollouts before training
            console.print(f"[bold]eval before[/bold]: {len(val)} tasks x {args.eval_rollouts}")
            before = await _rollouts(model, pool, val, args.eval_rollouts, args, "eval before")
            # 4. training
            history = []
            for step in range(args.steps):
                batch = [
                    train[(step * args.tasks_per_step + i) % len(train)] for i in range(args.tasks_per_step)
                ]
                console.print(
                    f"[bold]step {step + 1}/{args.steps}[/bold]: {len(batch)} tasks x {args.group_size}"
                )
                groups = await _rollouts(model, pool, batch, args.group_size, args, f"step {step + 1}", score)
                if not groups:
                    console.print("  [yellow]the judge scored no group; skipping this step[/yellow]")
                    continue
                rewards = [t.reward for g in groups for t in g.trajectories]
                result = await model.train(groups, config=TrainConfig(learning_rate=args.learning_rate))
                history.append(
                    {"step": result.step, "reward": statistics.fmean(rewards), "groups": len(groups)}
                )
                console.print(f"  trained step {result.step}: mean RULER reward {history[-1]['reward']:.3f}")
            # 5. held-out rollouts after training, judged together with the ones before
            console.print(f"[bold]eval after[/bold]: {len(val)} tasks x {args.eval_rollouts}")
            after = await _rollouts(model, pool, val, args.eval_rollouts, args, "eval after")
        report = await _compare(before, after, score)
        final_step = await model.get_step()
        await model.log([g for g in (*before, *after) if g.trajectories], split="val", step=final_step)
    finally:
        await backend.close()

    report.update(
        {
            "history": history,
            "step": final_step,
            "tasks": {"train": len(train), "val": len(val)},
            "judge": {"model": judge_label, **judged},
            "seconds": round(time.time() - t0, 1),
            "output": str(out),
        }
    )
    atomic_write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    _print_report(report)
    return report


async def _compare(before: list[TrajectoryGroup], after: list[TrajectoryGroup], score: Any) -> dict[str, Any]:
    """Judge each held-out task's before and after rollouts in one group; mean score per phase."""
    by_task: dict[str, dict[str, list[Trajectory]]] = {}
    for phase, groups in (("before", before), ("after", after)):
        for g in groups:
            for t in g.trajectories:
                t.metadata["phase"] = phase
                by_task.setdefault(g.metadata["task_id"], {"before": [], "after": []})[phase].append(t)
    scores: dict[str, list[float]] = {"before": [], "after": []}
    other: dict[str, list[float]] = {"before": [], "after": []}
    for task_id, phases in by_task.items():
        joint = TrajectoryGroup([*phases["before"], *phases["after"]], metadata={"task_id": task_id})
        judged = await score(joint)
        if judged is None:
            continue
        for t in judged.trajectories:
            scores[t.metadata["phase"]].append(t.reward)
    for phase, groups in (("before", before), ("after", after)):
        other[phase] = [float(t.metrics.get("finished", False)) for g in groups for t in g.trajectories]
    mean = lambda xs: round(statistics.fmean(xs), 4) if xs else None  # noqa: E731
    return {
        "val_ruler_before": mean(scores["before"]),
        "val_ruler_after": mean(scores["after"]),
        "val_finished_before": mean(other["before"]),
        "val_finished_after": mean(other["after"]),
        "val_scored": {k: len(v) for k, v in scores.items()},
    }


def _print_report(report: dict[str, Any]) -> None:
    table = Table(title="held-out tasks, before vs after training")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for label, key in (("RULER score (judged together)", "val_ruler"), ("finished the task", "val_finished")):
        table.add_row(label, str(report[f"{key}_before"]), str(report[f"{key}_after"]))
    console.print(table)
    judge = report["judge"]
    if judge["groups_dropped"]:
        total = judge["groups_dropped"] + judge["groups_scored"]
        console.print(
            f"[yellow]the judge ({judge['model']}) could not score {judge['groups_dropped']} of {total} groups; "
            "they were dropped (the log says why)[/yellow]"
        )
    console.print(f"step {report['step']}, {report['seconds']} s; report: {report['output']}/report.json")


def autorl_main(
    argv: list[str] | None = None,
    *,
    make_backend: Callable[[argparse.Namespace], Backend],
    make_scorer: MakeScorer,
) -> int:
    """Parse `argv`, run, print the report; the exit status. ``art autorl`` calls it (see `art_train.cli`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        report = asyncio.run(run(args, make_backend=make_backend, make_scorer=make_scorer))
    except KeyboardInterrupt:
        console.print("[red]interrupted[/red]")
        return 130
    except Exception as exc:  # the CLI's last stop: show the cause, not a traceback
        logger.debug("autorl failed", exc_info=True)
        console.print(f"[red]art autorl failed: {type(exc).__name__}: {exc}[/red]")
        return 1
    if not report["history"] and report.get("mode") == "verified" and not report.get("sft"):
        console.print("[red]art autorl trained nothing: no SFT epoch and no RL step ran (see --sft-epochs, --steps)[/red]")
        return 1
    if not report["history"] and report.get("mode") != "verified":
        judge = report["judge"]
        console.print(f"[red]art autorl trained nothing: in {args.steps} step(s) the judge ({judge['model']}) scored "
                      f"{judge['groups_scored']} group(s) and dropped {judge['groups_dropped']} (the log says why); "
                      "fix the judge, or check that the rollouts differ[/red]")
        return 1
    return 0


__all__ = ["SELF", "MakeScorer", "Scorer", "autorl_main", "build_parser", "check_args", "run", "server_spec"]
