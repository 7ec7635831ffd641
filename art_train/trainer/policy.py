"""What a training step works on: the LoRA model, its optimizer, the tokenizer, and how rows are laid out.

`Trainer` builds one `Policy` and hands it to `grpo_step` and `sft_step`; the checkpoints module
saves its adapter and optimizer. Nothing here knows about run directories or steps.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from art_core import SFTConfig, TrainConfig

from .distributed import reduce_values, shard_row_groups, sum_grads
from .logprobs import SharedPrefix, row_logprobs, rows_logprobs
from .packing import Row, build_rows, row_groups
from .tokenize import Sequence
from .work import DecoderCounter, work_metrics

# one-sequence rows of a prefix group run together up to this many tokens a decoder call (padding
# included): short rows (an answer, a rollout's few tokens) pay a decoder call each otherwise (0: one by one)
ROW_BATCH_TOKENS = 1024

__all__ = ["Policy", "Progress"]

logger = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], None]  # gets {"phase": ..., "done": i, "total": n}


@dataclass
class Policy:
    """The trained LoRA (`peft`, adapter "default"), its AdamW, and the tokenizer and template it trains on.

    Attributes:
        max_seq_len: the model's longest sequence (`ModelConfig.max_seq_len`); a step's config may lower it.
        gradient_checkpointing: whether the base model recomputes activations (then no shared prefixes).
        prefix_preserving: whether the chat template passed the prefix check (`check_prefix_preserving`).
        autocast: the dtype the decoder computes in under torch.autocast (`ModelConfig.autocast`), or None.
        recompute_prompt: whether a shared prompt's forward runs again in backward instead of keeping its
            graph while its rows run (`ModelConfig.recompute_prompt`; not with the base sharded).
        decoder: counts the tokens and calls through the decoder (a step's `work/*` metrics).
        rank, world: this policy's place among the trainer's ranks (`distributed`); with world > 1 a step
            trains this rank's rows (`row_groups`), sums gradients over ranks (`optimizer_step`) and
            reduces its metrics (`reduce`).
        root: once the base is sharded over the ranks (`shard_base`, `fsdp`), the FSDP module every forward
            goes through; None: the whole base is here.
    """

    peft: Any
    optimizer: torch.optim.Optimizer
    tokenizer: Any
    chat_template: str
    device: str
    max_seq_len: int
    gradient_checkpointing: bool = False
    prefix_preserving: bool = True
    autocast: str | None = None
    recompute_prompt: bool = False
    rank: int = 0
    world: int = 1
    root: Any = None
    decoder: DecoderCounter = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.decoder = DecoderCounter(self.causal_lm)

    @property
    def causal_lm(self) -> Any:
        """The causal LM with the LoRA layers in it (peft's wrapper removed: we call its decoder ourselves)."""
        return self.peft.get_base_model()

    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.peft.parameters() if p.requires_grad]

    def shard_base(self) -> None:
        """Keep 1/world of the frozen base here (FSDP2, `fsdp.shard_base`); every rank calls it, once."""
        from .fsdp import shard_base

        if self.root is None:
            self.root = shard_base(self.causal_lm, self.device)
            if self.recompute_prompt:
                logger.warning("recompute_prompt: off with the base sharded over ranks (their forwards must match); "
                               "shared prompts keep their graphs")

    def max_len(self, config: TrainConfig | SFTConfig) -> int:
        return config.max_seq_len or self.max_seq_len

    def set_hyperparameters(self, config: TrainConfig | SFTConfig) -> None:
        """The step's learning rate, weight decay and (GRPO) betas, on the one optimizer kept across steps."""
        for group in self.optimizer.param_groups:
            group["lr"] = config.learning_rate
            group["weight_decay"] = config.weight_decay
            if isinstance(config, TrainConfig):
                group["betas"] = tuple(config.betas)

    # -- rows --------------------------------------------------------------------------------------
    def one_sequence_per_row(self, config: TrainConfig | SFTConfig) -> bool:
        return getattr(config, "pack_tokens", None) is None and not self.device.startswith("cuda")

    def rows(self, batch: list[Sequence], config: TrainConfig | SFTConfig) -> tuple[list[Row], torch.Tensor]:
        """Rows for one optimizer step, and `seq_of_token` [N] (see `build_rows`).

        With `pack_tokens` unset: packed rows of `max_seq_len` on GPU, one sequence per row on CPU.
        On CPU a packed row costs more than it saves: its position ids make transformers build a
        dense block-diagonal mask, which takes SDPA off its causal kernel, and attention runs over
        the whole row. A lone sequence needs no mask at all (is_causal). Set `pack_tokens` to pack anyway.
        """
        if self.one_sequence_per_row(config):
            return build_rows(batch, capacity=1)  # nothing fits with another: one sequence per row
        pack_tokens = getattr(config, "pack_tokens", None)
        return build_rows(batch, max(pack_tokens or self.max_len(config), self.max_len(config)))

    def shares_rows(self, config: TrainConfig | SFTConfig) -> bool:
        """Whether rows share their common prompt (`row_groups`) and run together (`row_chunks`): one-sequence
        rows, no gradient checkpointing, the base not sharded."""
        return self.one_sequence_per_row(config) and not self.gradient_checkpointing and self.root is None

    def row_groups(self, rows: list[Row], config: TrainConfig | SFTConfig) -> list[tuple[int, list[Row]]]:
        """One-sequence rows share their common prompt's forward and backward; packed rows, or gradient
        checkpointing, go one by one. With several ranks, only this rank's share (`shard_row_groups`)."""
        groups = row_groups(rows, self.shares_rows(config))
        return groups if self.world == 1 else shard_row_groups(groups, self.rank, self.world)

    def row_chunks(self, rows: list[Row], k: int, config: TrainConfig | SFTConfig) -> list[list[Row]]:
        """`rows` (one prefix group, `k` tokens shared) in chunks for `forward_rows`: one-sequence rows,
        longest first, while a chunk's padded tokens after the prefix stay within `ROW_BATCH_TOKENS` and a
        row's padding within a quarter of the chunk's width or 32 tokens (padding costs compute: an
        agent's rollouts of 50 and 1,000 tokens go apart); otherwise one row a chunk."""
        if ROW_BATCH_TOKENS <= 0 or not self.shares_rows(config) or len(rows) < 2:
            return [[row] for row in rows]
        chunks: list[list[Row]] = []
        for row in sorted(rows, key=lambda r: -int(r.input_ids.shape[0])):
            width = int(chunks[-1][0].input_ids.shape[0]) - k if chunks else 0  # longest first: the chunk's first
            rest = int(row.input_ids.shape[0]) - k
            if chunks and (len(chunks[-1]) + 1) * width <= ROW_BATCH_TOKENS and width - rest <= max(width // 4, 32):
                chunks[-1].append(row)
            else:
                chunks.append([row])
        return chunks

    def shared_prefix(self, input_ids: torch.Tensor) -> SharedPrefix:
        """The `SharedPrefix` of a row group's common prompt `input_ids` [k]."""
        return SharedPrefix(self.causal_lm, input_ids, recompute=self.recompute_prompt and self.root is None)

    def forward_rows(self, rows: list[Row], prefix: Any = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`forward` of each row of a `row_chunks` chunk, in one decoder call when there are several."""
        if len(rows) == 1:
            return [self.forward(rows[0], prefix)]
        return rows_logprobs(self.causal_lm, [(r.input_ids, r.position_ids, r.pred_index, r.targets) for r in rows],
                             prefix=prefix)  # fmt: skip

    def pad(self, rows: list[Row], config: TrainConfig | SFTConfig, *, backward: bool = True) -> None:
        """With the base sharded: the forwards (and backwards, adding 0) that bring this rank to as many as
        the busiest rank runs on `rows` (FSDP all-gathers in each, in the same order on every rank)."""
        if self.root is None or not rows:
            return
        from .fsdp import pad, padding

        groups = row_groups(rows, False)
        shards = [shard_row_groups(groups, r, self.world) for r in range(self.world)]
        pad(self.root, rows, padding(shards, self.rank), backward=backward)

    def own_rows(self, rows: list[Row], config: TrainConfig | SFTConfig) -> list[Row]:
        """The rows this rank trains (all of them on 1 rank)."""
        return rows if self.world == 1 else [r for _, group in self.row_groups(rows, config) for r in group]

    def reduce(self, values: dict[str, Any], op: str = "sum") -> dict[str, Any]:
        """Per-rank metric sums (or maxima) over all ranks; as they are on 1 rank."""
        return values if self.world == 1 else reduce_values(values, op)

    def work_since(self, start: tuple[int, int], trained_tokens: int, rows: int) -> dict[str, float]:
        """`DecoderCounter.since`, counting every rank's decoder."""
        if self.world == 1:
            return self.decoder.since(start, trained_tokens, rows)
        done = self.reduce({"tokens": self.decoder.tokens - start[0], "calls": self.decoder.calls - start[1]})
        return work_metrics(done["tokens"], done["calls"], trained_tokens, rows)

    # -- forward and update ------------------------------------------------------------------------
    def precision(self) -> Any:
        """The context every forward of this policy runs in: autocast to `autocast`'s dtype, or nothing."""
        if self.autocast is None:
            return nullcontext()
        return torch.autocast(self.device.split(":")[0], dtype=getattr(torch, self.autocast))

    def forward(self, row: Row, prefix: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`row_logprobs` of `row` (after `prefix`, a `SharedPrefix`): (logp [n], entropy [n])."""
        if self.root is not None:
            return self.root(row.input_ids, row.position_ids, row.pred_index, row.targets, prefix=prefix)  # type: ignore[no-any-return]
        return row_logprobs(self.causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets,
                            prefix=prefix)

    @torch.no_grad()
    def logprobs(self, rows: list[Row], n_tokens: int, config: TrainConfig | SFTConfig, *,
                 adapter: bool) -> torch.Tensor:
        """[n_tokens] logprobs of the trained tokens of this rank's share of `rows` (0 elsewhere), with the
        adapter on (the current policy) or off (the base model: GRPO's KL reference, which costs no second model)."""
        out = torch.zeros(n_tokens)
        with self.precision(), nullcontext() if adapter else self.peft.disable_adapter():
            for row in self.own_rows(rows, config):
                logp, _ = self.forward(row)
                out[row.token_index] = logp.float().cpu()
            self.pad(rows, config, backward=False)
        return out

    @contextmanager
    def training(self) -> Iterator[None]:
        """Train mode (LoRA dropout on) and the policy's precision for the block, eval mode after, even on error."""
        self.peft.train()
        try:
            with self.precision():
                yield
        finally:
            self.peft.eval()

    def optimizer_step(self, max_grad_norm: float | None) -> float:
        """Clip (None: measure only), step, zero the gradients; returns the gradient norm before clipping.
        With several ranks the gradients are first summed over them, so every rank takes the same step."""
        if self.world > 1:
            sum_grads(self.params())
        norm = torch.nn.utils.clip_grad_norm_(self.params(), max_grad_norm if max_grad_norm is not None else math.inf)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)
