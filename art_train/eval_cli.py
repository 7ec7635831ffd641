"""`art eval`: score chosen checkpoints of a run on a named held-out task set.

    art eval art-demo/.art/demo/models/addition-1764581234                 # step 0 and the newest
    art eval RUN --steps all --tasks addition --split dev --k 4 --output out/

Loads the run's model (model.json) on an in-process backend, evaluates each step with
`art_core.evaluate` (pinned to ``name@step``), compares each with step 0 pair by pair, prints a
table (step, mean, 95% CI, difference vs step 0 with its CI and p-value) and writes ``eval.json``
and ``eval.png``. Nothing is written to the run's history unless ``--log`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.table import Table

import art_core as art

from .tasksets import TaskSet, load_task_set

__all__ = ["add_eval_parser", "evaluate_run", "run_eval"]

console = Console()


def add_eval_parser(sub: Any) -> None:
    e = sub.add_parser("eval", help="score checkpoints of a run on a held-out task set (mean, CI, diff vs step 0)")
    e.add_argument("run", help="a model's run directory: <root>/<project>/models/<name> (holds model.json)")
    e.add_argument("--steps", default=None,
                   help="comma-separated steps, or 'all' (default: 0 and the newest checkpoint)")
    e.add_argument("--tasks", default=None,
                   help="task set: a registered name (addition, brevity), module:attr or file.py:attr "
                        "(default: the run's metadata task_set)")
    e.add_argument("--split", default=None, help="split of the task set (default: its default, usually test)")
    e.add_argument("--k", type=int, default=None, help="samples per task (default: the task set's)")
    e.add_argument("--seed", type=int, default=0, help="evaluation seed")
    e.add_argument("--max-concurrency", type=int, default=16)
    e.add_argument("--output", default=None, help="folder for eval.json and eval.png (default: <run>/eval)")
    e.add_argument("--log", action="store_true", help="also write split rows to the run's history")


def _steps(spec: str | None, available: list[int]) -> list[int]:
    if not available:
        raise ValueError("the run has no checkpoints")
    if spec is None:
        wanted = {available[0], available[-1]}
    elif spec == "all":
        wanted = set(available)
    else:
        try:
            wanted = {int(s) for s in spec.split(",") if s.strip()}
        except ValueError:
            raise ValueError(f"--steps {spec!r}: give comma-separated step numbers, e.g. 0,4,8, or 'all'") from None
        missing = sorted(s for s in wanted if s not in available)
        if missing:
            raise ValueError(f"steps {missing} have no checkpoint in this run; checkpoints: {available}")
    if 0 in available:
        wanted.add(0)  # the base model is the reference every step is compared with
    return sorted(wanted)


async def evaluate_run(run: Path, tasks: TaskSet, *, steps: str | None = None, split: str | None = None,
                       k: int | None = None, seed: int = 0, max_concurrency: int = 16, log: bool = False,
                       device: str | None = None) -> dict[str, Any]:
    """Evaluate the chosen steps of the run at `run`; returns {"results": {step: EvalResult}, "comparisons": ...}."""
    from .local import LocalBackend

    run = Path(run)
    data = json.loads((run / "model.json").read_text()) if (run / "model.json").exists() else None
    if data is None:
        raise ValueError(f"{run} has no model.json; pass a model's run directory, <root>/<project>/models/<name>")
    model = art.TrainableModel.model_validate(data)
    rundir = art.RunDir(model.project, model.name, run.parents[2])
    chosen = _steps(steps, rundir.checkpoint_steps())
    task_list = tasks.tasks(split)
    split = split or tasks.default_split
    backend = LocalBackend(path=run.parents[2], device=device)
    results: dict[int, art.EvalResult] = {}
    try:
        await model.register(cast(art.Backend, backend))  # LocalBackend takes a Model where Backend names ModelLike
        for step in chosen:
            results[step] = await art.evaluate(
                model, tasks.rollout, task_list, step=step, k=k or tasks.k, seed=seed, max_concurrency=max_concurrency,
                task_id=tasks.task_id, split=f"eval-{split}", log=log)
            console.print(f"step {step}: {results[step].summary()}")
    finally:
        await backend.close()
    ref = chosen[0]
    comparisons = {s: art.compare(results[ref], r, seed=seed) for s, r in results.items() if s != ref}
    return {"model": model.name, "tasks": tasks.name, "split": split, "reference": ref, "results": results,
            "comparisons": comparisons, "metric": tasks.metric}


def table(out: dict[str, Any]) -> Table:
    ref = out["reference"]
    t = Table(title=f"{out['model']} on {out['tasks']}/{out['split']}")
    for col in ("step", "mean", "95% CI", f"diff vs step {ref}", "diff 95% CI", "p"):
        t.add_column(col, justify="right")
    for step, r in out["results"].items():
        c = out["comparisons"].get(step)
        diff = (f"{c.diff:+.3f}", f"[{c.ci[0]:+.3f}, {c.ci[1]:+.3f}]", f"{c.p_value:.4f}") if c else ("", "", "")
        t.add_row(str(step), f"{r.mean:.3f}", f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}]", *diff)
    return t


def plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = list(out["results"])
    rs = [out["results"][s] for s in steps]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.errorbar(steps, [r.mean for r in rs], yerr=[[r.mean - r.ci[0] for r in rs], [r.ci[1] - r.mean for r in rs]],
                fmt="o-", capsize=4)
    ax.set_xlabel("checkpoint step")
    ax.set_ylabel(f"held-out {out['metric']}")
    ax.set_title(f"{out['model']}: {out['tasks']}/{out['split']} (95% CI)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_eval(args: argparse.Namespace) -> int:
    run = Path(args.run)
    try:
        spec = args.tasks
        if spec is None:
            meta = json.loads((run / "model.json").read_text()).get("metadata", {}) if (run / "model.json").exists() else {}
            spec = meta.get("task_set")
            if spec is None:
                raise ValueError("the run does not say which task set it used; pass --tasks NAME")
        tasks = load_task_set(spec)
        out = asyncio.run(evaluate_run(run, tasks, steps=args.steps, split=args.split, k=args.k, seed=args.seed,
                                       max_concurrency=args.max_concurrency, log=args.log))
    except (ValueError, TypeError, FileNotFoundError) as exc:
        console.print(f"[red]art eval: {exc}[/red]")
        return 2
    console.print(table(out))
    folder = Path(args.output) if args.output else run / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"model": out["model"], "tasks": out["tasks"], "split": out["split"], "reference_step": out["reference"],
           "steps": {str(s): r.to_dict() for s, r in out["results"].items()},
           "comparisons": {str(s): c.to_dict() for s, c in out["comparisons"].items()}}
    art.atomic_write_text(folder / "eval.json", json.dumps(doc, indent=2) + "\n")
    plot(out, folder / "eval.png")
    console.print(f"wrote {folder / 'eval.json'} and {folder / 'eval.png'}")
    return 0
