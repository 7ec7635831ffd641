import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import art_core as art
from art_core.rundir import RunDir, atomic_append_line

WRITER = textwrap.dedent(
    """
    import sys
    from art_core.rundir import atomic_write_text
    path = sys.argv[1]
    i = 0
    print("ready", flush=True)
    while True:
        letter = "AB"[i % 2]
        atomic_write_text(path, letter * 4_000_000)
        i += 1
    """
)


def whole(text: str) -> bool:
    return len(text) == 4_000_000 and text in ("A" * 4_000_000, "B" * 4_000_000)


@pytest.mark.slow
def test_killed_writer_leaves_old_or_new_file_never_torn(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("A" * 4_000_000)
    for delay in (0.05, 0.13, 0.21, 0.34):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:  # a reader during the writes never sees half a file
            assert whole(path.read_text())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert whole(path.read_text())
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "big.txt"]
    assert all(p.endswith(".tmp") for p in leftovers)  # only temp files can be left behind, never the target torn


def test_run_directory_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("ART_HOME", str(tmp_path / "home"))
    run = RunDir("email", "agent-001")
    assert run.path == tmp_path / "home" / "email" / "models" / "agent-001"
    run.write_model({"name": "agent-001"})
    assert run.read_model() == {"name": "agent-001"}
    run.append_history({"step": 1, "split": "train", "loss": 0.5})
    run.append_history({"step": 1, "split": "val", "reward_mean": 0.25})
    assert [h["split"] for h in run.read_history()] == ["train", "val"]
    group = art.TrajectoryGroup([art.Trajectory(messages=[{"role": "user", "content": "hé"}], reward=1.0)])
    path = run.write_trajectories("train", 3, [group, group])
    assert path == run.path / "trajectories" / "train" / "0003.jsonl"
    assert run.read_trajectories("train", 3) == [group, group]
    for step in (0, 2, 10):
        run.checkpoint_path(step).mkdir(parents=True)
    (run.checkpoints_dir / ".0011.tmp").mkdir()  # an unfinished checkpoint does not count
    assert run.checkpoint_steps() == [0, 2, 10] and run.latest_step() == 10
    run.delete_checkpoint(2)
    assert run.checkpoint_steps() == [0, 10]


def test_root_argument_overrides_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ART_HOME", str(tmp_path / "env"))
    assert RunDir("p", "m", root=tmp_path / "arg").path == tmp_path / "arg" / "p" / "models" / "m"


@pytest.mark.parametrize("name", ["", "../escape", "a/b", "sp ace", "x" * 200])
def test_bad_names_are_refused(name):
    with pytest.raises(ValueError, match="not a valid name"):
        RunDir("project", name)


def test_append_line_adds_a_missing_newline(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('{"a": 1}')
    atomic_append_line(path, '{"b": 2}')
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n'
