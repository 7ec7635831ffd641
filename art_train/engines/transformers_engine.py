"""The embedded engine: transformers in-process, with a scheduler that batches concurrent requests.

A worker thread owns the model. Each loop it admits waiting requests (prefilled together,
left-padded), merges their KV cache into the running batch of the same adapter, and decodes one
token for every running sequence in one forward pass (continuous batching). Finished sequences
leave the batch at once, their keys and values kept in a prefix cache (`prefix`) so that a later
prompt starting with the same tokens (a multi-turn agent's next turn) prefills only the rest.
Adapters are merged into a copy of the weights (see `adapters`), one copy per adapter in use, so
serving an adapter costs no more per token than the bare model.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from ..lora import BaseWeights, LoraPair, load_lora, probe_logprobs_batch
from ..models import (
    chat_template_for,
    load_causal_lm,
    load_tokenizer,
    serving_dtype,
    template_messages,
    tool_parser_for,
)
from .attention import use_float32_cache_attention
from .base import ChatRequest, EngineError, SamplingParams
from .grammar import Grammars, mask_logits, schema_for
from .kv import GrowingLayer, drop_leading, grow_in_place, select_rows
from .prefix import PrefixCache
from .tool_parsers import get_tool_parser

__all__ = ["TransformersEngine"]

logger = logging.getLogger(__name__)


@dataclass
class _Seq:
    """One choice being generated."""

    prompt: list[int]
    params: SamplingParams
    adapter: str | None
    emit: Callable[[_Seq, bool], None]  # called from the worker after each token, and at the end
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
class _Batch:
    model: Any
    seqs: list[_Seq]
    cache: Any
    mask: torch.Tensor  # [B, L] 1 where a real token sits
    positions: torch.Tensor  # [B] position of the next token
    last: torch.Tensor  # [B] last sampled token


class TransformersEngine:
    """Serves a base model and its LoRA adapters with transformers, batching concurrent requests.

    Example:
        engine = TransformersEngine("smollm2-135m")
        await engine.start()
        reply = await engine.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], model="m"))
    """

    def __init__(
        self,
        base_model: str | Path,
        *,
        model_config: Any = None,
        device: str | None = None,
        dtype: str | None = None,
        max_batch: int = 64,
        max_models: int = 3,
        max_seq_len: int | None = None,
        prefix_cache_mb: int = 1024,
    ) -> None:
        self.base_model = str(base_model)
        self.model_config = model_config
        self.device = device
        trainer_dtype = getattr(model_config, "dtype", None) or "auto"
        self.dtype = serving_dtype(dtype or trainer_dtype, device)
        # Serving in half precision while the trainer runs float32: the trainer computes the weight-sync
        # probe on its own weights merged at this precision, exactly as this engine does (see adapters).
        half = self.dtype in ("bfloat16", "float16")
        self.sync_reference_dtype: str | None = self.dtype if half and self.dtype != trainer_dtype else None
        self.sync_tolerance: float | None = None  # exact at the reference dtype: the service's default
        self.max_batch = max_batch
        self.max_models = max_models
        self.max_seq_len = max_seq_len or getattr(model_config, "max_seq_len", None) or 4096
        self.parser = get_tool_parser(getattr(model_config, "tool_parser", None) or "hermes")
        self._adapters: dict[str, dict[str, LoraPair]] = {}
        self._models: OrderedDict[str | None, Any] = OrderedDict()
        self._incoming: queue.Queue[_Seq | Callable[[set[str | None]], None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards _models and _adapters between the worker and loaders
        self._stopping = False
        self.stats = {"decode_steps": 0, "max_batch": 0, "prefills": 0, "prefill_tokens": 0, "cached_tokens": 0}
        # finished sequences' KV, reused by prompts that start with the same tokens (0 turns it off)
        self.prefix = PrefixCache(prefix_cache_mb << 20) if prefix_cache_mb > 0 else None
        self.cache_dtype: torch.dtype | None = None  # float32 for a half-precision model on CPU

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._thread is not None:
            return
        await asyncio.to_thread(self._load)
        self._thread = threading.Thread(target=self._worker, name="art-engine", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        from ..models import resolve_base_model

        path = resolve_base_model(self.base_model)
        self.tokenizer = load_tokenizer(path)
        self.chat_template = chat_template_for(self.tokenizer, self.model_config)
        self.parser = get_tool_parser(tool_parser_for(self.base_model, self.model_config, self.chat_template))
        self.model = load_causal_lm(path, dtype=self.dtype, device=self.device)
        self.model.requires_grad_(False)
        self.torch_device = next(self.model.parameters()).device
        weights_dtype = next(self.model.parameters()).dtype
        if (weights_dtype in (torch.bfloat16, torch.float16) and self.torch_device.type == "cpu"
                and self.model.config._attn_implementation == "sdpa"):
            use_float32_cache_attention(self.model)
            self.cache_dtype = torch.float32
        self.base = BaseWeights(self.model)
        self._models[None] = self.model
        ids = {self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>")}
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self.eos_ids = {i for i in ids if isinstance(i, int) and i >= 0 and i != self.tokenizer.unk_token_id}
        vocab = getattr(self.model.get_output_embeddings(), "out_features", None) or len(self.tokenizer)
        self.grammars = Grammars(self.tokenizer, vocab, sorted(self.eos_ids))  # compiles on first use
        logger.info("transformers engine ready: %s on %s", path, self.torch_device)

    async def stop(self) -> None:
        if self._thread is None:
            return
        self._stopping = True
        self._incoming.put(None)
        await asyncio.to_thread(self._thread.join, 30)
        self._thread = None

    # -- adapters ------------------------------------------------------------------------------
    async def load_adapter(self, name: str, path: Path) -> None:
        lora = await asyncio.to_thread(load_lora, path)
        with self._lock:
            self._adapters[name] = lora
            self._models.pop(name, None)  # re-merge on next use
        if self.prefix is not None:
            self.prefix.drop(name)

    async def adapter_fingerprint(self, name: str) -> str | None:
        """Fingerprint of the LoRA tensors this engine merges for `name` (the ones it loaded, not the file)."""
        from ..weight_sync import lora_fingerprint

        with self._lock:
            pairs = self._adapters.get(name)
        return None if pairs is None else await asyncio.to_thread(lora_fingerprint, pairs)

    async def unload_adapter(self, name: str) -> None:
        with self._lock:
            self._adapters.pop(name, None)
            self._models.pop(name, None)
        if self.prefix is not None:
            self.prefix.drop(name)

    def _model_for(self, adapter: str | None, busy: set[str | None]) -> Any:
        """The model copy with `adapter` merged in; reuses the least recently used idle copy."""
        with self._lock:
            if adapter in self._models:
                self._models.move_to_end(adapter)
                return self._models[adapter]
            if adapter not in self._adapters:
                raise EngineError(f"adapter {adapter!r} is not loaded", status=404, type="not_found_error")
            lora = self._adapters[adapter]
            target = None
            if len(self._models) >= self.max_models:
                for key in list(self._models):
                    if key is not None and key not in busy:
                        target = self._models.pop(key)
                        break
            if target is None:
                target = copy.deepcopy(self.model)
            t0 = time.perf_counter()
            self.base.apply(target, lora)
            logger.debug("merged adapter %s in %.3fs", adapter, time.perf_counter() - t0)
            self._models[adapter] = target
            return target

    async def sequence_logprobs(self, token_ids: list[int], adapter: str | None) -> list[float]:
        return (await self.sequences_logprobs([token_ids], adapter))[0]

    async def sequences_logprobs(self, sequences: list[list[int]], adapter: str | None) -> list[list[float]]:
        """Runs on the worker thread between decode steps, so it never re-merges a copy a batch is using."""
        if self._thread is None:
            raise EngineError("the engine is not started", status=503, type="server_error")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[list[float]]] = loop.create_future()

        def settle(result: list[list[float]] | None, exc: BaseException | None) -> None:
            if not done.done():
                done.set_exception(exc) if exc is not None else done.set_result(result or [])

        def run(busy: set[str | None]) -> None:
            try:
                model = self._model_for(adapter, busy=busy)
                loop.call_soon_threadsafe(settle, probe_logprobs_batch(model, sequences), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                loop.call_soon_threadsafe(settle, None, exc)

        self._incoming.put(run)
        return await done

    # -- requests ------------------------------------------------------------------------------
    def render(self, request: ChatRequest) -> list[int]:
        try:
            ids = self.tokenizer.apply_chat_template(
                template_messages(request.messages),
                tools=request.tools,
                chat_template=self.chat_template,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        except Exception as exc:  # noqa: BLE001 - a template error is the request's fault
            raise EngineError(f"the chat template could not render these messages: {exc}", status=400,
                              type="invalid_request_error") from exc
        if isinstance(ids, dict):
            ids = ids["input_ids"]
        return list(ids)

    async def _submit(
        self, request: ChatRequest, emit: Callable[[_Seq, bool], None]
    ) -> tuple[list[int], list[_Seq]]:
        if self._thread is None:
            raise EngineError("the engine is not started", status=503, type="server_error")
        schema = schema_for(request.response_format)
        prompt = self.render(request)
        params = request.sampling
        room = self.max_seq_len - len(prompt)
        if room <= 0:
            raise EngineError(
                f"the prompt is {len(prompt)} tokens, at or over the model's limit of {self.max_seq_len}; "
                "shorten the conversation or raise ModelConfig.max_seq_len", status=400, type="invalid_request_error")
        if params.max_tokens is not None and params.max_tokens >= self.max_seq_len:  # could never fit any prompt
            raise EngineError(
                f"max_tokens={params.max_tokens} is at or over the model's limit of {self.max_seq_len} tokens, prompt "
                f"included; ask for at most {room} tokens (or leave max_tokens unset), or raise ModelConfig.max_seq_len",
                status=400, type="invalid_request_error")
        if params.max_tokens is None or params.max_tokens > room:  # a long conversation: stop at the limit
            params = SamplingParams(**{**params.__dict__, "max_tokens": room})
        matchers = [None] * params.n
        if schema is not None:
            matchers = await asyncio.to_thread(self.grammars.matchers, schema, params.n)
        seqs = []
        for i, matcher in enumerate(matchers):
            gen = None
            if params.seed is not None:
                gen = torch.Generator(device=self.torch_device).manual_seed(params.seed + i)
            seqs.append(_Seq(prompt=prompt, params=params, adapter=request.adapter, emit=emit, index=i,
                             generator=gen, grammar=matcher))
        for seq in seqs:
            self._incoming.put(seq)
        return prompt, seqs

    async def chat(self, request: ChatRequest) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        remaining = [request.sampling.n]

        def emit(seq: _Seq, final: bool) -> None:
            if final:
                remaining[0] -= 1
                if remaining[0] == 0:
                    loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

        prompt, seqs = await self._submit(request, emit)
        await done
        for seq in seqs:
            if seq.error is not None:
                raise EngineError(f"generation failed: {seq.error}") from seq.error
        return self._response(request, prompt, seqs)

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[_Seq, int, bool]] = asyncio.Queue()
        sent: dict[int, int] = {}

        def emit(seq: _Seq, final: bool) -> None:
            loop.call_soon_threadsafe(events.put_nowait, (seq, len(seq.tokens), final))

        prompt, seqs = await self._submit(request, emit)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": request.model}
        for seq in seqs:
            yield {**head, "choices": [{"index": seq.index, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]}
        texts: dict[int, str] = {s.index: "" for s in seqs}
        left = len(seqs)
        while left:
            seq, count, final = await events.get()
            if seq.error is not None:
                raise EngineError(f"generation failed: {seq.error}") from seq.error
            start = sent.get(seq.index, 0)
            if not final and (request.tools or count <= start or getattr(self.parser, "markup", False)):
                continue  # with tools (or a format with markup, harmony), the text is parsed once at the end
            if not final:
                text = self._decode(seq.tokens[:count])
                delta_text, texts[seq.index] = text[len(texts[seq.index]):], text
                sent[seq.index] = count
                yield {**head, "choices": [{"index": seq.index, "delta": {"content": delta_text},
                                            "logprobs": self._logprobs(seq, start, count, request),
                                            "token_ids": seq.tokens[start:count], "finish_reason": None}]}
                continue
            left -= 1
            message = self._message(seq, request)
            delta: dict[str, Any] = {}
            if request.tools:
                delta = {k: v for k, v in message.items() if k in ("content", "tool_calls") and v}
                if "tool_calls" in delta:
                    delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
            else:
                full = message.get("content") or ""
                if full.startswith(texts[seq.index]):
                    rest = full[len(texts[seq.index]):]
                    if rest:
                        delta = {"content": rest}
            end = len(seq.tokens)
            yield {**head, "choices": [{"index": seq.index, "delta": delta,
                                        "logprobs": self._logprobs(seq, start, end, request),
                                        "token_ids": seq.tokens[start:end], "finish_reason": seq.finish_reason,
                                        **({"tool_parse_error": seq.parse_error} if seq.parse_error else {})}]}
        yield {**head, "choices": [], "usage": self._usage(prompt, seqs)}

    # -- response building ---------------------------------------------------------------------
    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def _text(self, seq: _Seq) -> str:
        ids = seq.tokens[:-1] if seq.tokens and seq.tokens[-1] in self.eos_ids else seq.tokens
        text = self._decode(ids)
        return text[: seq.stop_text_at] if seq.stop_text_at is not None else text

    def _message(self, seq: _Seq, request: ChatRequest) -> dict[str, Any]:
        text = self._text(seq)
        parsed = self.parser(text)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if parsed.reasoning is not None or getattr(self.parser, "markup", False):
            message["content"] = parsed.content  # harmony: content is the final channel, markup stripped
            if parsed.reasoning is not None:
                message["reasoning_content"] = parsed.reasoning
        if request.tools and request.tool_choice != "none":
            if parsed.error is not None:  # kept as content; counted, never raised
                self.stats["tool_parse_errors"] = self.stats.get("tool_parse_errors", 0) + 1
                seq.parse_error = parsed.error
                logger.info("tool call kept as text: %s", parsed.error)
            if parsed.tool_calls:
                if seq.finish_reason == "stop":
                    seq.finish_reason = "tool_calls"
                message.update(content=parsed.content, tool_calls=parsed.tool_calls)
        return message

    def _token_str(self, tid: int, request: ChatRequest) -> str:
        return f"token_id:{tid}" if request.tokens_as_ids else self.tokenizer.decode([tid], skip_special_tokens=False)

    def _logprobs(self, seq: _Seq, start: int, end: int, request: ChatRequest) -> dict[str, Any]:
        content = []
        for i in range(start, end):
            token = self._token_str(seq.tokens[i], request)
            entry: dict[str, Any] = {"token": token, "logprob": seq.logprobs[i],
                                     "bytes": list(token.encode("utf-8")), "top_logprobs": []}
            if seq.top:
                entry["top_logprobs"] = [
                    {"token": (t := self._token_str(k, request)), "logprob": v, "bytes": list(t.encode("utf-8"))}
                    for k, v in seq.top[i]
                ]
            content.append(entry)
        return {"content": content}

    def _usage(self, prompt: list[int], seqs: list[_Seq]) -> dict[str, int]:
        completion = sum(len(s.tokens) for s in seqs)
        return {"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion,
                "prompt_tokens_details": {"cached_tokens": max((s.cached for s in seqs), default=0)}}

    def _response(self, request: ChatRequest, prompt: list[int], seqs: list[_Seq]) -> dict[str, Any]:
        choices = []
        for seq in seqs:
            message = self._message(seq, request)
            choices.append({
                "index": seq.index,
                "message": message,
                "finish_reason": seq.finish_reason,
                "logprobs": self._logprobs(seq, 0, len(seq.tokens), request),
                "token_ids": list(seq.tokens),
                **({"tool_parse_error": seq.parse_error} if seq.parse_error else {}),
            })
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": choices,
            "usage": self._usage(prompt, seqs),
            "prompt_token_ids": prompt,
        }

    # -- the worker ----------------------------------------------------------------------------
    def _worker(self) -> None:
        batches: dict[str | None, _Batch] = {}
        waiting: list[_Seq] = []
        while not self._stopping:
            block = not batches and not waiting
            jobs: list[Callable[[set[str | None]], None]] = []  # probes (sequence_logprobs)
            try:
                item = self._incoming.get(timeout=0.5) if block else self._incoming.get_nowait()
                while True:
                    if item is None:
                        break
                    (waiting if isinstance(item, _Seq) else jobs).append(item)
                    item = self._incoming.get_nowait()
            except queue.Empty:
                pass
            for job in jobs:
                job(set(batches))
            if self._stopping:
                break
            if waiting:
                waiting = self._admit(waiting, batches)
            for key in list(batches):
                batch = batches[key]
                try:
                    if batch.seqs:  # empty when every row finished at prefill (e.g. max_tokens=1)
                        self._decode_step(batch)
                except Exception as exc:  # noqa: BLE001 - fail the batch's requests, keep serving
                    logger.exception("decoding failed")
                    self._fail(batch.seqs, exc)
                    batch.seqs = []
                if not batch.seqs:
                    del batches[key]
        while True:  # whatever arrived while stopping: requests fail, probes still answer
            try:
                item = self._incoming.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Seq):
                waiting.append(item)
            elif item is not None:
                item(set())
        for batch in batches.values():
            self._fail(batch.seqs, EngineError("the engine stopped", status=503))
        self._fail(waiting, EngineError("the engine stopped", status=503))

    def _fail(self, seqs: list[_Seq], exc: BaseException) -> None:
        for seq in seqs:
            seq.error = exc
            seq.emit(seq, True)

    def _admit(self, waiting: list[_Seq], batches: dict[str | None, _Batch]) -> list[_Seq]:
        by_adapter: dict[str | None, list[_Seq]] = {}
        rest: list[_Seq] = []
        for seq in waiting:
            current = len(batches[seq.adapter].seqs) if seq.adapter in batches else 0
            group = by_adapter.setdefault(seq.adapter, [])
            (group if current + len(group) < self.max_batch else rest).append(seq)
        for adapter, seqs in by_adapter.items():
            try:
                model = self._model_for(adapter, busy=set(batches))
                new = self._prefill(model, seqs)
            except Exception as exc:  # noqa: BLE001
                logger.exception("prefill failed")
                self._fail(seqs, exc)
                continue
            if adapter in batches:
                _merge(batches[adapter], new)
            else:
                batches[adapter] = new
            self._finish_done(batches[adapter])
        return rest

    def _prefill(self, model: Any, seqs: list[_Seq]) -> _Batch:
        self.stats["prefills"] += 1
        hits = [(None, 0)] * len(seqs)
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
                        cache=DynamicCache(), use_cache=True, logits_to_keep=1)
        cache = grow_in_place(out.cache if getattr(out, "cache", None) is not None else out.past_key_values,
                              self.cache_dtype)
        batch = _Batch(model=model, seqs=list(seqs), cache=cache, mask=mask.to(dev),
                       positions=mask.sum(1).to(dev), last=torch.zeros(len(seqs), dtype=torch.long, device=dev))
        self._sample(batch, out.logits[:, -1])
        return batch

    def _prefill_after_prefix(self, model: Any, seqs: list[_Seq], hits: list[tuple[Any, int]]) -> _Batch:
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
                        cache=cache, use_cache=True, logits_to_keep=1)
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        batch = _Batch(model=model, seqs=list(seqs), cache=cache, mask=mask.to(dev),
                       positions=torch.tensor([len(s.prompt) for s in seqs], device=dev),
                       last=torch.zeros(len(seqs), dtype=torch.long, device=dev))
        self._sample(batch, out.logits[:, -1])
        return batch

    def _keep_prefix(self, batch: _Batch, row: int, seq: _Seq) -> None:
        """Store a finished row's keys and values: its prompt and every generated token but the last."""
        cols = batch.mask[row].bool()
        tokens = seq.prompt + seq.tokens[:-1]
        if self.prefix is None or seq.error is not None or int(cols.sum()) != len(tokens):
            return
        keys = [layer.keys[row][:, cols].clone() for layer in batch.cache.layers]
        values = [layer.values[row][:, cols].clone() for layer in batch.cache.layers]
        self.prefix.store(seq.adapter, seq.generation, tokens, keys, values)

    def _decode_step(self, batch: _Batch) -> None:
        self.stats["decode_steps"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], len(batch.seqs))
        ones = torch.ones((len(batch.seqs), 1), dtype=batch.mask.dtype, device=batch.mask.device)
        batch.mask = torch.cat([batch.mask, ones], dim=1)
        with torch.inference_mode():
            out = batch.model(input_ids=batch.last[:, None], attention_mask=batch.mask,
                              position_ids=batch.positions[:, None], cache=batch.cache, use_cache=True)
        batch.cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        batch.positions = batch.positions + 1
        self._sample(batch, out.logits[:, -1])
        self._finish_done(batch)

    def _sample(self, batch: _Batch, logits: torch.Tensor) -> None:
        logits = logits.float()  # [B, V]
        # the model's own distribution, before any response_format mask: what the trainer recomputes and compares
        logp = torch.log_softmax(logits, dim=-1)
        matchers = [s.grammar for s in batch.seqs]
        if any(m is not None for m in matchers):
            logits = mask_logits(logits, matchers)  # -inf on the tokens each row's grammar forbids
        chosen = _choose(logits, batch.seqs)  # [B]
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

    def _finish_done(self, batch: _Batch) -> None:
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


