"""One model's checkpoints on disk: atomic save, resume, the pending-step journal, and retention.

Files in the run directory (see art_core.RunDir):
- ``checkpoints/<step>/``: adapter_model.safetensors + adapter_config.json (standard PEFT),
  optimizer.pt and art_state.json; written to ``checkpoints/.<step>.tmp`` then renamed, so a folder
  is always complete. A deleted checkpoint is renamed to ``.<step>.deleting.tmp`` first, for the same reason.
- ``trajectories/train/<step>.jsonl``: written BEFORE the step trains, plus ``train_pending.json``
  (the step, its kind and its config), removed once the checkpoint exists. A process killed mid-step
  leaves both; the next `Trainer` finds them (`Checkpoints.pending`) and retrains that step. A step
  that raises instead moves both to ``failed/<step>-<time>.jsonl`` / ``.json`` (with the error), so the
  next call does not retrain a batch that failed, and nothing is lost.

Retention: `checkpoints_to_delete` picks what goes. Resuming needs only the newest checkpoint
(adapter and optimizer), which is never deleted, so a run resumes after any retention.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from art_core import RunDir
from art_core.rundir import atomic_write_text

__all__ = ["Checkpoints", "Snapshot", "best_step", "checkpoints_to_delete", "metric_values", "snapshot"]

logger = logging.getLogger(__name__)


@dataclass
class Snapshot:
    """What a checkpoint holds, taken from the live model at the end of a step: the adapter's tensors
    (copied to the CPU), its config, and the optimizer's state dict."""

    adapter: dict[str, torch.Tensor]
    config: Any
    optimizer: dict[str, Any]


def snapshot(peft: Any, optimizer: torch.optim.Optimizer) -> Snapshot:
    """The checkpoint of the adapter as it is now. The adapter's tensors are copies; the optimizer's state
    dict is not (the trainer writes it before the next step changes it)."""
    from peft import get_peft_model_state_dict

    adapter = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in get_peft_model_state_dict(peft).items()}
    config = copy.deepcopy(peft.peft_config["default"])
    config.inference_mode = True  # as PeftModel.save_pretrained writes it
    return Snapshot(adapter=adapter, config=config, optimizer=optimizer.state_dict())


