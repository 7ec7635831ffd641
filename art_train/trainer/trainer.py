"""The LoRA trainer: trajectory groups in, a new PEFT checkpoint out.

One `train` call reads top to bottom in `Trainer._grpo_step`: advantages per group -> tokenize ->
pack -> (old / reference logprobs when needed) -> per-row forward, loss, backward -> clip ->
AdamW step -> save. Where it departs from TRL's GRPOTrainer: no generation (the rollouts come
in as trajectories), no padding (sequences are packed), the lm_head runs only on trained tokens,
and with one optimizer step per call the "old" policy is the current one (ratio 1, as in TRL).

Files in the run directory (see art_core.RunDir):
- ``checkpoints/<step>/``: adapter_model.safetensors + adapter_config.json (standard PEFT) and
  optimizer.pt; written to ``checkpoints/.<step>.tmp`` then renamed, so a folder is always complete.
- ``trajectories/train/<step>.jsonl``: written BEFORE the step trains, plus ``train_pending.json``
  (the step and its TrainConfig), removed once the checkpoint exists. A process killed mid-step
  leaves both; the next `Trainer` sees them through `pending_groups()` and `resume_pending()`
  retrains them (`train` does so itself before a new step).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from art_core import RunDir, SFTConfig, TrainableModel, TrainConfig, TrainResult, Trajectory, TrajectoryGroup
from art_core.rundir import atomic_write_text

from ..models import chat_template_for, load_causal_lm, load_tokenizer, resolve_base_model
from .advantages import step_advantages
from .logprobs import SharedPrefix, row_logprobs
from .losses import LOSSES, clip_fraction, gspo_loss, kl_k3, token_weights, truncated_is_weights
from .packing import Row, build_rows, prefix_groups
from .tokenize import Sequence, TokenizeStats, check_prefix_preserving, fit_length, tokenize_trajectory

__all__ = ["Progress", "Trainer"]

logger = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], None]


def _noop(_: dict[str, Any]) -> None:
    return None


def _load_optimizer_state(path: Path, device: str) -> dict[str, Any]:
    """Optimizer state as tensors and plain containers only: `weights_only=True` never runs pickled code."""
    import pickle

    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise RuntimeError(
            f"{path} holds more than tensors and plain values, so it was not loaded (torch.load weights_only=True "
            "refuses to run pickled code); delete that optimizer.pt to resume with a fresh optimizer state") from exc


class Trainer:
    """Trains one model's LoRA with GRPO or SFT and keeps its checkpoints.

    Args:
        model: the `TrainableModel` (its `base_model` and `config: ModelConfig` are used).
        rundir: the model's run directory.
        base_path: a local model folder to use instead of resolving `model.base_model`.
        device: "cpu", "cuda", ...; default cuda when available.

    Attributes:
        step: the newest complete checkpoint (0 = the empty adapter, saved on first use).
        tokenizer, chat_template: what prompts must be rendered with (the engine uses the same).
        prefix_preserving: whether the chat template passed the prefix check.

    Example:
        trainer = Trainer(model, RunDir(model.project, model.name))
        result = trainer.train(groups, TrainConfig(learning_rate=1e-4))
        trainer.checkpoint_path()  # -> .art/<project>/models/<name>/checkpoints/0001
    """

    def __init__(
        self,
        model: TrainableModel,
        rundir: RunDir,
        *,
        base_path: Path | None = None,
        device: str | None = None,
    ) -> None:
        from peft import LoraConfig, PeftModel, get_peft_model

        self.model = model
        self._reference: tuple[str, Any] | None = None  # (dtype, BaseWeights): the weight-sync probe's model
        self.model_config = model.config
        self.rundir = rundir
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.base_path = Path(base_path) if base_path is not None else resolve_base_model(model.base_model)
        self.tokenizer = load_tokenizer(self.base_path)
        self.chat_template = chat_template_for(self.tokenizer, self.model_config)
        self.prefix_preserving = check_prefix_preserving(self.tokenizer, self.chat_template)
        if not self.prefix_preserving:
            logger.warning(
                "chat template is not prefix-preserving: multi-turn histories are split at the breaks"
            )
        base = load_causal_lm(self.base_path, self.model_config.dtype, self.device)
        if self.model_config.gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._remove_partial_checkpoints()
        latest = rundir.latest_step()
        if latest is None:
            torch.manual_seed(self.model_config.seed)
            lora = LoraConfig(
                r=self.model_config.lora_rank,
                lora_alpha=self.model_config.lora_alpha,
                lora_dropout=self.model_config.lora_dropout,
                target_modules=list(self.model_config.target_modules),
                task_type="CAUSAL_LM",
            )
            self.peft = get_peft_model(base, lora)
            self.step = 0
            self._optimizer = self._new_optimizer()
            self._save_checkpoint(0)
        else:
            self.peft = PeftModel.from_pretrained(
                base, str(rundir.checkpoint_path(latest)), is_trainable=True
            )
            self.step = latest
            self._optimizer = self._new_optimizer()
            opt_path = rundir.checkpoint_path(latest) / "optimizer.pt"
            if opt_path.exists():
                self._optimizer.load_state_dict(_load_optimizer_state(opt_path, self.device))
            logger.info("resumed %s at step %d", rundir.path, latest)
        self.peft.eval()

    # ----- checkpoints -----

    def checkpoint_path(self, step: int | None = None) -> Path:
        """The folder of checkpoint `step` (default: the newest), in standard PEFT format."""
        return self.rundir.checkpoint_path(self.step if step is None else step)

    def _params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.peft.parameters() if p.requires_grad]

    def _new_optimizer(self) -> torch.optim.AdamW:
        return torch.optim.AdamW(self._params(), lr=1e-5)

    def _remove_partial_checkpoints(self) -> None:
        if self.rundir.checkpoints_dir.exists():
            for p in self.rundir.checkpoints_dir.glob(".*.tmp"):
                shutil.rmtree(p, ignore_errors=True)

    def _save_checkpoint(self, step: int) -> Path:
        final = self.rundir.checkpoint_path(step)
        tmp = final.parent / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.peft.save_pretrained(str(tmp))
        torch.save(self._optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "art_state.json").write_text(
            json.dumps({"step": step, "base_model": str(self.model.base_model)})
        )
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        return final

    # ----- resume -----

    @property
    def _pending_path(self) -> Path:
        return self.rundir.path / "train_pending.json"

    def _pending(self) -> dict[str, Any] | None:
        if not self._pending_path.exists():
            return None
        pending = json.loads(self._pending_path.read_text())
        if (
            pending["step"] != self.step + 1
            or not self.rundir.trajectories_path("train", pending["step"]).exists()
        ):
            self._pending_path.unlink(missing_ok=True)  # stale: that step's checkpoint was saved
            return None
        return pending

    def pending_groups(self) -> list[TrajectoryGroup] | None:
        """The trajectory groups of a step that was interrupted before its checkpoint was saved, or None."""
        pending = self._pending()
        return self.rundir.read_trajectories("train", pending["step"]) if pending else None

    def resume_pending(self, progress: Progress | None = None) -> TrainResult | None:
        """Train the interrupted step (if any) on its saved trajectories and config; None when nothing was pending."""
        pending = self._pending()
        if pending is None:
            return None
        groups = self.rundir.read_trajectories("train", pending["step"])
        kind = pending.get("kind", "grpo")
        logger.info("retraining interrupted step %d (%s) from its saved trajectories", pending["step"], kind)
        if kind == "sft":
            trajectories = [t for g in groups for t in g.trajectories]
            return self._run_step(
                kind, groups, SFTConfig.model_validate(pending["config"]), progress, trajectories
            )
        return self._run_step(kind, groups, TrainConfig.model_validate(pending["config"]), progress)

    # ----- public training API -----

    def train(
        self, groups: list[TrajectoryGroup], config: TrainConfig, progress: Progress | None = None
    ) -> TrainResult:
        """One GRPO step on `groups` from the newest checkpoint; saves and returns the new step.

        An interrupted earlier step is retrained first. `progress` gets dicts like
        {"phase": "tokenize" | "forward_backward" | "save", "done": i, "total": n}.
        A step where no group is trainable still saves a checkpoint (same weights) and says why
        in ``metrics["skipped_groups"]``.
        """
        self.resume_pending(progress)
        return self._run_step("grpo", list(groups), config, progress)

    def train_sft(
        self, trajectories: list[Trajectory], config: SFTConfig, progress: Progress | None = None
    ) -> TrainResult:
        """Supervised fine-tuning: cross-entropy on every assistant turn (sampled ids kept where present)."""
        self.resume_pending(progress)
        trajectories = list(trajectories)
        return self._run_step("sft", [TrajectoryGroup(trajectories)], config, progress, trajectories)

    def _run_step(
        self,
        kind: str,
        groups: list[TrajectoryGroup],
        config: TrainConfig | SFTConfig,
        progress: Progress | None,
        trajectories: list[Trajectory] | None = None,
    ) -> TrainResult:
        progress = progress or _noop
        step = self.step + 1
        t0 = time.perf_counter()
        self.rundir.write_trajectories("train", step, groups)
        atomic_write_text(
            self._pending_path, json.dumps({"step": step, "kind": kind, "config": config.model_dump()})
        )
        for group in self._optimizer.param_groups:
            group["lr"] = config.learning_rate
            group["weight_decay"] = config.weight_decay
            if isinstance(config, TrainConfig):
                group["betas"] = tuple(config.betas)
        if kind == "sft":
            metrics = self._sft_step(trajectories or [], config, progress)  # type: ignore[arg-type]
        else:
            metrics = self._grpo_step(groups, config, progress)  # type: ignore[arg-type]
        t_save = time.perf_counter()
        progress({"phase": "save", "done": 0, "total": 1})
        self._save_checkpoint(step)
        self.step = step
        self._pending_path.unlink(missing_ok=True)
        progress({"phase": "save", "done": 1, "total": 1})
        metrics["time/save_s"] = time.perf_counter() - t_save
        metrics["time/step_s"] = time.perf_counter() - t0
        self.rundir.append_history({"step": step, "kind": kind, "time": time.time(), **metrics})
        return TrainResult(step=step, metrics=metrics)

    # ----- GRPO -----

    def _max_len(self, config: TrainConfig | SFTConfig) -> int:
        return config.max_seq_len or self.model_config.max_seq_len

    def _grpo_step(
        self, groups: list[TrajectoryGroup], config: TrainConfig, progress: Progress
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        rewards = [r for g in groups for r in g.rewards()]
        advantages = step_advantages(groups, config.scale_rewards)
        skipped = [a.skipped for a in advantages if a.skipped]
        for reason in skipped:
            logger.info("%s: trains nothing", reason)
        stats = TokenizeStats()
        sequences: list[Sequence] = []
        n_traj = 0
        max_len = self._max_len(config)
        trainable = [a for a in advantages if not a.skipped]
        for done, adv in enumerate(trainable):
            for traj, a in zip(groups[adv.index].trajectories, adv.advantages, strict=True):
                for seq in tokenize_trajectory(traj, self.tokenizer, self.chat_template, stats=stats):
                    seq.advantage, seq.trajectory = a, n_traj
                    fitted = fit_length(seq, max_len, config.overlong, stats)
                    if fitted is not None:
                        sequences.append(fitted)
                n_traj += 1
            progress({"phase": "tokenize", "done": done + 1, "total": len(trainable)})
        metrics: dict[str, Any] = {
            "groups_submitted": len(groups),
            "groups_trainable": len(trainable),
            "skipped_groups": skipped,
            "reward_mean": float(torch.tensor(rewards).mean()) if rewards else 0.0,
            "reward_std": float(torch.tensor(rewards).std()) if len(rewards) > 1 else 0.0,
            "sequences": len(sequences),
            "prefix_preserving": self.prefix_preserving,
            **stats.metrics(),
            "time/tokenize_s": time.perf_counter() - t0,
        }
        t1 = time.perf_counter()
        metrics.update(self._grpo_optimize(sequences, config, progress))
        metrics["time/forward_backward_s"] = time.perf_counter() - t1
        if metrics["trained_tokens"]:
            metrics["trained_tokens_per_s"] = metrics["trained_tokens"] / metrics["time/forward_backward_s"]
        return metrics

    def _batches(self, sequences: list[Sequence], batch_size: int | None) -> list[list[Sequence]]:
        """Split by trajectory: `batch_size` trajectories per optimizer step (None: all in one)."""
        trajs = sorted({s.trajectory for s in sequences})
        size = batch_size or max(len(trajs), 1)
        chunks = [set(trajs[i : i + size]) for i in range(0, len(trajs), size)]
        return [[s for s in sequences if s.trajectory in chunk] for chunk in chunks]

    def _pack(self, batch: list[Sequence], config: TrainConfig | SFTConfig) -> tuple[list[Row], torch.Tensor]:
        """Rows for one optimizer step.

        With `pack_tokens` unset: packed rows of `max_seq_len` on GPU, one sequence per row on CPU.
        On CPU a packed row costs more than it saves: its position ids make transformers build a
        dense block-diagonal mask, which takes SDPA off its causal kernel, and attention runs over
        the whole row. A lone sequence needs no mask at all (is_causal). Set `pack_tokens` to pack anyway.
        """
        if self._one_sequence_per_row(config):
            return build_rows(batch, capacity=1)  # nothing fits with another: one sequence per row
        pack_tokens = getattr(config, "pack_tokens", None)
        return build_rows(batch, max(pack_tokens or self._max_len(config), self._max_len(config)))

    def _one_sequence_per_row(self, config: TrainConfig | SFTConfig) -> bool:
        return getattr(config, "pack_tokens", None) is None and not self.device.startswith("cuda")

    def _row_groups(self, rows: list[Row], config: TrainConfig | SFTConfig) -> list[tuple[int, list[Row]]]:
        """(shared prefix length, rows): one-sequence rows that start with the same prompt share its
        forward and backward (`SharedPrefix`); packed rows, or gradient checkpointing, go one by one."""
        if not self._one_sequence_per_row(config) or self.model_config.gradient_checkpointing:
            return [(0, [row]) for row in rows]
        return prefix_groups(rows)

    @torch.no_grad()
    def _logprobs(self, rows: list[Row], n_tokens: int, *, adapter: bool) -> torch.Tensor:
        out = torch.zeros(n_tokens)
        causal_lm = self.peft.get_base_model()
        for row in rows:
            if adapter:
                logp, _ = row_logprobs(
                    causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets
                )
            else:
                with self.peft.disable_adapter():
                    logp, _ = row_logprobs(
                        causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets
                    )
            out[row.token_index] = logp.float().cpu()
        return out

    def _grpo_optimize(
        self, sequences: list[Sequence], config: TrainConfig, progress: Progress
    ) -> dict[str, Any]:
        spec = LOSSES[config.loss]
        per_token = spec.per_token
        if config.importance_sampling_level == "sequence" and config.loss in ("grpo", "dr_grpo", "dapo"):
            per_token = gspo_loss
        eps_low = config.epsilon
        eps_high = config.epsilon if config.epsilon_high is None else config.epsilon_high
        max_len = self._max_len(config)
        batches = [b for b in self._batches(sequences, config.batch_size) if b]
        packed = [self._pack(b, config) for b in batches]
        multi_step = config.num_epochs * len(batches) > 1
        # "Old" policy logprobs: the checkpoint this step starts from. Needed only when the weights move
        # between optimizer steps; with one step the ratio is exactly 1 (TRL does the same).
        old: list[torch.Tensor | None] = [
            self._logprobs(rows, len(sot), adapter=True) if multi_step else None for rows, sot in packed
        ]
        ref: list[torch.Tensor | None] = [
            self._logprobs(rows, len(sot), adapter=False) if config.beta > 0 else None for rows, sot in packed
        ]
        causal_lm = self.peft.get_base_model()
        params = self._params()
        total_rows = config.num_epochs * sum(len(rows) for rows, _ in packed)
        done_rows = 0
        sums = {
            "loss": 0.0,
            "entropy": 0.0,
            "kl": 0.0,
            "clip": 0.0,
            "grad_norm": 0.0,
            "tokens": 0,
            "steps": 0,
        }
        trained_tokens = 0
        self.peft.train()
        try:
            for epoch in range(config.num_epochs):
                for b, (batch, (rows, seq_of_token)) in enumerate(zip(batches, packed, strict=True)):
                    n = len(seq_of_token)
                    if n == 0:
                        continue
                    adv = torch.tensor(
                        [batch[s].advantage for s in seq_of_token.tolist()], dtype=torch.float32
                    )
                    sampler = torch.tensor(
                        [
                            lp
                            for s in batch
                            for lp, m in zip(s.sampler_logprobs[1:], s.mask[1:], strict=True)
                            if m
                        ],
                        dtype=torch.float32,
                    )
                    traj = torch.tensor([batch[s].trajectory for s in seq_of_token.tolist()])
                    unit = (
                        torch.unique(traj, return_inverse=True)[1]
                        if config.trajectory_weight == "equal"
                        else torch.zeros_like(traj)
                    )
                    weights = token_weights(seq_of_token, unit, spec.normalization, max_len)  # [N]
                    batch_loss = 0.0
                    for k, group_rows in self._row_groups(rows, config):
                        prefix = SharedPrefix(causal_lm, group_rows[0].input_ids[:k]) if k else None
                        for row in group_rows:
                            idx = row.token_index
                            logp, entropy = row_logprobs(
                                causal_lm,
                                row.input_ids,
                                row.position_ids,
                                row.pred_index,
                                row.targets,
                                prefix=prefix,
                            )
                            dev = logp.device
                            a = adv[idx].to(dev)
                            old_logp = old[b][idx].to(dev) if old[b] is not None else logp.detach()
                            loss_t = per_token(
                                logp, old_logp, a, row.seq_local.to(dev), eps_low, eps_high
                            )  # [n]
                            if config.truncated_importance_sampling is not None:
                                cap = config.truncated_importance_sampling
                                loss_t = loss_t * truncated_is_weights(old_logp, sampler[idx].to(dev), cap)
                            if ref[b] is not None:
                                kl = kl_k3(logp, ref[b][idx].to(dev))
                                loss_t = loss_t + config.beta * kl
                                sums["kl"] += float(kl.detach().sum())
                            loss = (loss_t * weights[idx].to(dev)).sum()
                            loss.backward()
                            batch_loss += float(loss.detach())
                            sums["entropy"] += float(entropy.sum())
                            sums["clip"] += float(clip_fraction(logp, old_logp, a, eps_low, eps_high)) * len(
                                idx
                            )
                            sums["tokens"] += len(idx)
                            done_rows += 1
                            progress({"phase": "forward_backward", "done": done_rows, "total": total_rows})
                        if prefix is not None:
                            prefix.backward()
                    if epoch == 0:
                        trained_tokens += n
                    sums["grad_norm"] += self._optimizer_step(params, config.max_grad_norm)
                    sums["loss"] += batch_loss
                    sums["steps"] += 1
        finally:
            self.peft.eval()
        steps = max(sums["steps"], 1)
        tokens = max(sums["tokens"], 1)
        return {
            "loss": sums["loss"] / steps,
            "entropy": sums["entropy"] / tokens,
            "kl": sums["kl"] / tokens,
            "clip_fraction": sums["clip"] / tokens,
            "grad_norm": sums["grad_norm"] / steps,
            "trained_tokens": trained_tokens,
            "optimizer_steps": sums["steps"],
            "rows": sum(len(rows) for rows, _ in packed),
        }

    def _optimizer_step(self, params: list[torch.nn.Parameter], max_grad_norm: float | None) -> float:
        norm = torch.nn.utils.clip_grad_norm_(
            params, max_grad_norm if max_grad_norm is not None else math.inf
        )
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        return float(norm)

    # ----- SFT -----

    def _sft_step(
        self, trajectories: list[Trajectory], config: SFTConfig, progress: Progress
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        stats = TokenizeStats()
        sequences: list[Sequence] = []
        max_len = self._max_len(config)
        for i, traj in enumerate(trajectories):
            for seq in tokenize_trajectory(
                traj, self.tokenizer, self.chat_template, stats=stats, train_unsampled=True
            ):
                seq.trajectory = len(sequences)  # one unit per sequence: batch_size counts sequences
                fitted = fit_length(seq, max_len, config.overlong, stats)
                if fitted is not None:
                    sequences.append(fitted)
            progress({"phase": "tokenize", "done": i + 1, "total": len(trajectories)})
        metrics: dict[str, Any] = {
            "sequences": len(sequences),
            **stats.metrics(),
            "time/tokenize_s": time.perf_counter() - t0,
        }
        t1 = time.perf_counter()
        batches = [b for b in self._batches(sequences, config.batch_size) if b]
        packed = [self._pack(b, config) for b in batches]
        causal_lm = self.peft.get_base_model()
        params = self._params()
        total_rows = config.num_epochs * sum(len(rows) for rows, _ in packed)
        done_rows, loss_sum, grad_sum, steps, trained_tokens = 0, 0.0, 0.0, 0, 0
        self.peft.train()
        try:
            for epoch in range(config.num_epochs):
                for rows, seq_of_token in packed:
                    n = len(seq_of_token)
                    if n == 0:
                        continue
                    batch_loss = 0.0
                    for row in rows:
                        logp, _ = row_logprobs(
                            causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets
                        )
                        loss = -logp.sum() / n  # token mean over the batch
                        loss.backward()
                        batch_loss += float(loss.detach())
                        done_rows += 1
                        progress({"phase": "forward_backward", "done": done_rows, "total": total_rows})
                    grad_sum += self._optimizer_step(params, config.max_grad_norm)
                    loss_sum += batch_loss
                    steps += 1
                    trained_tokens += n if epoch == 0 else 0
        finally:
            self.peft.eval()
        metrics.update(
            {
                "loss": loss_sum / max(steps, 1),
                "grad_norm": grad_sum / max(steps, 1),
                "trained_tokens": trained_tokens,
                "optimizer_steps": steps,
                "time/forward_backward_s": time.perf_counter() - t1,
            }
        )
        return metrics

    # ----- probes -----

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: list[int], step: int | None = None, dtype: str | None = None) -> list[float]:
        """Logprob of each token at positions 1..n-1 given the ones before it, under checkpoint `step`'s adapter.

        Used by the engine to check that it serves the weights just trained (weight-sync probe). With
        ``dtype`` (an engine serving in another precision), the adapter is merged into a copy of the base
        at that precision, as the embedded engine merges it, so the two must agree exactly.
        """
        if len(token_ids) < 2:
            return []
        if dtype is not None:
            return self._merged_logprobs(token_ids, step, dtype)
        ids = torch.tensor(token_ids)
        pos = torch.arange(len(token_ids))
        pred = torch.arange(len(token_ids) - 1)
        causal_lm = self.peft.get_base_model()
        if step is None or step == self.step:
            logp, _ = row_logprobs(causal_lm, ids, pos, pred, ids[1:])
            return logp.float().cpu().tolist()
        self.peft.load_adapter(str(self._existing_checkpoint(step)), adapter_name="_probe")
        try:
            self.peft.set_adapter("_probe", inference_mode=True)
            logp, _ = row_logprobs(causal_lm, ids, pos, pred, ids[1:])
        finally:
            self.peft.set_adapter("default")
            self.peft.delete_adapter("_probe")
        return logp.float().cpu().tolist()

    def _existing_checkpoint(self, step: int) -> Path:
        path = self.rundir.checkpoint_path(step)
        if not (path / "adapter_config.json").exists():
            raise FileNotFoundError(f"checkpoint {step} does not exist; available: {self.rundir.checkpoint_steps()}")
        return path

    def _merged_logprobs(self, token_ids: list[int], step: int | None, dtype: str) -> list[float]:
        from ..engines.adapters import BaseWeights, load_lora, lora_pairs, probe_logprobs

        if self._reference is None or self._reference[0] != dtype:
            model = load_causal_lm(self.base_path, dtype=dtype, device=self.device)
            model.requires_grad_(False)
            self._reference = (dtype, BaseWeights(model))
        base = self._reference[1]
        if step is None or step == self.step:
            from peft import get_peft_model_state_dict

            config = self.peft.peft_config["default"].to_dict()
            pairs = lora_pairs(get_peft_model_state_dict(self.peft), config)
        else:
            pairs = load_lora(self._existing_checkpoint(step))
        base.apply(base.model, pairs)
        return probe_logprobs(base.model, token_ids)
