"""Held-out evaluation: score a model (a checkpoint, or any prompted model) on tasks it never trained on.

    result = await art.evaluate(model, rollout, val_tasks, k=4)           # newest checkpoint
    base = await art.evaluate(model, rollout, val_tasks, k=4, step=0)     # the base model (empty LoRA)
    print(art.compare(base, result).table())                              # paired difference, CI, p

The unit of evaluation is the task: each task's score is the mean reward of its `k` samples, the
result's mean is the mean over tasks, and the 95% interval is a percentile bootstrap over tasks.
Two results on the same tasks are compared pair by pair (same task, same sample seeds), which is
far tighter than comparing two independent means.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from .backend import TrainResult
from .gather import gather_trajectory_groups
from .model import Model
from .stats import bootstrap_ci, pass_at_k, permutation_p_value
from .trajectory import Trajectory, TrajectoryGroup

__all__ = ["Comparison", "EvalResult", "PeriodicEval", "compare", "evaluate"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Rollout = Callable[..., Awaitable[Trajectory]]


def sample_seed(seed: int, task_index: int, sample: int) -> int:
    """The seed handed to sample `sample` of task `task_index`: the same for every checkpoint compared."""
    return (seed * 1_000_003 + task_index * 1_009 + sample) % 2**31


@dataclass
class EvalResult:
    """Scores of one model on a task list.

    `rewards[i]` holds the rewards of task `task_ids[i]`'s samples (failed samples are left out;
    a task with no successful sample is listed in `failed_tasks` instead).
    """

    model: str  # the served name that answered, e.g. "agent-001@7" or "gpt-4.1-mini"
    step: int | None
    task_ids: list[str]
    rewards: list[list[float]]
    k: int = 1
    seed: int = 0
    exceptions: int = 0
    failed_tasks: list[str] = field(default_factory=list)
    groups: list[TrajectoryGroup] = field(default_factory=list, repr=False)

    @property
    def scores(self) -> list[float]:
        """Per-task score: the mean reward of the task's samples."""
        return [math.fsum(r) / len(r) for r in self.rewards]

    @property
    def mean(self) -> float:
        scores = self.scores
        return math.fsum(scores) / len(scores) if scores else float("nan")

    @cached_property
    def ci(self) -> tuple[float, float]:
        """95% percentile-bootstrap interval of the mean over tasks (seeded by `seed`)."""
        if not self.rewards:
            return float("nan"), float("nan")
        return bootstrap_ci(self.scores, seed=self.seed)

    @property
    def binary(self) -> bool:
        """True when every reward is 0 or 1, so pass@k is defined."""
        return bool(self.rewards) and all(r in (0.0, 1.0) for rs in self.rewards for r in rs)

    def pass_at(self, k: int | None = None) -> float | None:
        """Mean over tasks of the unbiased pass@k (default k = samples per task); None unless rewards are 0/1."""
        if not self.binary:
            return None
        k = k or self.k
        usable = [rs for rs in self.rewards if len(rs) >= k]
        if not usable:
            return None
        return math.fsum(pass_at_k(len(rs), int(sum(rs)), k) for rs in usable) / len(usable)

    def metrics(self, prefix: str = "val/") -> dict[str, float | int | None]:
        """Summary numbers, keyed for a history row or a TrainResult (``val/reward_mean``...)."""
        low, high = self.ci
        out: dict[str, float | int | None] = {
            f"{prefix}reward_mean": self.mean,
            f"{prefix}reward_ci_low": low,
            f"{prefix}reward_ci_high": high,
            f"{prefix}tasks": len(self.task_ids),
            f"{prefix}samples": sum(len(r) for r in self.rewards),
            f"{prefix}exceptions": self.exceptions,
        }
        if self.binary:
            out[f"{prefix}pass@{self.k}"] = self.pass_at(self.k)
        return out

    def summary(self) -> str:
        low, high = self.ci
        extra = f", pass@{self.k} {self.pass_at():.3f}" if self.binary and self.k > 1 else ""
        return f"{self.model}: {self.mean:.3f} [{low:.3f}, {high:.3f}] on {len(self.task_ids)} tasks x {self.k}{extra}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary with per-task scores (no trajectories)."""
        low, high = self.ci
        return {
            "model": self.model, "step": self.step, "k": self.k, "seed": self.seed, "mean": self.mean,
            "ci": [low, high], "pass_at_k": self.pass_at() if self.binary else None, "tasks": len(self.task_ids),
            "exceptions": self.exceptions, "failed_tasks": self.failed_tasks,
            "scores": dict(zip(self.task_ids, self.scores, strict=True)),
        }

    @classmethod
    def from_groups(cls, groups: Sequence[TrajectoryGroup], *, model: str = "", step: int | None = None) -> EvalResult:
        """Rebuild a result from groups written by `evaluate` (e.g. ``RunDir.read_trajectories("val", 3)``)."""
        ids, rewards, failed, meta = [], [], [], {}
        for i, g in enumerate(groups):
            meta = g.metadata
            tid = str(g.metadata.get("task_id", i))
            if g.trajectories:
                ids.append(tid)
                rewards.append([t.reward for t in g.trajectories])
            else:
                failed.append(tid)
        return cls(model=model or str(meta.get("model", "")), step=step if step is not None else meta.get("step"),
                   task_ids=ids, rewards=rewards, k=int(meta.get("k", 1)), seed=int(meta.get("seed", 0)),
                   exceptions=sum(len(g.exceptions) for g in groups), failed_tasks=failed, groups=list(groups))


