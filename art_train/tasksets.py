"""Named held-out task sets for `art eval`: a rollout plus the task lists to score it on.

The demo's tasks are built in ("addition", "brevity"). An example registers its own with the
decorator (or `add_task_set`), or `art eval --tasks path/to/tasks.py:task_set` loads a factory (or a
`TaskSet`) from a file or module without registering anything.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import art_core as art

__all__ = ["TASK_SETS", "TaskSet", "add_task_set", "load_task_set", "task_set"]


@dataclass(frozen=True)
class TaskSet:
    """What `art eval` needs to score a checkpoint: ``rollout(model, task, seed=...)`` and the splits."""

    name: str
    rollout: Callable[..., Awaitable[art.Trajectory]]
    splits: dict[str, Sequence[Any]]
    default_split: str = "test"
    k: int = 1
    task_id: Callable[[Any], str] | None = None
    description: str = ""
    metric: str = field(default="reward")  # what the mean means, for the table and plot

    def tasks(self, split: str | None = None) -> list[Any]:
        split = split or self.default_split
        if split not in self.splits:
            raise ValueError(f"task set {self.name!r} has no split {split!r}; splits: {sorted(self.splits)}")
        return list(self.splits[split])


TaskSetFactory = Callable[[], TaskSet]
TASK_SETS: dict[str, TaskSetFactory] = {}


def add_task_set(name: str, factory: TaskSetFactory) -> TaskSetFactory:
    """Register `factory` (called with no arguments when `art eval --tasks name` runs) under `name`."""
    if name in TASK_SETS and TASK_SETS[name] is not factory:
        raise ValueError(f"a task set named {name!r} is already registered; pick another name")
    TASK_SETS[name] = factory
    return factory


def task_set(name: str) -> Callable[[TaskSetFactory], TaskSetFactory]:
    """Decorator twin of `add_task_set`; returns the function unchanged.

    Example:
        @task_set("tictactoe")
        def tictactoe_tasks() -> TaskSet:
            return TaskSet("tictactoe", rollout=play, splits={"test": [Game(seed=s) for s in range(1000, 1064)]})
    """

    def register(factory: TaskSetFactory) -> TaskSetFactory:
        return add_task_set(name, factory)

    return register


def _demo_task_set(name: str) -> TaskSet:
    from .demo_tasks import demo_task

    task = demo_task(name)
    return TaskSet(name=name, rollout=task.eval_rollout, splits={k: v for k, v in task.splits.items() if k != "train"},
                   task_id=lambda q: q.id, description=f"art demo --task {name}", metric=task.title)


add_task_set("addition", lambda: _demo_task_set("addition"))
add_task_set("brevity", lambda: _demo_task_set("brevity"))


def load_task_set(spec: str) -> TaskSet:
    """A registered name, or ``module:attr`` / ``path/to/file.py:attr`` naming a factory or a TaskSet."""
    if spec in TASK_SETS:
        return _check(TASK_SETS[spec](), spec)
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise ValueError(f"unknown task set {spec!r}; registered: {sorted(TASK_SETS)}, or pass module:attr or "
                         "path/to/file.py:attr")
    if where.endswith(".py"):
        path = Path(where)
        if not path.exists():
            raise ValueError(f"task set {spec!r}: {path} does not exist")
        mod_name = f"_art_tasks_{path.stem}"
        spec_ = importlib.util.spec_from_file_location(mod_name, path)
        assert spec_ is not None and spec_.loader is not None
        module = importlib.util.module_from_spec(spec_)
        sys.modules[mod_name] = module
        spec_.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    obj = getattr(module, attr, None)
    if obj is None:
        raise ValueError(f"task set {spec!r}: {where} has no {attr!r}")
    return _check(obj() if callable(obj) and not isinstance(obj, TaskSet) else obj, spec)


def _check(obj: Any, spec: str) -> TaskSet:
    if not isinstance(obj, TaskSet):
        raise TypeError(f"task set {spec!r} gave a {type(obj).__name__}; return an art_train.tasksets.TaskSet")
    return obj
