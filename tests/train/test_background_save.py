"""A step's checkpoint written in a thread while the step is already served (`Trainer.save_in_background`,
the service's default): the files are PEFT's, every call that reads the disk waits for them, a failed write
is retried from memory, and a process killed mid-write retrains the step from its journal."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from pathlib import Path

import pytest

import art_core as art
from tests.support.process import kill_at_marker


def _trainer(tiny_model_path: Path, root: Path, background: bool = True):  # noqa: ANN202
    from art_train.trainer import Trainer

    model = art.TrainableModel(name="bg", project="t", base_model=str(tiny_model_path))
    trainer = Trainer(model, art.RunDir("t", "bg", root=root), device="cpu")
    trainer.save_in_background = background
    return trainer


def _groups(trainer, words: tuple[str, str] = ("alpha", "beta")) -> list[art.TrajectoryGroup]:  # noqa: ANN001
    tok = trainer.tokenizer

    def traj(text: str, reward: float) -> art.Trajectory:
        t = art.Trajectory(messages=[{"role": "user", "content": "q"}], reward=reward)
        t.turns.append(art.assistant_turn(text, token_ids=tok(text, add_special_tokens=False)["input_ids"]))
        return t

    return [art.TrajectoryGroup([traj(words[0], 1.0), traj(words[1], 0.0)])]


CONFIG = art.TrainConfig(learning_rate=1e-2)


def test_the_snapshot_writer_writes_what_peft_writes(tiny_model_path: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_path, tmp_path)
    trainer.train(_groups(trainer), CONFIG)
    trainer.wait_saved()
    ours = trainer.checkpoint_path(1)
    theirs = tmp_path / "peft"
    trainer.peft.save_pretrained(str(theirs))
    assert (ours / "adapter_model.safetensors").read_bytes() == (theirs / "adapter_model.safetensors").read_bytes()

    def config(folder: Path) -> dict:  # target_modules is a set, written in hash order
        data = json.loads((folder / "adapter_config.json").read_text())
        return {**data, "target_modules": sorted(data["target_modules"])}

    assert config(ours) == config(theirs)
    trainer.close()


def test_a_step_is_served_before_its_checkpoint_lands_and_the_next_step_waits(tiny_model_path: Path,
                                                                              tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_path, tmp_path)
    rundir, release = trainer.rundir, threading.Event()
    write = trainer.checkpoints.write

    def slow_write(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        assert release.wait(60)
        return write(*args, **kwargs)

    trainer.checkpoints.write = slow_write
    result = trainer.train(_groups(trainer), CONFIG)
    assert result.step == trainer.step == 1 and "time/save_s" not in result.metrics
    assert rundir.checkpoint_steps() == [0]  # not on disk yet ...
    assert trainer.checkpoints.pending_path.exists() and rundir.read_history() == []  # ... so still journalled
    assert trainer.adapter_pairs(1) is not None  # the engine takes it from memory meanwhile

    second: dict = {}
    runner = threading.Thread(target=lambda: second.update(r=trainer.train(_groups(trainer, ("gamma", "delta")),
                                                                           CONFIG)))
    runner.start()
    time.sleep(1.0)
    assert not rundir.trajectories_path("train", 2).exists()  # step 2 waits for checkpoint 1
    release.set()
    runner.join(120)
    trainer.close()
    assert second["r"].step == 2 and rundir.checkpoint_steps() == [0, 1, 2]
    rows = rundir.read_history()
    assert [r["step"] for r in rows] == [1, 2] and all(r["time/save_s"] > 0 for r in rows)
    assert not trainer.checkpoints.pending_path.exists()


def test_a_failed_write_is_tried_again_from_memory(tiny_model_path: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_path, tmp_path)
    write, failures = trainer.checkpoints.write, [2]

    def flaky(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if failures[0]:
            failures[0] -= 1
            raise OSError(28, "No space left on device")
        return write(*args, **kwargs)

    trainer.checkpoints.write = flaky
    trainer.train(_groups(trainer), CONFIG)
    fingerprint = trainer.adapter_fingerprint()
    with pytest.raises(OSError, match="No space left"):
        trainer.wait_saved()  # the write and its retry both failed: said, not swallowed
    assert trainer.rundir.checkpoint_steps() == [0] and trainer.checkpoints.pending_path.exists()
    trainer.wait_saved()  # tried again: the snapshot was kept, so it lands
    assert trainer.rundir.checkpoint_steps() == [0, 1] and trainer.adapter_fingerprint(1) == fingerprint
    assert [r["step"] for r in trainer.rundir.read_history()] == [1]
    trainer.close()


CHILD = textwrap.dedent(
    """
    import sys, time, pathlib
    import art_core as art
    from tests.train.test_background_save import CONFIG, _groups, _trainer
    base, root, marker = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    trainer = _trainer(base, root)
    trainer.train(_groups(trainer), CONFIG)
    trainer.wait_saved()
    def stalled(*args, **kwargs):
        marker.write_text("writing checkpoint 2")
        time.sleep(600)  # the parent SIGKILLs us here
    trainer.checkpoints.write = stalled
    result = trainer.train(_groups(trainer, ("gamma", "delta")), CONFIG)
    assert result.step == 2  # returned (served) before its checkpoint exists
    trainer.wait_saved()
    """
)


@pytest.mark.slow
def test_sigkill_while_the_checkpoint_is_written_retrains_the_step_once(tiny_model_path: Path,
                                                                        tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    kill_at_marker(CHILD, [str(tiny_model_path), str(tmp_path), str(marker)], marker,
                   env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    rundir = art.RunDir("t", "bg", root=tmp_path)
    assert rundir.checkpoint_steps() == [0, 1] and [r["step"] for r in rundir.read_history()] == [1]
    trainer = _trainer(tiny_model_path, tmp_path, background=False)
    assert trainer.step == 1
    pending = trainer.pending_groups()  # nothing lost: step 2's trajectories are journalled
    assert pending is not None and "gamma" in pending[0].trajectories[0].turns[-1]["content"]
    result = trainer.resume_pending()
    assert result is not None and result.step == 2 and result.metrics["trained_tokens"] > 0
    assert trainer.resume_pending() is None  # trained once
    assert rundir.checkpoint_steps() == [0, 1, 2] and [r["step"] for r in rundir.read_history()] == [1, 2]
