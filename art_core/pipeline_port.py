"""OpenPipe ART's `PipelineTrainer` keywords, read into ours (`pipeline.py`).

ART's ``PipelineTrainer(model=, backend=, rollout_fn=, scenarios=, config=, eval_fn=, ...)`` runs
``rollout_fn(model, scenario, config) -> TrajectoryGroup`` over scenarios taken in order and trains
every `min_batch_size` groups. The names whose meaning ours shares are accepted; the others are
refused by name, with what to use instead.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from .backend import TrainResult
from .config import LossName, TrainConfig
from .model import Model, TrainableModel
from .trajectory import TrajectoryGroup

logger = logging.getLogger(__name__)

GroupRollout = Callable[[TrainableModel, Any], Awaitable[TrajectoryGroup]]

# ART's keywords with no counterpart here, and what to use instead.
REFUSED = {
    "autotune": "set groups_per_step= (min_batch_size=) and max_steps_off_policy= yourself",
    "discard_queue_multiplier": "groups with one reward are skipped by the backend (metrics['skipped_groups'])",
    "limit_mean_steps_off_policy": "use max_steps_off_policy=",
    "score_reference_groups_per_step": "not used here",
    "score_reference_rollouts_per_group": "not used here",
    "grad_accumulation_sequences": "use TrainConfig(batch_size=) with config=art.TrainConfig(...) (our form)",
    "adam_params": "use TrainConfig(betas=, weight_decay=) (our form)",
    "kl_penalty_step_lag": "kl_penalty_coef= (TrainConfig.beta) is a KL to the base model",
    "loss_fn_config": "use TrainConfig's fields (epsilon=, epsilon_high=, ...) (our form)",
    "optimizer_save_interval": "the optimizer state is saved with every step",
    "checkpoint_retention_strategy": "call model.delete_checkpoints(best_checkpoint_metric=...) after training",
    "checkpoint_retention_interval": "call model.delete_checkpoints(best_checkpoint_metric=...) after training",
    "rollout_executor": "rollouts run in this process; bound them with num_rollout_workers=",
    "queue_maxsize": "max_steps_off_policy= bounds how far rollouts run ahead",
}
IGNORED = {"log_interval_seconds", "status_ewa_alpha", "total_scenarios"}  # ART's status printout
ACCEPTED = {
    "backend", "rollout_fn", "scenarios", "eval_fn", "pipeline", "learning_rate", "loss_fn", "normalize_advantages",
    "kl_penalty_coef", "max_steps", "min_batch_size", "max_batch_size", "num_rollout_workers",
    "eval_every_n_steps", "eval_at_start", "save_checkpoint", "resume",
}
_PIPELINE_FIELDS = ("num_rollout_workers", "min_batch_size", "max_batch_size", "max_steps_off_policy", "queue_maxsize")


def refuse(name: str, value: Any, instead: str) -> TypeError:
    return TypeError(f"PipelineTrainer({name}={value!r}) is not supported: {instead}")


@dataclass
class ArtArgs:
    """ART's arguments, translated: what `PipelineTrainer` needs in place of its own."""

    rollout: GroupRollout
    scenarios: Iterable[Any] | AsyncIterable[Any]
    train_config: TrainConfig
    groups_per_step: int | None
    max_steps_off_policy: int | None
    max_steps: int | None
    backend: Any
    eval: ArtEval | None


def _pipeline_fields(pipeline: Any) -> dict[str, Any]:
    """The fields we read from ART's ``pipeline=PipelineRuntimeConfig(...)`` (an object or a dict)."""
    if pipeline is None:
        return {}
    values = {k: pipeline.get(k) if isinstance(pipeline, Mapping) else getattr(pipeline, k, None) for k in _PIPELINE_FIELDS}
    return {k: v for k, v in values.items() if v is not None}