def _pinned(model: Model, step: int) -> Model:
    """A copy of `model` whose `served_name()` is ``name@step`` (same backend, same endpoint)."""
    name = model.inference_model_name or model.name
    return model.model_copy(update={"inference_model_name": f"{name.split('@')[0]}@{step}"})


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


async def evaluate(
    model: Model,
    rollout: Rollout,
    tasks: Sequence[T],
    *,
    step: int | None = None,
    k: int = 1,
    seed: int = 0,
    max_concurrency: int = 8,
    max_exceptions: int | float = 0,
    task_id: Callable[[T], str] | None = None,
    split: str = "val",
    log: bool = True,
    show_progress: bool = True,
) -> EvalResult:
    """Run `rollout(model, task)` `k` times per task and score the rewards.

    Args:
        model: a `TrainableModel` (evaluated at checkpoint `step`, the newest when None; the rollout
            receives a copy whose `served_name()` is ``name@step``), or any prompted `art.Model`
            (e.g. a bigger model reached through litellm or an OpenAI endpoint; `step` must be None).
        rollout: ``async def rollout(model, task, seed=...) -> Trajectory`` that sets `reward`. If it
            takes a `seed` argument, each sample gets one derived from `seed`, the task's position and
            the sample's index: pass it to the chat completion so reruns, and two checkpoints, see
            the same random numbers.
        tasks: the held-out task list (never trained on).
        k: samples per task; pass@k is reported when every reward is 0 or 1.
        max_concurrency: rollouts in flight at once.
        max_exceptions: failed rollouts tolerated (a count, or a fraction below 1); failures are left
            out of the scores, never counted as 0.
        task_id: names a task for pairing in `compare` (default: its position in `tasks`).
        split, log: a trainable model's groups and metrics are written to its run directory as
            ``trajectories/<split>/<step>.jsonl`` and a history row ``{"split": split, "step": step, ...}``.

    Example:
        base = await art.evaluate(model, rollout, val_tasks, step=0)
        trained = await art.evaluate(model, rollout, val_tasks)
        print(art.compare(base, trained).table())
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    tasks = list(tasks)
    if not tasks:
        raise ValueError("evaluate() got no tasks; pass the held-out task list")
    if model.trainable:
        step = await model.get_step() if step is None else step  # type: ignore[attr-defined]
        target = _pinned(model, step)
    elif step is not None:
        raise ValueError(f"model {model.name!r} is not trainable, so it has no checkpoint {step}; leave step=None")
    else:
        target = model
    seeded = _takes(rollout, "seed")
    if not seeded:
        logger.info("rollout %s takes no `seed` argument: evaluation samples are not seeded",
                    getattr(rollout, "__name__", rollout))
    ids = [str(task_id(t)) if task_id else str(i) for i, t in enumerate(tasks)]
    if len(set(ids)) != len(ids):
        raise ValueError("task_id gives the same id to two tasks; ids must be unique to pair results")

    def one(i: int, task: T, j: int) -> Awaitable[Trajectory]:
        return rollout(target, task, seed=sample_seed(seed, i, j)) if seeded else rollout(target, task)

    served = target.served_name()
    groups = [
        TrajectoryGroup((one(i, t, j) for j in range(k)),
                        metadata={"task_id": ids[i], "k": k, "seed": seed, "model": served, "step": step})
        for i, t in enumerate(tasks)
    ]
    groups = await gather_trajectory_groups(groups, max_concurrency=max_concurrency, max_exceptions=max_exceptions,
                                            pbar_desc=f"eval {served}", show_progress=show_progress)
    result = EvalResult.from_groups(groups, model=served, step=step)
    if result.failed_tasks:
        logger.warning("%s: %d tasks had no successful sample and are left out: %s", served,
                       len(result.failed_tasks), result.failed_tasks[:10])
    if log and model.trainable:
        await model.log(groups, split=split, step=step)
    logger.info("%s", result.summary())
    return result


@dataclass
class Comparison:
    """The paired difference `other - base` over the tasks both results scored."""

    base: EvalResult
    other: EvalResult
    task_ids: list[str]
    diffs: list[float]
    ci: tuple[float, float]
    p_value: float

    @property
    def diff(self) -> float:
        return math.fsum(self.diffs) / len(self.diffs)

    @property
    def base_mean(self) -> float:
        return _mean_on(self.base, self.task_ids)

    @property
    def other_mean(self) -> float:
        return _mean_on(self.other, self.task_ids)

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base.model, "other": self.other.model, "tasks": len(self.task_ids),
                "base_mean": self.base_mean, "other_mean": self.other_mean, "diff": self.diff,
                "ci": list(self.ci), "p_value": self.p_value}

    def table(self) -> str:
        """A plain-text table: each model's mean and interval, then the paired difference."""
        rows = [("model", "tasks", "mean", "95% CI", "p")]
        for r, mean in ((self.base, self.base_mean), (self.other, self.other_mean)):
            sub = _subset(r, self.task_ids)
            low, high = sub.ci
            rows.append((r.model, str(len(self.task_ids)), f"{mean:.3f}", f"[{low:.3f}, {high:.3f}]", ""))
        low, high = self.ci
        rows.append(("difference (paired)", str(len(self.task_ids)), f"{self.diff:+.3f}",
                     f"[{low:+.3f}, {high:+.3f}]", f"{self.p_value:.4f}"))
        widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
        return "\n".join("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in
                                   enumerate(zip(row, widths, strict=True))).rstrip() for row in rows)

    def __str__(self) -> str:
        return self.table()


