"""The run directory: everything a model's training run leaves on disk.

    <root>/<project>/models/<name>/
        model.json
        history.jsonl                      one JSON object per step and split: a training step's row
                                           has "kind" ("grpo"/"sft"); a logged or evaluated row has
                                           "split" ("val", ...) and the step it scored
        trajectories/<split>/<step>.jsonl  one TrajectoryGroup per line
        checkpoints/<step>/                a PEFT adapter (+ optimizer state)

The root is ``ART_HOME`` when set, else ``./.art``. Every file is written atomically (temp file,
fsync, rename), so a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .trajectory import TrajectoryGroup

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def art_home(root: str | os.PathLike[str] | None = None) -> Path:
    if root is not None:
        return Path(root)
    return Path(os.environ.get("ART_HOME", ".art"))


def check_name(kind: str, value: str) -> str:
    if not _NAME.match(value or ""):
        raise ValueError(
            f"{kind} {value!r} is not a valid name: use letters, digits, '.', '_' or '-' "
            "(up to 128 characters, starting with a letter or digit)"
        )
    return value


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` so that readers see either the old or the new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append one line by rewriting the file atomically (history files stay small)."""
    path = Path(path)
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    atomic_write_bytes(path, old + line.rstrip("\n").encode("utf-8") + b"\n")


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class RunDir:
    """Paths and atomic reads and writes for one model's run directory."""

    def __init__(self, project: str, name: str, root: str | os.PathLike[str] | None = None) -> None:
        self.project = check_name("project", project)
        self.name = check_name("model name", name)
        self.path = art_home(root) / project / "models" / name

    @property
    def model_json(self) -> Path:
        return self.path / "model.json"

    @property
    def history_path(self) -> Path:
        return self.path / "history.jsonl"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    def checkpoint_path(self, step: int) -> Path:
        return self.checkpoints_dir / f"{step:04d}"

    def trajectories_path(self, split: str, step: int) -> Path:
        return self.path / "trajectories" / check_name("split", split) / f"{step:04d}.jsonl"

    def write_model(self, data: dict[str, Any]) -> None:
        atomic_write_text(self.model_json, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def read_model(self) -> dict[str, Any] | None:
        return json.loads(self.model_json.read_text()) if self.model_json.exists() else None

    def append_history(self, record: dict[str, Any]) -> None:
        atomic_append_line(self.history_path, json.dumps(record, sort_keys=True))

    def read_history(self, split: str | None = None) -> list[dict[str, Any]]:
        """Every history row, or those of one split (a training step's row counts as "train")."""
        if not self.history_path.exists():
            return []
        rows = [json.loads(line) for line in self.history_path.read_text().splitlines() if line.strip()]
        return rows if split is None else [r for r in rows if r.get("split", "train") == split]

    def metrics_by_step(self, split: str = "val") -> dict[int, dict[str, Any]]:
        """The numbers of a split's rows by step, keyed ``<split>/<name>`` (``val/reward_mean``).

        When a step was logged twice, the later row wins.
        """
        out: dict[int, dict[str, Any]] = {}
        for row in self.read_history(split):
            if isinstance(row.get("step"), int):
                out[row["step"]] = {f"{split}/{k}": v for k, v in row.items()
                                    if k not in ("step", "split", "time") and isinstance(v, (int, float))}
        return dict(sorted(out.items()))

    def write_trajectories(self, split: str, step: int, groups: Iterable[TrajectoryGroup]) -> Path:
        path = self.trajectories_path(split, step)
        lines = [g.model_dump_json() for g in groups]
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        return path

    def read_trajectories(self, split: str, step: int) -> list[TrajectoryGroup]:
        path = self.trajectories_path(split, step)
        return [TrajectoryGroup.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]

    def checkpoint_steps(self) -> list[int]:
        """Steps with a complete checkpoint (folders named by their step number)."""
        if not self.checkpoints_dir.exists():
            return []
        return sorted(int(p.name) for p in self.checkpoints_dir.iterdir() if p.is_dir() and p.name.isdigit())

    def latest_step(self) -> int | None:
        steps = self.checkpoint_steps()
        return steps[-1] if steps else None

    def delete_checkpoint(self, step: int) -> None:
        shutil.rmtree(self.checkpoint_path(step), ignore_errors=True)
