"""Checkpoint selection on hand-made histories: which steps retention and `delete_checkpoints` keep."""

from __future__ import annotations

from art_train.trainer import best_step, checkpoints_to_delete, metric_values

HISTORY = [
    {"step": 1, "kind": "grpo", "reward_mean": 0.99},  # a training row: not a val metric
    {"step": 1, "split": "val", "reward_mean": 0.2},
    {"step": 2, "split": "val", "reward_mean": 0.9},
    {"step": 3, "split": "val", "reward_mean": 0.5},
    {"step": 3, "split": "val", "reward_mean": 0.4},  # re-evaluated: the later row wins
    {"step": 4, "split": "val", "reward_mean": None},  # no rewards: ignored
    {"step": 5, "val/reward_mean": 0.7},  # a row carrying the metric under its full name
]


def test_metric_values_read_split_rows_and_full_names() -> None:
    assert metric_values(HISTORY, "val/reward_mean") == {1: 0.2, 2: 0.9, 3: 0.4, 5: 0.7}
    assert metric_values(HISTORY, "val/missing") == {}


def test_best_step_is_the_highest_among_existing_checkpoints() -> None:
    assert best_step(HISTORY, "val/reward_mean", [0, 1, 2, 3, 4, 5]) == 2
    assert best_step(HISTORY, "val/reward_mean", [0, 3, 5]) == 5  # step 2's checkpoint is gone
    assert best_step([], "val/reward_mean", [0, 1]) is None
    tied = [{"step": 1, "split": "val", "reward_mean": 0.5}, {"step": 2, "split": "val", "reward_mean": 0.5}]
    assert best_step(tied, "val/reward_mean", [1, 2]) == 2  # the newer of equals


def test_delete_keeps_best_and_newest() -> None:
    steps = [0, 1, 2, 3, 4, 5, 6]
    assert checkpoints_to_delete(steps, 6, history=HISTORY, best_metric="val/reward_mean") == [0, 1, 3, 4, 5]
    # no metric, or nothing evaluated: only the newest stays
    assert checkpoints_to_delete(steps, 6, history=HISTORY, best_metric=None) == [0, 1, 2, 3, 4, 5]
    assert checkpoints_to_delete(steps, 6, history=[], best_metric="val/reward_mean") == [0, 1, 2, 3, 4, 5]


def test_retention_keeps_newest_n_base_and_best() -> None:
    steps = [0, 1, 2, 3, 4, 5, 6]
    kept = lambda deleted: [s for s in steps if s not in deleted]  # noqa: E731
    out = checkpoints_to_delete(steps, 6, history=HISTORY, best_metric="val/reward_mean", keep_last=3, keep_base=True)
    assert kept(out) == [0, 2, 4, 5, 6]
    out = checkpoints_to_delete(steps, 6, history=HISTORY, best_metric="val/reward_mean", keep_last=1, keep_base=True)
    assert kept(out) == [0, 2, 6]
    # a step after the served one (trained, not yet served) is the trainer's newest: it stays
    assert checkpoints_to_delete([0, 1, 2], 1, history=[], best_metric=None, keep_last=1) == [0]