def _subset(result: EvalResult, task_ids: list[str]) -> EvalResult:
    if task_ids == result.task_ids:
        return result
    by_id = dict(zip(result.task_ids, result.rewards, strict=True))
    return EvalResult(model=result.model, step=result.step, task_ids=list(task_ids),
                      rewards=[by_id[t] for t in task_ids], k=result.k, seed=result.seed)


def _mean_on(result: EvalResult, task_ids: list[str]) -> float:
    return _subset(result, task_ids).mean


def compare(base: EvalResult, other: EvalResult, *, n_boot: int = 10_000, seed: int = 0) -> Comparison:
    """Paired comparison of two results on the same tasks: `other` minus `base`.

    The difference is the mean over tasks of (other's score - base's score); its 95% interval is a
    percentile bootstrap over tasks, and the p-value a two-sided sign-flip permutation test. Tasks
    that only one result scored are left out (with a warning); no task in common is an error.

    Example:
        c = art.compare(base, trained)
        print(c.table())            # c.diff, c.ci, c.p_value
    """
    theirs = set(other.task_ids)
    common = [t for t in base.task_ids if t in theirs]
    if not common:
        raise ValueError(f"{base.model} and {other.model} share no task ids; evaluate both on the same task list")
    dropped = (len(base.task_ids) - len(common)) + (len(other.task_ids) - len(common))
    if dropped:
        logger.warning("compare: %d task results without a partner are left out", dropped)
    a = dict(zip(base.task_ids, base.scores, strict=True))
    b = dict(zip(other.task_ids, other.scores, strict=True))
    diffs = [b[t] - a[t] for t in common]
    return Comparison(base=base, other=other, task_ids=common, diffs=diffs,
                      ci=bootstrap_ci(diffs, n_boot=n_boot, seed=seed),
                      p_value=permutation_p_value(diffs, seed=seed))


class PeriodicEval:
    """Evaluate during training: at step 0 and every `every` steps, and log it beside the train metrics.

    Each call evaluates the model's current step if it is due (and not yet done); the result's
    ``val/...`` metrics are added to the `TrainResult` passed in, and a ``split="val"`` row goes to
    the history (see `evaluate`). `results` keeps every `EvalResult` by step.

    Example:
        val = art.PeriodicEval(rollout, val_tasks, every=4)
        await val(model)                                   # step 0: the base model
        for batch in art.iterate_dataset(train_tasks, groups_per_step=8):
            groups = await art.gather_trajectory_groups(...)
            result = await model.train(groups)
            await val(model, result)                       # result.metrics["val/reward_mean"] every 4 steps
        await val(model, force=True)                       # and the last step
        print(art.compare(val.results[0], val.last).table())
    """

    def __init__(self, rollout: Rollout, tasks: Sequence[Any], *, every: int, **evaluate_kwargs: Any) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        if "step" in evaluate_kwargs:
            raise TypeError("PeriodicEval evaluates the model's current step; do not pass step=")
        self.rollout = rollout
        self.tasks = list(tasks)
        self.every = every
        self.kwargs = evaluate_kwargs
        self.results: dict[int, EvalResult] = {}

    @property
    def last(self) -> EvalResult | None:
        return self.results[max(self.results)] if self.results else None

    async def __call__(self, model: Model, result: TrainResult | None = None, *, force: bool = False) -> EvalResult | None:
        """Evaluate now if the step is due (or `force`); returns the result, or None when not due."""
        step = result.step if result is not None else await model.get_step()  # type: ignore[attr-defined]
        if step in self.results:
            evaluated = self.results[step]
        elif force or step % self.every == 0:
            evaluated = await evaluate(model, self.rollout, self.tasks, step=step, **self.kwargs)
            self.results[step] = evaluated
        else:
            return None
        if result is not None:
            result.metrics.update(evaluated.metrics())
        return evaluated