def _choose(logits: torch.Tensor, seqs: list[_Seq]) -> torch.Tensor:
    """Sample one token per row: temperature, top-p, then the inverse CDF at one uniform draw per row.

    One draw per row, not one per vocabulary entry: drawing 32 x 49k exponentials (the
    exponential race) took ~30 ms a decode step on CPU. The CDF is summed in float64 so even
    tokens of probability ~1e-9 keep their own interval. Seeded rows draw from their own generator.
    """
    temps = torch.tensor([max(s.params.temperature, 1e-5) for s in seqs], device=logits.device)
    probs = torch.softmax(logits / temps[:, None], dim=-1)  # [B, V]
    top_p = torch.tensor([s.params.top_p for s in seqs], device=logits.device)
    if bool((top_p < 1).any()):
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p[:, None]
        probs = probs.scatter(1, order, sorted_p.masked_fill(drop, 0.0))
    cdf = probs.to(torch.float64).cumsum_(-1)
    draws = torch.rand(len(seqs), 1, dtype=torch.float64, device=logits.device)
    for i, s in enumerate(seqs):
        if s.generator is not None:
            draws[i, 0] = torch.rand((), dtype=torch.float64, generator=s.generator, device=logits.device)
    # strictly below the draw: a token of probability 0 (an empty interval) is never picked
    chosen = torch.searchsorted(cdf, draws * cdf[:, -1:], right=True)[:, 0].clamp_(max=logits.shape[-1] - 1)
    greedy = torch.tensor([s.params.temperature <= 0 for s in seqs], device=logits.device)
    return torch.where(greedy, logits.argmax(-1), chosen)


def _merge(batch: _Batch, new: _Batch) -> None:
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
