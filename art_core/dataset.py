"""`iterate_dataset`: walk a task list in steps of a few groups, over epochs, resumable."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class DatasetBatch(Generic[T]):
    items: list[T]
    step: int
    epoch: int
    epoch_step: int


def iterate_dataset(
    dataset: Sequence[T],
    groups_per_step: int = 1,
    num_epochs: int = 1,
    *,
    initial_step: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    use_tqdm: bool = False,
) -> Iterator[DatasetBatch[T]]:
    """Yield batches of `groups_per_step` items; `initial_step` skips steps already trained.

    Each epoch is shuffled with ``seed + epoch``, so a resumed run sees the same order.
    ``use_tqdm`` is accepted for code ported from OpenPipe ART and does nothing: the progress bar
    is `gather_trajectory_groups`'s.

    Example:
        for batch in iterate_dataset(tasks, groups_per_step=4, num_epochs=3, initial_step=await model.get_step()):
            groups = await gather_trajectory_groups(TrajectoryGroup(rollout(model, t) for _ in range(8)) for t in batch.items)
    """
    if groups_per_step < 1:
        raise ValueError(f"groups_per_step must be at least 1, got {groups_per_step}")
    if num_epochs < 1:
        raise ValueError(f"num_epochs must be at least 1, got {num_epochs}")
    n = len(dataset)
    if n == 0:
        return
    per_epoch = n // groups_per_step if drop_last else math.ceil(n / groups_per_step)
    step = 0
    for epoch in range(num_epochs):
        order = list(range(n))
        if shuffle:
            random.Random(seed + epoch).shuffle(order)
        for epoch_step in range(per_epoch):
            if step >= initial_step:
                idx = order[epoch_step * groups_per_step : (epoch_step + 1) * groups_per_step]
                yield DatasetBatch([dataset[i] for i in idx], step, epoch, epoch_step)
            step += 1
