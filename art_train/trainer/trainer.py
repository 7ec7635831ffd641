"""`Trainer`: one model's LoRA, its optimizer and its step counter; trajectory groups in, a checkpoint out.

It holds the state and calls the parts, each in its own module:
- `grpo.grpo_step` / `sft.sft_step`: what one training step does to the weights;
- `checkpoints.Checkpoints`: atomic save and resume, the pending-step journal;
- `probe`: the trainer's side of the weight-sync check.

A `train` call: wait for the previous checkpoint's write -> retrain an interrupted step if there is
one -> journal the new step (its trajectories first) -> drop samples older than the staleness bound
(`off_policy`, async mode) -> the step -> save the checkpoint -> clear the journal -> append history.
With `save_in_background` (the service's default) the last three run in a thread after `train`
returns, so the new adapter is served while its checkpoint is written (`wait_saved`).
A step that raises is rolled back to the newest checkpoint, its journal moved to ``failed/``.
With `ranks` (`distributed`) the step runs on N ranks; this Trainer is rank 0, the only one that writes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel

from art_core import RunDir, SFTConfig, TrainableModel, TrainConfig, TrainResult, Trajectory, TrajectoryGroup

from ..models import chat_template_for, load_causal_lm, load_tokenizer, resolve_base_model, training_autocast
from .attention import use_split_attention
from .checkpoints import Checkpoints, Snapshot, snapshot
from .distributed import Ranks, Worker
from .grpo import grpo_step
from .norms import rebuild_norm_outputs
from .off_policy import drop_stale, max_age
from .policy import Policy, Progress
from .probe import HalfPrecisionReference, adapter_logprobs
from .recompute import recompute_mlp, recompute_mlp_products
from .sft import sft_step
from .tokenize import Sequence, check_prefix_preserving

__all__ = ["Progress", "Trainer"]

logger = logging.getLogger(__name__)


def _noop(_: dict[str, Any]) -> None:
    return None


def _grpo(policy: Policy, groups: list[TrajectoryGroup], config: Any, progress: Progress,
          trained: list[Sequence]) -> dict[str, Any]:
    return grpo_step(policy, groups, config, progress, trained=trained)


def _sft(policy: Policy, groups: list[TrajectoryGroup], config: Any, progress: Progress,
         trained: list[Sequence]) -> dict[str, Any]:
    return sft_step(policy, [t for g in groups for t in g.trajectories], config, progress, trained=trained)


StepFn = Callable[[Policy, list[TrajectoryGroup], Any, Progress, list[Sequence]], dict[str, Any]]

# kind (as journaled in train_pending.json and written to history) -> (its config class, its step)
STEPS: dict[str, tuple[type[BaseModel], StepFn]] = {
    "grpo": (TrainConfig, _grpo),
    "sft": (SFTConfig, _sft),
}


class Trainer:
    """Trains one model's LoRA with GRPO or SFT and keeps its checkpoints.

    Args:
        model: the `TrainableModel` (its `base_model` and `config: ModelConfig` are used).
        rundir: the model's run directory.
        base_path: a local model folder to use instead of resolving `model.base_model`.
        device: "cpu", "cuda", ...; default cuda when available.
        ranks: train on several ranks: `distributed.Ranks` in the service's process (rank 0, the one that
            writes checkpoints, journal and history), `distributed.Worker` on ranks 1..N-1 (they read the
            newest checkpoint and write nothing). None: this process alone.

    Attributes:
        step: the newest complete checkpoint (0 = the empty adapter, saved on first use).
        policy: what the steps train (`Policy`: the peft model, the optimizer, tokenizer and template).
        checkpoints: the run directory's checkpoints and pending-step journal.

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
        ranks: Ranks | Worker | None = None,
    ) -> None:
        self.model = model
        self.model_config = model.config
        self.rundir = rundir
        self.checkpoints = Checkpoints(rundir)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.base_path = Path(base_path) if base_path is not None else resolve_base_model(model.base_model)
        self.ranks = ranks
        writes = ranks is None or ranks.rank == 0
        if writes:
            self.checkpoints.remove_partial()
            self.checkpoints.repair_history()
        latest = self.checkpoints.latest()
        if latest is None and not writes:
            raise RuntimeError(f"{rundir.path} has no checkpoint: rank 0 saves step 0 before the other ranks start")
        config = model.config
        tokenizer = load_tokenizer(self.base_path)
        chat_template = chat_template_for(tokenizer, config)
        prefix_preserving = check_prefix_preserving(tokenizer, chat_template)
        if not prefix_preserving:
            logger.warning("chat template is not prefix-preserving: multi-turn histories are split at the breaks")
        # a rank that receives its shard of the base from rank 0 never reads the whole of it (`fsdp.shard_base`)
        peft, optimizer = self._lora_model(latest, empty=isinstance(ranks, Worker) and ranks.shard == "fsdp")
        self.policy = Policy(peft=peft, optimizer=optimizer, tokenizer=tokenizer, chat_template=chat_template,
                             device=self.device, max_seq_len=config.max_seq_len,
                             gradient_checkpointing=config.gradient_checkpointing,
                             prefix_preserving=prefix_preserving,
                             autocast=training_autocast(config.autocast, self.device),
                             recompute_prompt=config.recompute_prompt,
                             rank=ranks.rank if ranks else 0, world=ranks.world if ranks else 1)
        if latest is None:
            self.step = 0
            self._save(0)
        else:
            self.step = latest
            self.checkpoints.load_optimizer(latest, optimizer, self.device)
            logger.info("resumed %s at step %d", rundir.path, latest)
        peft.eval()
        self._reference = HalfPrecisionReference(self.base_path, self.device)
        self._trained: tuple[int, list[list[int]]] | None = None  # (step, its trained sequences' ids)
        self.save_in_background = False  # see `wait_saved`; the service turns it on for an in-process engine
        self._pool: ThreadPoolExecutor | None = None
        self._saving: tuple[Future[None], tuple[Any, ...]] | None = None  # the write in flight and its arguments
        if isinstance(ranks, Ranks) and ranks.shard == "fsdp":
            ranks.register(self)  # shard the base now: it is whole only in host memory until then

    def _lora_model(self, latest: int | None, *, empty: bool = False) -> tuple[Any, torch.optim.Optimizer]:
        """The base model with the LoRA of checkpoint `latest` (a new one, seeded, when None), and a fresh AdamW
        over the LoRA. `empty`: the base's weights on the meta device and the LoRA's uninitialised, for rank 0
        to send."""
        from peft import LoraConfig, PeftModel, get_peft_model

        config = self.model_config
        # with the base sharded, rank 0 holds it whole in host memory only; FSDP moves its shards to the device
        host = isinstance(self.ranks, Ranks) and self.ranks.shard == "fsdp"
        base = load_causal_lm(self.base_path, config.dtype, self.device, empty=empty, host=host)
        use_split_attention(base)
        if config.gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            rebuild_norm_outputs(base)  # exact, element-wise only: the RMSNorms' outputs are computed again
            if not config.recompute_mlp:
                recompute_mlp_products(base)  # exact, element-wise only: keeps gate(x) and up(x), not the rest
            elif not recompute_mlp(base):
                logger.warning("recompute_mlp: no MLP of %s takes it (none is a gated MLP down(act(gate(x)) * "
                               "up(x))); nothing is recomputed", self.base_path)
        if latest is None or empty:
            torch.manual_seed(config.seed)
            lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                              target_modules=list(config.target_modules), task_type="CAUSAL_LM")
            peft: PeftModel = get_peft_model(base, lora)
        else:
            peft = PeftModel.from_pretrained(base, str(self.checkpoints.path(latest)), is_trainable=True)
        for module in peft.modules():  # the LoRA is small and whole on every rank, on the device
            if any(p.requires_grad for p in module.parameters(recurse=False)):
                if empty:  # real tensors; their values come from rank 0
                    module.to_empty(device=self.device, recurse=False)
                elif host:
                    module.to(self.device)
        optimizer = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=1e-5)
        return peft, optimizer

    def reload_base(self) -> None:
        """Rank 0, once the ranks that held the other shards of its base have stopped: the base read again from
        disk, whole, with the adapter and optimizer of the newest checkpoint (where a failed step left them), to
        be sharded over the ranks that start next. The optimizer keeps its hyperparameters; the tokenizer and
        template are kept as they are."""
        self.wait_saved()
        logger.warning("reloading %s's base from %s: its other shards left with the stopped ranks", self.rundir.path,
                       self.base_path)
        peft, optimizer = self._lora_model(self.step)
        self.checkpoints.load_optimizer(self.step, optimizer, self.device)
        for group, before in zip(optimizer.param_groups, self.policy.optimizer.param_groups, strict=True):
            group.update({k: before[k] for k in ("lr", "weight_decay", "betas")})
        peft.eval()
        self.policy = dataclasses.replace(self.policy, peft=peft, optimizer=optimizer, root=None)

    # the policy's parts, under the names callers use
    @property
    def peft(self) -> Any:
        return self.policy.peft

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.policy.optimizer

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    @property
    def chat_template(self) -> str:
        return self.policy.chat_template

    @property
    def prefix_preserving(self) -> bool:
        return self.policy.prefix_preserving

    def checkpoint_path(self, step: int | None = None) -> Path:
        """The folder of checkpoint `step` (default: the newest), in standard PEFT format."""
        return self.checkpoints.path(self.step if step is None else step)

    def _save(self, step: int, step_id: str | None = None, record: dict[str, Any] | None = None) -> Path:
        return self.checkpoints.save(step, self.policy.peft, self.policy.optimizer, base_model=str(self.model.base_model),
                                     step_id=step_id, record=record)

    # ----- training -----

    def train(
        self, groups: list[TrajectoryGroup], config: TrainConfig, progress: Progress | None = None,
        step_id: str | None = None,
    ) -> TrainResult:
        """One GRPO step on `groups` from the newest checkpoint; saves and returns the new step.

        An interrupted earlier step is retrained first. `progress` gets dicts like
        {"phase": "tokenize" | "forward_backward" | "save", "done": i, "total": n}.
        A step where no group is trainable still saves a checkpoint (same weights) and says why
        in ``metrics["skipped_groups"]``.
        """
        self.wait_saved()
        done = self._already_trained(step_id, progress)
        return done or self._run_step("grpo", list(groups), config, progress, step_id)

    def train_sft(
        self, trajectories: list[Trajectory], config: SFTConfig, progress: Progress | None = None,
        step_id: str | None = None,
    ) -> TrainResult:
        """Supervised fine-tuning: cross-entropy on every assistant turn (sampled ids kept where present)."""
        self.wait_saved()
        done = self._already_trained(step_id, progress)
        return done or self._run_step("sft", [TrajectoryGroup(list(trajectories))], config, progress, step_id)

    def completed(self, step_id: str | None) -> TrainResult | None:
        """The result of the call with `step_id` if its checkpoint exists (a retried call), else None (also
        while that checkpoint is still being written: `train` waits for it and then finds it)."""
        step = self.checkpoints.step_of(step_id) if step_id else None
        if step is None:
            return None
        rows = [r for r in self.rundir.read_history() if r.get("step") == step and "kind" in r]
        metrics = {k: v for k, v in (rows[-1] if rows else {}).items() if k not in ("step", "kind", "time", "step_id")}
        return TrainResult(step=step, metrics={**metrics, "already_trained": True})

    def _already_trained(self, step_id: str | None, progress: Progress | None) -> TrainResult | None:
        """Finish an interrupted step; return the result if it (or a saved step) is the call `step_id` asks for.

        A retried call (same `step_id`) never trains its groups twice: its step is either saved, or
        journalled as pending and retrained here from the journal.
        """
        done = self.completed(step_id)
        if done is not None:
            return done
        pending = self.checkpoints.pending(self.step)
        resumed = self.resume_pending(progress)
        if resumed is not None and step_id is not None and pending is not None and pending.get("step_id") == step_id:
            return resumed
        return None

    def pending_groups(self) -> list[TrajectoryGroup] | None:
        """The trajectory groups of a step that was interrupted before its checkpoint was saved, or None."""
        self.wait_saved()
        pending = self.checkpoints.pending(self.step)
        return self.rundir.read_trajectories("train", pending["step"]) if pending else None

    def resume_pending(self, progress: Progress | None = None) -> TrainResult | None:
        """Train the interrupted step (if any) on its saved trajectories and config; None when nothing was pending."""
        self.wait_saved()
        pending = self.checkpoints.pending(self.step)
        if pending is None:
            return None
        kind = pending.get("kind", "grpo")
        groups = self.rundir.read_trajectories("train", pending["step"])
        logger.info("retraining interrupted step %d (%s) from its saved trajectories", pending["step"], kind)
        config = STEPS[kind][0].model_validate(pending["config"])
        return self._run_step(kind, groups, config, progress, pending.get("step_id"))  # type: ignore[arg-type]

    def _run_step(
        self, kind: str, groups: list[TrajectoryGroup], config: TrainConfig | SFTConfig, progress: Progress | None,
        step_id: str | None = None,
    ) -> TrainResult:
        progress = progress or _noop
        step = self.step + 1
        t0 = time.perf_counter()
        self.checkpoints.begin(step, kind, config.model_dump(), groups, step_id)
        self.policy.set_hyperparameters(config)
        trained: list[Sequence] = []
        off = None
        if isinstance(config, TrainConfig) and (config.mode == "async" or config.max_steps_off_policy is not None):
            groups, off = drop_stale(groups, self.step, max_age(config))  # after the journal: it keeps them all
        try:
            with self._on_ranks(kind, step, groups, config):
                metrics = STEPS[kind][1](self.policy, groups, config, progress, trained)
            metrics |= off.metrics() if off is not None else {}
        except Exception as exc:  # a crash (kill) keeps the journal for a retry; a raised error does not
            kept = self.checkpoints.abort(step, exc)
            self._restore(self.step)
            logger.error("step %d raised %s: back at checkpoint %d; its trajectories are kept in %s",
                         step, type(exc).__name__, self.step, kept)
            raise
        metrics["time/step_s"] = time.perf_counter() - t0  # up to the save: the record is saved with the checkpoint
        record = {"step": step, "kind": kind, "time": time.time(), **({"step_id": step_id} if step_id else {}), **metrics}
        snap = snapshot(self.policy.peft, self.policy.optimizer)
        self._trained = (step, [q.token_ids for q in sorted(trained, key=lambda q: -q.trained_tokens)
                                if q.trained_tokens])
        if self.save_in_background:  # served from memory now; durable once `wait_saved` returns
            self.step = step
            args = (step, snap, step_id, record)
            self._saving = (self._writer().submit(self._write, *args), args)
            return TrainResult(step=step, metrics=metrics)
        progress({"phase": "save", "done": 0, "total": 1})
        self._write(step, snap, step_id, record)
        self.step = step
        progress({"phase": "save", "done": 1, "total": 1})
        metrics["time/save_s"] = record["time/save_s"]
        metrics["time/step_s"] = record["time/step_s"] = time.perf_counter() - t0
        return TrainResult(step=step, metrics=metrics)

    def _on_ranks(self, kind: str, step: int, groups: list[TrajectoryGroup],
                  config: TrainConfig | SFTConfig) -> AbstractContextManager[None]:
        """Rank 0 with other ranks: they train their share of step `step` while this one does (`Ranks.step`)."""
        if isinstance(self.ranks, Ranks):
            return self.ranks.step(self, kind, step, groups, config)
        return nullcontext()

    def follow(self, kind: str, step: int, groups: list[TrajectoryGroup], config: TrainConfig | SFTConfig) -> None:
        """Ranks 1..N-1: this rank's share of step `step`, as rank 0 sent it (its stale samples already dropped)."""
        self.policy.set_hyperparameters(config)
        STEPS[kind][1](self.policy, groups, config, _noop, [])
        self.step = step

    # ----- the checkpoint write -----

    def _writer(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="art-checkpoint")
        return self._pool

    def _write(self, step: int, snap: Snapshot, step_id: str | None, record: dict[str, Any]) -> None:
        """Checkpoint `step` on disk, then the journal cleared, then its history row (in that order: a process
        killed before the checkpoint exists retrains the step from its journal; see `checkpoints`)."""
        t0 = time.perf_counter()
        self.checkpoints.write(step, snap, base_model=str(self.model.base_model), step_id=step_id, record=record)
        self.checkpoints.finish()
        record["time/save_s"] = time.perf_counter() - t0
        self.rundir.append_history(record)

    def wait_saved(self) -> None:
        """Return once the newest step's checkpoint is on disk (at once when nothing is being written).

        With `save_in_background` a step's checkpoint is written while the step is already served; every
        call that reads checkpoints from disk or changes the adapter waits here first. A write that failed is
        tried once more from the same snapshot, which stays in memory until it lands; if it fails again, the
        error is raised (the step's journal and trajectories stay, so a restart retrains it)."""
        saving = self._saving
        if saving is None:
            return
        future, args = saving
        try:
            future.result()
        except Exception as exc:
            logger.error("writing checkpoint %d failed (%s: %s); trying once more", args[0], type(exc).__name__, exc)
            self._write(*args)
        if self._saving is saving:
            self._saving = None

    def close(self) -> None:
        """Wait for a checkpoint being written, then stop the writer thread."""
        try:
            self.wait_saved()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def _restore(self, step: int) -> None:
        """Put the adapter and optimizer back to checkpoint `step` (a failed step may have moved them)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        path = self.checkpoints.path(step)
        set_peft_model_state_dict(self.policy.peft, load_file(str(path / "adapter_model.safetensors"), device=self.device))
        self.policy.optimizer.zero_grad(set_to_none=True)
        self.policy.optimizer.state.clear()  # step 0 saves no optimizer state
        self.checkpoints.load_optimizer(step, self.policy.optimizer, self.device)
        self.policy.peft.eval()

    # ----- the weight-sync probe -----

    def trained_ids(self, step: int) -> list[list[int]]:
        """Token ids of the sequences step `step` trained on, as the step tokenized them, most trained
        tokens first: where the step moved the policy, so the weight-sync check can see it. [] for a
        step this process did not train (one trained before a restart)."""
        return self._trained[1] if self._trained is not None and self._trained[0] == step else []

    def adapter_fingerprint(self, step: int | None = None) -> str:
        """`weight_sync.lora_fingerprint` of the adapter just trained (in memory), or of checkpoint `step`."""
        from peft import get_peft_model_state_dict

        from ..lora import load_lora, lora_pairs
        from ..weight_sync import lora_fingerprint

        if step is None or step == self.step:
            config = self.policy.peft.peft_config["default"].to_dict()
            return lora_fingerprint(lora_pairs(get_peft_model_state_dict(self.policy.peft), config))
        self.wait_saved()
        return lora_fingerprint(load_lora(self.checkpoints.existing(step)))

    def adapter_pairs(self, step: int) -> dict[str, Any] | None:
        """A copy of the adapter just trained as ``{module: LoraPair}`` if `step` is the one in memory, else
        None: handed to an in-process engine without writing and reading it back (the checkpoint is saved too)."""
        from peft import get_peft_model_state_dict

        from ..lora import LoraPair, lora_pairs

        if step != self.step:
            return None
        config = self.policy.peft.peft_config["default"].to_dict()
        pairs = lora_pairs(get_peft_model_state_dict(self.policy.peft), config)
        return {k: LoraPair(p.b.clone(), p.a.clone(), p.scale) for k, p in pairs.items()}  # not the live weights

    def sequence_logprobs(self, token_ids: list[int], step: int | None = None, dtype: str | None = None) -> list[float]:
        """Logprob of each token at positions 1..n-1 given the ones before it, under checkpoint `step`'s adapter."""
        return self.sequences_logprobs([token_ids], step, dtype)[0]

    def sequences_logprobs(self, sequences: list[list[int]], step: int | None = None,
                           dtype: str | None = None) -> list[list[float]]:
        """`sequence_logprobs` of several sequences, the checkpoint's adapter loaded (or merged) once.

        Used by the service to check that the engine serves the weights just trained. With ``dtype``
        (an engine serving in another precision), the adapter is merged into the base at that precision,
        as the embedded engine merges it, so the two must agree exactly (see `probe`).
        """
        if step is not None and step != self.step:
            self.wait_saved()
        checkpoint = None if step is None or step == self.step else self.checkpoints.existing(step)
        if dtype is not None:
            return self._reference.logprobs(sequences, dtype, self.policy.peft, checkpoint,
                                            whole=self.policy.root is None)
        if self.policy.root is not None and isinstance(self.ranks, Ranks):  # a sharded base: every rank runs it
            with self.ranks.logprobs(self, sequences, step):
                return adapter_logprobs(self.policy.peft, sequences, checkpoint, self.policy.root)
        return adapter_logprobs(self.policy.peft, sequences, checkpoint, self.policy.root)
