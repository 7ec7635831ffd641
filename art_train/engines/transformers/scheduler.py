"""The embedded engine's batch scheduler: continuous batching on a worker thread.

Each loop it admits waiting sequences (prefilled together, left-padded), merges their KV cache into
the running batch of the same adapter, and decodes one token for every running sequence in one
forward pass. Finished sequences leave the batch at once, their keys and values kept in the prefix
cache (`prefix`) so that a later prompt starting with the same tokens prefills only the rest. A
sequence keeps the model copy (the adapter) it was admitted with until its last token.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from ...hf_compat import cache_kwargs, output_cache
from ..base import EngineError, SamplingParams
from ..grammar import mask_logits
from ..kv import GrowingLayer, drop_leading, grow_in_place, select_rows
from ..prefix import Entry, PrefixCache

__all__ = ["Batch", "Scheduler", "Seq", "choose", "inverse_cdf", "merge"]

logger = logging.getLogger(__name__)


@dataclass
class Seq:
    """One choice being generated."""

    prompt: list[int]
    params: SamplingParams
    adapter: str | None
    emit: Callable[[Seq, bool], None]  # called from the worker after each token, and at the end
    index: int = 0
    generator: torch.Generator | None = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_text_at: int | None = None  # where a stop string starts in the decoded text
    error: BaseException | None = None
    parse_error: str | None = None  # why text that looked like a tool call was kept as content
    cached: int = 0  # prompt tokens whose keys and values came from the prefix cache
    generation: int = 0  # the prefix cache's generation for this adapter when the sequence started
    grammar: Any = None  # an xgrammar GrammarMatcher when the request has a response_format


@dataclass
class Batch:
    model: Any
    seqs: list[Seq]
    cache: Any
    mask: torch.Tensor  # [B, L] 1 where a real token sits
    positions: torch.Tensor  # [B] position of the next token
    last: torch.Tensor  # [B] last sampled token


class Scheduler:
    """The worker thread's loop: admits queued sequences, prefills them together, decodes every running
    sequence one token a forward pass (one batch per adapter), and hands each token to its `Seq.emit`.

    Args:
        model_for: the model copy with an adapter merged in (`TransformersEngine.model_for`).
        tokenizer: for the pad id and for decoding stop strings.
        eos_ids: token ids that end a reply.
        device: where the batch tensors live; cache_dtype: float32 keys and values for a half-precision
            model on CPU (None: the model's); prefix: the prefix cache (None: off); stats: counters shared
            with the engine; max_batch: rows per adapter's batch; prefix_dtype: what the prefix cache stores
            keys and values in (a half-precision model's own dtype when its cache is float32; None: as held).
        idle_s: after this many seconds with nothing to do the worker thread ends, and the next `submit`
            starts another (None: it waits forever). An idle thread keeps its OpenMP pool, and beside a
            trainer's pool in the same process that makes libgomp stop spinning for both: a training step
            ran 1.1-1.2x slower beside an idle pool (see `art_train.threads`).
    """

    def __init__(self, model_for: Callable[[str | None, set[str | None]], Any], tokenizer: Any, eos_ids: set[int],
                 device: torch.device, cache_dtype: torch.dtype | None, prefix: PrefixCache | None,
                 stats: dict[str, int], max_batch: int, prefix_dtype: torch.dtype | None = None,
                 idle_s: float | None = None) -> None:
        self.model_for = model_for
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.torch_device = device
        self.cache_dtype = cache_dtype
        self.prefix = prefix
        self.stats = stats
        self.max_batch = max_batch
        self.prefix_dtype = prefix_dtype
        self.incoming: queue.Queue[Seq | Callable[[set[str | None]], None] | None] = queue.Queue()
        self.stopping = False
        self.idle_s = idle_s
        self.thread: threading.Thread | None = None  # the one running `run`; None while none is needed
        self._handoff = threading.Lock()  # a thread ends only with nothing queued, and submit sees that

    def submit(self, item: Seq | Callable[[set[str | None]], None]) -> None:
        """Queue a sequence to generate, or a job to run between decode steps (given the busy adapters);
        starts a worker thread when the last one ended idle."""
        with self._handoff:
            self.incoming.put(item)
            if self.thread is None and not self.stopping:
                self.thread = threading.Thread(target=self.run, name="art-engine", daemon=True)
                self.thread.start()

    def stop(self) -> threading.Thread | None:
        """Ask the worker to end; returns its thread to join (None: none was running)."""
        with self._handoff:
            self.stopping = True
            self.incoming.put(None)
            return self.thread

    def _end_idle(self) -> bool:
        with self._handoff:
            if self.stopping or not self.incoming.empty():
                return False
            self.thread = None
            return True

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def run(self) -> None:
        """The worker loop, until `stop`: requests that arrive meanwhile fail, probes still answer."""
        batches: dict[str | None, Batch] = {}
        waiting: list[Seq] = []
        idle_since = time.monotonic()
        while not self.stopping:
            block = not batches and not waiting
            jobs: list[Callable[[set[str | None]], None]] = []  # probes (sequence_logprobs)
            try:
                item = self.incoming.get(timeout=min(0.5, self.idle_s or 0.5)) if block else self.incoming.get_nowait()
                idle_since = time.monotonic()
                while True:
                    if item is None:
                        break
                    if isinstance(item, Seq):
                        waiting.append(item)
                    else:
                        jobs.append(item)
                    item = self.incoming.get_nowait()
            except queue.Empty:
                if not block:
                    idle_since = time.monotonic()
                elif self.idle_s is not None and time.monotonic() - idle_since >= self.idle_s and self._end_idle():
                    return
            for job in jobs:
                job(set(batches))
            if self.stopping:
                break
            if waiting:
                waiting = self._admit(waiting, batches)
            for key in list(batches):
                batch = batches[key]
                try:
                    if batch.seqs:  # empty when every row finished at prefill (e.g. max_tokens=1)
                        self.decode_step(batch)
                except Exception as exc:  # noqa: BLE001 - fail the batch's requests, keep serving
                    logger.exception("decoding failed")
                    self._fail(batch.seqs, exc)
                    batch.seqs = []
                if not batch.seqs:
                    del batches[key]
        while True:  # whatever arrived while stopping: requests fail, probes still answer
            try:
                item = self.incoming.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Seq):
                waiting.append(item)
            elif item is not None:
                item(set())
        for batch in batches.values():
            self._fail(batch.seqs, EngineError("the engine stopped", status=503))
        self._fail(waiting, EngineError("the engine stopped", status=503))

    def _fail(self, seqs: list[Seq], exc: BaseException) -> None:
        for seq in seqs:
            seq.error = exc
            seq.emit(seq, True)

    def _admit(self, waiting: list[Seq], batches: dict[str | None, Batch]) -> list[Seq]:
        by_adapter: dict[str | None, list[Seq]] = {}
        rest: list[Seq] = []
        for seq in waiting:
            current = len(batches[seq.adapter].seqs) if seq.adapter in batches else 0
            group = by_adapter.setdefault(seq.adapter, [])
            (group if current + len(group) < self.max_batch else rest).append(seq)
        for adapter, seqs in by_adapter.items():
            try:
                model = self.model_for(adapter, set(batches))
                new = self._prefill(model, seqs)
            except Exception as exc:  # noqa: BLE001
                logger.exception("prefill failed")
                self._fail(seqs, exc)
                continue
            if adapter in batches:
                merge(batches[adapter], new)
            else:
                batches[adapter] = new
            self._finish_done(batches[adapter])
        return rest

    def _prefill(self, model: Any, seqs: list[Seq]) -> Batch:
        self.stats["prefills"] += 1
        hits: list[tuple[Entry | None, int]] = [(None, 0)] * len(seqs)
        if self.prefix is not None:
            for s in seqs:
                s.generation = self.prefix.generation(s.adapter)
            hits = [self.prefix.lookup(s.adapter, s.prompt) for s in seqs]
        for s, (_, n) in zip(seqs, hits, strict=True):
            s.cached = n
            self.stats["prefill_tokens"] += len(s.prompt) - n
            self.stats["cached_tokens"] += n
        if any(n for _, n in hits):
            return self._prefill_after_prefix(model, seqs, hits)
        width = max(len(s.prompt) for s in seqs)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s.prompt):] = torch.tensor(s.prompt)
            mask[i, width - len(s.prompt):] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        dev = self.torch_device
        with torch.inference_mode():
            # A cache with no config keeps every layer whole: the default one keeps only the last window
            # of a sliding-window layer (Gemma 3, GPT-OSS), which the growing cache cannot line up with
            # the full layers. The model's sliding masks still apply; only memory is spent.
            out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=positions.to(dev),
                        **cache_kwargs(model, DynamicCache()), use_cache=True, logits_to_keep=1)
        cache = grow_in_place(output_cache(out), self.cache_dtype)
        batch = Batch(model=model, seqs=list(seqs), cache=cache, mask=mask.to(dev),
                       positions=mask.sum(1).to(dev), last=torch.zeros(len(seqs), dtype=torch.long, device=dev))
        self._sample(batch, out.logits[:, -1])
        return batch

    def _prefill_after_prefix(self, model: Any, seqs: list[Seq], hits: list[tuple[Any, int]]) -> Batch:
        """Prefill only what follows each prompt's cached prefix.

        Row i is laid out [pad, cached prefix, pad, rest of the prompt]: the cached keys and values are
        left-padded to the longest prefix, the rest to the longest remainder, and the mask and position
        ids skip both pads, so each row sees exactly its own prompt.
        """
        width_p = max(n for _, n in hits)
        width_s = max(len(s.prompt) - n for s, (_, n) in zip(seqs, hits, strict=True))
        pad = self.tokenizer.pad_token_id or 0
        dev = self.torch_device
        ids = torch.full((len(seqs), width_s), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width_p + width_s), dtype=torch.long)
        positions = torch.zeros((len(seqs), width_s), dtype=torch.long)
        sample = next(e for e, n in hits if n)
        layers = len(sample.keys)
        keys = [k.new_zeros((len(seqs), k.shape[0], width_p, k.shape[-1])) for k in sample.keys]
        values = [k.clone() for k in keys]
        for i, (s, (entry, n)) in enumerate(zip(seqs, hits, strict=True)):
            rest = s.prompt[n:]
            ids[i, width_s - len(rest):] = torch.tensor(rest)
            positions[i, width_s - len(rest):] = torch.arange(n, len(s.prompt))
            mask[i, width_s + width_p - len(rest):] = 1
            if n:
                mask[i, width_p - n:width_p] = 1
                for layer in range(layers):
                    keys[layer][i, :, width_p - n:] = entry.keys[layer][:, :n]
                    values[layer][i, :, width_p - n:] = entry.values[layer][:, :n]
        cache = DynamicCache()
        cache.layers = [GrowingLayer(k.to(dev), v.to(dev), self.cache_dtype) for k, v in zip(keys, values, strict=True)]
        with torch.inference_mode():
            out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=positions.to(dev),
                        **cache_kwargs(model, cache), use_cache=True, logits_to_keep=1)
        cache = output_cache(out)
        batch = Batch(model=model, seqs=list(seqs), cache=cache, mask=mask.to(dev),
                       positions=torch.tensor([len(s.prompt) for s in seqs], device=dev),
                       last=torch.zeros(len(seqs), dtype=torch.long, device=dev))
        self._sample(batch, out.logits[:, -1])
        return batch

    def _keep_prefix(self, batch: Batch, row: int, seq: Seq) -> None:
        """Store a finished row's keys and values: its prompt and every generated token but the last."""
        cols = batch.mask[row].bool()
        tokens = seq.prompt + seq.tokens[:-1]
        if self.prefix is None or seq.error is not None or int(cols.sum()) != len(tokens):
            return
        # a half-precision model's keys and values are half-precision numbers held in a float32 cache:
        # kept at the model's precision (prefix_dtype) they are the same numbers in half the bytes
        dtype = self.prefix_dtype
        keys = [layer.keys[row][:, cols].to(dtype) for layer in batch.cache.layers]
        values = [layer.values[row][:, cols].to(dtype) for layer in batch.cache.layers]
        self.prefix.store(seq.adapter, seq.generation, tokens, keys, values)

    def decode_step(self, batch: Batch) -> None:
        self.stats["decode_steps"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], len(batch.seqs))
        ones = torch.ones((len(batch.seqs), 1), dtype=batch.mask.dtype, device=batch.mask.device)
        batch.mask = torch.cat([batch.mask, ones], dim=1)
        with torch.inference_mode():
            out = batch.model(input_ids=batch.last[:, None], attention_mask=batch.mask,
                              position_ids=batch.positions[:, None], **cache_kwargs(batch.model, batch.cache),
                              use_cache=True)
        batch.cache = output_cache(out)
        batch.positions = batch.positions + 1
        self._sample(batch, out.logits[:, -1])
        self._finish_done(batch)

    def _sample(self, batch: Batch, logits: torch.Tensor) -> None:
        logits = logits.float()  # [B, V]
        # the model's own distribution, before any response_format mask: what the trainer recomputes and compares
        logp = torch.log_softmax(logits, dim=-1)
        matchers = [s.grammar for s in batch.seqs]
        if any(m is not None for m in matchers):
            logits = mask_logits(logits, matchers)  # -inf on the tokens each row's grammar forbids
        chosen = choose(logits, batch.seqs)  # [B]
        picked = logp.gather(1, chosen[:, None])[:, 0].tolist()
        for i, (seq, tid) in enumerate(zip(batch.seqs, chosen.tolist(), strict=True)):
            p = seq.params
            seq.tokens.append(tid)
            seq.logprobs.append(picked[i])
            if p.top_logprobs:
                values, idx = logp[i].topk(p.top_logprobs)
                seq.top.append(list(zip(idx.tolist(), values.tolist(), strict=True)))
            if seq.grammar is not None and not seq.grammar.accept_token(tid):
                seq.error = EngineError(f"response_format: the grammar refused token {tid} (an engine bug)")
                seq.finish_reason = "stop"
            elif seq.grammar is not None and seq.grammar.is_terminated():  # whole JSON, then a stop token
                seq.finish_reason = "stop"
            elif tid in self.eos_ids and not p.ignore_eos:
                seq.finish_reason = "stop"
            elif p.stop:
                text = self._decode(seq.tokens)
                hits = [text.find(s) for s in p.stop if s in text]
                if hits:
                    seq.finish_reason, seq.stop_text_at = "stop", min(hits)
            if seq.finish_reason is None and len(seq.tokens) >= (p.max_tokens or 1):
                seq.finish_reason = "length"
            if seq.finish_reason is None:
                seq.emit(seq, False)
        batch.last = chosen.to(batch.last.device)

    def _finish_done(self, batch: Batch) -> None:
        keep = [i for i, s in enumerate(batch.seqs) if s.finish_reason is None]
        if len(keep) == len(batch.seqs):
            return
        for i, s in enumerate(batch.seqs):
            if s.finish_reason is not None:
                self._keep_prefix(batch, i, s)
                s.emit(s, True)
        if not keep:
            batch.seqs = []
            return
        index = torch.tensor(keep, device=batch.mask.device)
        batch.seqs = [batch.seqs[i] for i in keep]
        batch.mask, batch.positions, batch.last = batch.mask[index], batch.positions[index], batch.last[index]
        select_rows(batch.cache, index)
        # drop leading columns that are padding for every remaining row
        lead = int((batch.mask.sum(0) == 0).long().cumprod(0).sum())
        if lead:
            batch.mask = batch.mask[:, lead:]
            drop_leading(batch.cache, lead)


def choose(logits: torch.Tensor, seqs: list[Seq]) -> torch.Tensor:
    """Sample one token per row: temperature, top-p, then the inverse CDF at one uniform draw per row.

    One draw per row, not one per vocabulary entry: drawing 32 x 49k exponentials (the
    exponential race) took ~30 ms a decode step on CPU. Within a block (`inverse_cdf`) the CDF is summed
    in float64 so even tokens of probability ~1e-9 keep their own interval; the block totals are float32
    sums. Seeded rows draw from their own generator.
    """
    greedy = torch.tensor([s.params.temperature <= 0 for s in seqs], device=logits.device)
    if bool(greedy.all()):  # held-out scoring: nothing to draw
        return logits.argmax(-1)
    temps = torch.tensor([max(s.params.temperature, 1e-5) for s in seqs], device=logits.device)
    probs = torch.softmax(logits / temps[:, None], dim=-1)  # [B, V]
    top_p = torch.tensor([s.params.top_p for s in seqs], device=logits.device)
    if bool((top_p < 1).any()):
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p[:, None]
        probs = probs.scatter(1, order, sorted_p.masked_fill(drop, 0.0))
    draws = torch.rand(len(seqs), 1, dtype=torch.float64, device=logits.device)
    for i, s in enumerate(seqs):
        if s.generator is not None:
            draws[i, 0] = torch.rand((), dtype=torch.float64, generator=s.generator, device=logits.device)
    chosen = inverse_cdf(probs, draws)
    return torch.where(greedy, logits.argmax(-1), chosen) if bool(greedy.any()) else chosen


BLOCK = 1024  # vocabulary entries per block of `inverse_cdf`


def inverse_cdf(probs: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Row i's token whose interval of the CDF holds draws[i] x the row's total, never one of probability 0.

    In two levels, so only one block a row is summed token by token in float64: the blocks' totals pick
    the block, then that block's running sum picks the token.
    """
    rows, vocab = probs.shape
    pad = -vocab % BLOCK
    blocks = torch.nn.functional.pad(probs, (0, pad)).view(rows, -1, BLOCK) if pad else probs.view(rows, -1, BLOCK)
    totals = blocks.sum(-1).to(torch.float64)  # [B, nb]; summed in float32: a float64 sum copies all of [B, V]
    cdf = totals.cumsum(-1)
    target = draws * cdf[:, -1:]  # [B, 1]
    # strictly below the draw: a block or token of probability 0 (an empty interval) is never picked
    k = torch.searchsorted(cdf, target, right=True)  # [B, 1]
    k = torch.minimum(k, (cdf < cdf[:, -1:]).sum(-1, keepdim=True))  # at most the last block of nonzero total
    before = torch.where(k > 0, cdf.gather(1, (k - 1).clamp(min=0)), torch.zeros_like(target))
    inner = blocks[torch.arange(rows, device=probs.device), k[:, 0]].to(torch.float64).cumsum_(-1)  # [B, BLOCK]
    j = torch.searchsorted(inner, target - before, right=True)
    # rounding may put the remainder at or past the block's own sum: then its last token of nonzero probability
    last = (inner < inner[:, -1:]).sum(-1, keepdim=True)
    return (k * BLOCK + torch.minimum(j, last))[:, 0]


def merge(batch: Batch, new: Batch) -> None:
    """Append `new`'s rows to `batch`, left-padding whichever KV cache is shorter."""
    a, b = batch.mask.shape[1], new.mask.shape[1]
    width = max(a, b)

    def pad(t: torch.Tensor, by: int, dim: int) -> torch.Tensor:
        if by == 0:
            return t
        shape = list(t.shape)
        shape[dim] = by
        return torch.cat([t.new_zeros(shape), t], dim=dim)

    batch.mask = torch.cat([pad(batch.mask, width - a, 1), pad(new.mask, width - b, 1)], dim=0)
    for old_layer, new_layer in zip(batch.cache.layers, new.cache.layers, strict=True):
        old_layer.replace(torch.cat([pad(old_layer.keys, width - a, 2), pad(new_layer.keys, width - b, 2)], dim=0),
                          torch.cat([pad(old_layer.values, width - a, 2), pad(new_layer.values, width - b, 2)], dim=0))
    batch.seqs += new.seqs
    batch.positions = torch.cat([batch.positions, new.positions])
    batch.last = torch.cat([batch.last, new.last])