class Checkpoints:
    """Save, find and delete the checkpoints of one run directory, and keep its pending-step journal.

    Example:
        ckpts = Checkpoints(rundir)
        ckpts.begin(step, "grpo", config.model_dump(), groups)   # before training
        ckpts.save(step, peft, optimizer, base_model="smollm2-135m")
        ckpts.finish()
    """

    def __init__(self, rundir: RunDir) -> None:
        self.rundir = rundir

    # -- the checkpoints ---------------------------------------------------------------------------
    def steps(self) -> list[int]:
        return self.rundir.checkpoint_steps()

    def latest(self) -> int | None:
        return self.rundir.latest_step()

    def path(self, step: int) -> Path:
        return self.rundir.checkpoint_path(step)

    def existing(self, step: int) -> Path:
        """The folder of checkpoint `step`; FileNotFoundError naming the available steps if it is gone."""
        path = self.path(step)
        if not (path / "adapter_config.json").exists():
            raise FileNotFoundError(f"checkpoint {step} does not exist; available: {self.steps()}")
        return path

    def remove_partial(self) -> None:
        """Remove folders a killed process left half written (or half deleted)."""
        if self.rundir.checkpoints_dir.exists():
            for p in self.rundir.checkpoints_dir.glob(".*.tmp"):
                shutil.rmtree(p, ignore_errors=True)

    def save(self, step: int, peft: Any, optimizer: torch.optim.Optimizer, *, base_model: str,
             step_id: str | None = None, record: dict[str, Any] | None = None) -> Path:
        """Write the adapter (PEFT format), the optimizer state and art_state.json, atomically.

        art_state.json holds the call's `step_id` (a retried call finds its step) and the step's history
        `record`, so a process killed before it appended that record to history.jsonl loses nothing
        (`repair_history` appends it on the next start).
        """
        return self.write(step, snapshot(peft, optimizer), base_model=base_model, step_id=step_id, record=record)

    def write(self, step: int, snap: Snapshot, *, base_model: str, step_id: str | None = None,
              record: dict[str, Any] | None = None) -> Path:
        """`save` from a `snapshot` taken earlier (it never touches the live model, so it can run in a thread)."""
        from safetensors.torch import save_file

        final = self.path(step)
        tmp = final.parent / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file(snap.adapter, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
        snap.config.save_pretrained(str(tmp))  # adapter_config.json, as PeftModel.save_pretrained writes it
        torch.save(snap.optimizer, tmp / "optimizer.pt")
        state = {"step": step, "base_model": base_model, "step_id": step_id, "record": record}
        (tmp / "art_state.json").write_text(json.dumps(state, default=str))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        return final

    def state(self, step: int) -> dict[str, Any]:
        path = self.path(step) / "art_state.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def repair_history(self) -> None:
        """Append the newest checkpoint's history record if a killed process saved it but never wrote the row."""
        latest = self.latest()
        record = self.state(latest).get("record") if latest is not None else None
        if record and not any(r.get("step") == latest and "kind" in r for r in self.rundir.read_history()):
            logger.info("history.jsonl had no row for checkpoint %d: appended it from art_state.json", latest)
            self.rundir.append_history(record)

    def load_optimizer(self, step: int, optimizer: torch.optim.Optimizer, device: str) -> None:
        """Restore the optimizer state saved with checkpoint `step`, when there is one."""
        import pickle

        path = self.path(step) / "optimizer.pt"
        if not path.exists():
            return
        try:  # weights_only: tensors and plain containers only, so a planted file never runs code
            state = torch.load(path, map_location=device, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise RuntimeError(
                f"{path} holds more than tensors and plain values, so it was not loaded (torch.load weights_only=True "
                "refuses to run pickled code); delete that optimizer.pt to resume with a fresh optimizer state") from exc
        optimizer.load_state_dict(state)

    def delete(self, step: int) -> None:
        """Delete checkpoint `step`: renamed aside first, so no half-deleted folder looks complete."""
        path = self.path(step)
        if not path.exists():
            return
        aside = path.parent / f".{path.name}.deleting.tmp"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(path, aside)
        shutil.rmtree(aside, ignore_errors=True)

    # -- the pending-step journal ------------------------------------------------------------------
    @property
    def pending_path(self) -> Path:
        return self.rundir.path / "train_pending.json"

    def begin(self, step: int, kind: str, config: dict[str, Any], groups: list[Any], step_id: str | None = None) -> None:
        """Record step `step` before it trains: its trajectories, then the journal entry."""
        self.rundir.write_trajectories("train", step, groups)
        atomic_write_text(self.pending_path,
                          json.dumps({"step": step, "kind": kind, "config": config, "step_id": step_id}))

    def step_of(self, step_id: str) -> int | None:
        """The checkpoint a call with `step_id` produced, if it was saved (art_state.json or history.jsonl)."""
        for step in reversed(self.steps()):
            if self.state(step).get("step_id") == step_id:
                return step
        return next((int(r["step"]) for r in reversed(self.rundir.read_history()) if r.get("step_id") == step_id
                     and int(r["step"]) in self.steps()), None)

    def pending(self, current_step: int) -> dict[str, Any] | None:
        """The journal entry of an interrupted step after `current_step`, or None (a stale entry is removed)."""
        if not self.pending_path.exists():
            return None
        pending = json.loads(self.pending_path.read_text())
        if (
            pending["step"] != current_step + 1
            or not self.rundir.trajectories_path("train", pending["step"]).exists()
        ):
            self.pending_path.unlink(missing_ok=True)  # stale: that step's checkpoint was saved
            return None
        return pending

    def finish(self) -> None:
        """The step's checkpoint exists: clear the journal."""
        self.pending_path.unlink(missing_ok=True)

    def abort(self, step: int, error: BaseException) -> Path:
        """The step raised: move its trajectories and journal entry to ``failed/`` (kept, never retrained)."""
        failed = self.rundir.path / "failed"
        failed.mkdir(exist_ok=True)
        stem = failed / f"{step:04d}-{time.strftime('%Y%m%d-%H%M%S')}"
        entry = json.loads(self.pending_path.read_text()) if self.pending_path.exists() else {"step": step}
        atomic_write_text(stem.with_suffix(".json"), json.dumps({**entry, "error": f"{type(error).__name__}: {error}"}))
        trajectories = self.rundir.trajectories_path("train", step)
        if trajectories.exists():
            os.replace(trajectories, stem.with_suffix(".jsonl"))
        self.pending_path.unlink(missing_ok=True)
        return stem.with_suffix(".jsonl")


# -- retention ----------------------------------------------------------------------------------------
def metric_values(history: list[dict[str, Any]], metric: str) -> dict[int, float]:
    """{step: value} of `metric` in history.jsonl rows; the newest row of a step wins.

    ``"val/reward_mean"`` is read from rows of split ``val`` (what `model.log(split="val")` writes)
    as their ``reward_mean``, or from any row that carries the key ``val/reward_mean`` itself.
    Rows without a finite number for it are ignored.
    """
    split, _, key = metric.partition("/")
    out: dict[int, float] = {}
    for row in history:
        value = row.get(metric)
        if value is None and key and row.get("split") == split:
            value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and "step" in row:
            out[int(row["step"])] = float(value)
    return out


def best_step(history: list[dict[str, Any]], metric: str, steps: list[int]) -> int | None:
    """The step among `steps` with the highest `metric` (the newest of equals), or None if none has it."""
    values = metric_values(history, metric)
    scored = [s for s in steps if s in values]
    return max(scored, key=lambda s: (values[s], s)) if scored else None


def checkpoints_to_delete(
    steps: list[int],
    newest: int,
    *,
    history: list[dict[str, Any]],
    best_metric: str | None,
    keep_last: int = 1,
    keep_base: bool = False,
) -> list[int]:
    """The steps to delete so that what stays is: the newest `keep_last` up to `newest` (which always
    stays), the best by `best_metric` (higher is better), step 0 when `keep_base`, and any step after
    `newest` (a step trained but not yet served: the trainer resumes from it)."""
    keep = {s for s in steps if s >= newest}
    keep |= set(sorted((s for s in steps if s <= newest), reverse=True)[: max(keep_last, 1)])
    if keep_base and 0 in steps:
        keep.add(0)
    if best_metric:
        best = best_step(history, best_metric, steps)
        if best is not None:
            keep.add(best)
    return [s for s in steps if s not in keep]