def art_args(kwargs: dict[str, Any], config: Any) -> ArtArgs | None:
    """Pop ART's keywords from `kwargs`; None when there are none (our own form)."""
    for name in REFUSED:
        if name in kwargs:
            raise refuse(name, kwargs[name], REFUSED[name])
    if not ACCEPTED & kwargs.keys():
        return None
    for name in IGNORED & kwargs.keys():
        kwargs.pop(name)
    art = {k: kwargs.pop(k) for k in ACCEPTED & kwargs.keys()}
    fields = _pipeline_fields(art.pop("pipeline", None))
    for name in ("num_rollout_workers", "min_batch_size", "max_batch_size"):
        if name in art:
            fields[name] = art.pop(name)
    if fields.get("queue_maxsize") is not None:
        raise refuse("queue_maxsize", fields["queue_maxsize"], REFUSED["queue_maxsize"])
    if "rollout_fn" not in art or "scenarios" not in art:
        raise TypeError(f"ART's form of PipelineTrainer needs rollout_fn= and scenarios= (got {sorted(art)})")
    groups = fields.get("min_batch_size")
    if fields.get("max_batch_size") not in (None, groups):
        raise refuse("max_batch_size", fields["max_batch_size"],
                     "every step trains exactly min_batch_size groups (groups_per_step=); set max_batch_size to it")
    if art.get("save_checkpoint", True) is not True:
        raise refuse("save_checkpoint", art["save_checkpoint"], "every step is checkpointed; delete them with "
                     "model.delete_checkpoints()")
    if art.get("resume", True) is not True:
        raise refuse("resume", art["resume"], "a run always resumes from await model.get_step(); use a new model name")
    loss = art.get("loss_fn", "cispo")  # ART's default
    loss = "grpo" if loss == "ppo" else loss  # our grpo is the PPO clipped ratio
    if loss not in get_args(LossName):
        raise refuse("loss_fn", loss, f"use one of {list(get_args(LossName))} (or 'ppo', which is our 'grpo')")
    train_config = TrainConfig(learning_rate=art.get("learning_rate", 1e-5), loss=loss,
                               scale_rewards=art.get("normalize_advantages", True), beta=art.get("kl_penalty_coef", 0.0))
    evaluate = None
    if art.get("eval_fn") is not None:
        evaluate = ArtEval(art["eval_fn"], config, every=art.get("eval_every_n_steps", 20),
                           at_start=art.get("eval_at_start", True))
    return ArtArgs(
        rollout=_bounded(art["rollout_fn"], config, fields.get("num_rollout_workers")),
        scenarios=art["scenarios"], train_config=train_config, groups_per_step=groups,
        max_steps_off_policy=fields.get("max_steps_off_policy"), max_steps=art.get("max_steps"),
        backend=art.get("backend"), eval=evaluate,
    )


def _bounded(rollout_fn: Callable[..., Awaitable[TrajectoryGroup]], config: Any, workers: int | None) -> GroupRollout:
    """``rollout_fn(model, scenario, config)``, at most `workers` at a time."""
    limit = asyncio.Semaphore(workers) if workers else None

    async def run(model: TrainableModel, scenario: Any) -> TrajectoryGroup:
        if limit is None:
            group = await rollout_fn(model, scenario, config)
        else:
            async with limit:
                group = await rollout_fn(model, scenario, config)
        if not isinstance(group, TrajectoryGroup):
            raise TypeError(f"rollout_fn returned {type(group).__name__}; ART's rollout_fn returns a TrajectoryGroup")
        return group

    return run


async def take(scenarios: Iterable[Any] | AsyncIterable[Any], skip: int, count: int | None) -> list[Any]:
    """Scenarios in order: `skip` of them passed over (steps already trained), then `count` (None: all)."""
    end = None if count is None else skip + count
    if isinstance(scenarios, AsyncIterable):
        items = []
        async for n, item in _aenumerate(scenarios):
            if end is not None and n >= end:
                break
            if n >= skip:
                items.append(item)
        return items
    return list(itertools.islice(scenarios, skip, end))


async def _aenumerate(items: AsyncIterable[Any]) -> Any:
    n = 0
    async for item in items:
        yield n, item
        n += 1


class ArtEval:
    """ART's ``eval_fn(model, step, config)``, called at the start (``eval_at_start``) and every
    ``eval_every_n_steps`` steps; what it returns is logged with ``split="val"`` (a mapping's
    entries under their keys as splits)."""

    def __init__(self, eval_fn: Callable[..., Awaitable[Any]], config: Any, *, every: int, at_start: bool) -> None:
        if every < 0:
            raise ValueError(f"eval_every_n_steps must be 0 or more, got {every}")
        self.eval_fn, self.config, self.every, self.at_start = eval_fn, config, every, at_start
        self.last: int | None = None

    async def __call__(self, model: Model, result: TrainResult | None = None) -> None:
        step = result.step if result is not None else await model.get_step()  # type: ignore[attr-defined]
        if result is None:
            due = self.at_start
        else:
            due = self.every > 0 and step - (self.last or 0) >= self.every
        if not due:
            return
        self.last = step
        out = await self.eval_fn(model, step, self.config)
        splits = out if isinstance(out, Mapping) else {"val": out}
        for split, items in splits.items():
            if items:
                await model.log(items, split=split, step=step)
