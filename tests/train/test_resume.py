"""A training process SIGKILLed mid-step resumes from the newest complete checkpoint and retrains that step."""

from __future__ import annotations

import textwrap

import pytest
import torch

import art_core as art
from tests.support.process import kill_at_marker

CHILD = textwrap.dedent(
    """
    import sys, time, pathlib
    import art_core as art
    from art_train.trainer import Trainer
    base, root, marker = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    model = art.TrainableModel(name="r", project="t", base_model=base)
    trainer = Trainer(model, art.RunDir("t", "r", root=root), device="cpu")
    tok = trainer.tokenizer
    def traj(text, reward):
        t = art.Trajectory(messages=[{"role": "user", "content": "q"}], reward=reward)
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        t.turns.append(art.assistant_turn(text, token_ids=ids))
        return t
    groups = [art.TrajectoryGroup([traj("alpha", 1.0), traj("beta", 0.0)])]
    trainer.train(groups, art.TrainConfig(learning_rate=1e-2))
    def stall(event):
        if event["phase"] == "forward_backward":
            marker.write_text("in step 2")
            time.sleep(600)  # the parent SIGKILLs us here
    groups2 = [art.TrajectoryGroup([traj("gamma", 0.0), traj("delta", 1.0)])]
    trainer.train(groups2, art.TrainConfig(learning_rate=1e-2), progress=stall)
    """
)


@pytest.mark.slow
def test_sigkill_mid_step_then_resume(tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    marker = tmp_path / "marker"
    kill_at_marker(CHILD, [str(tiny_model_path), str(tmp_path), str(marker)], marker, timeout=120)
    rundir = art.RunDir("t", "r", root=tmp_path)
    assert rundir.checkpoint_steps() == [0, 1]  # no half-written checkpoint 2
    saved_opt = torch.load(rundir.checkpoint_path(1) / "optimizer.pt")

    from art_train.trainer import Trainer

    model = art.TrainableModel(name="r", project="t", base_model=str(tiny_model_path))
    trainer = Trainer(model, rundir, device="cpu")
    assert trainer.step == 1
    state = trainer.optimizer.state_dict()["state"]
    assert state and all(torch.equal(state[k]["exp_avg"], saved_opt["state"][k]["exp_avg"]) for k in state)
    pending = trainer.pending_groups()
    assert pending is not None and [t.reward for t in pending[0].trajectories] == [0.0, 1.0]
    assert "gamma" in pending[0].trajectories[0].turns[-1]["content"]
    result = trainer.resume_pending()
    assert result is not None and result.step == 2 and result.metrics["trained_tokens"] > 0
    assert rundir.checkpoint_steps() == [0, 1, 2]
    assert trainer.pending_groups() is None and trainer.resume_pending() is None
    assert [h["step"] for h in rundir.read_history()] == [1, 2]
