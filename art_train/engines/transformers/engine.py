"""`TransformersEngine`: the model, its adapters, and requests in and out.

The model is loaded once; each adapter in use is merged into its own copy of the weights (see
`art_train.lora`), so serving an adapter costs no more per token than the bare model. Requests are
rendered to token ids, queued to the `Scheduler` (the worker thread) and answered through the
`Renderer` (OpenAI bodies).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import torch

from ...lora import BaseWeights, LoraPair, load_lora, merges_half, probe_logprobs_batch
from ...models import (
    chat_template_for,
    load_causal_lm,
    load_tokenizer,
    serving_dtype,
    template_messages,
    tool_parser_for,
)
from .. import packed
from ..attention import use_float32_cache_attention
from ..base import ChatRequest, EngineError, SamplingParams
from ..grammar import Grammars, schema_for
from ..prefix import PrefixCache
from ..tool_parsers import get_tool_parser
from .render import Renderer
from .scheduler import Scheduler, Seq

__all__ = ["TransformersEngine"]

logger = logging.getLogger(__name__)


def _contiguous(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (args[0].contiguous(), *args[1:])


def contiguous_head_input(model: Any) -> None:
    """Hand the lm_head a contiguous input. A prefill keeps each row's last position (`logits_to_keep=1`),
    a strided slice; torch's CPU matmul then broadcasts the head's weight to every row instead of
    folding the rows into one matrix: for 64 rows of smollm2-135m in bfloat16 that is 3.4 GB and 3.8 s
    where the copy costs 17 ms and nothing (`benchmarks/engine_batch.py`)."""
    head = model.get_output_embeddings()
    if head is not None:
        head.register_forward_pre_hook(_contiguous)


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
        idle_s: float | None = 1.0,
    ) -> None:
        self.base_model = str(base_model)
        self.idle_s = idle_s  # the worker thread ends after this long with nothing to do (`Scheduler`)
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
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards _models and _adapters between the worker and loaders
        self.stats = {"decode_steps": 0, "max_batch": 0, "prefills": 0, "prefill_tokens": 0, "cached_tokens": 0}
        # finished sequences' KV, reused by prompts that start with the same tokens (0 turns it off)
        self.prefix = PrefixCache(prefix_cache_mb << 20) if prefix_cache_mb > 0 else None
        self.cache_dtype: torch.dtype | None = None  # float32 for a half-precision model on CPU

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the model on the engine's own thread, then serve from it.

        Every torch op of the engine runs on that one thread. A second thread that runs parallel ops
        (a loader from `asyncio.to_thread`) keeps an OpenMP pool of its own; once libgomp manages more
        threads than there are CPUs it stops spinning between parallel regions, and each small op of a
        decode step then waits for its worker to wake (see `art_train.threads`). For the same reason the
        thread ends after `idle_s` seconds with nothing to do; the next request or probe starts another.
        """
        if self._thread is not None:
            return
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def settle(exc: BaseException | None) -> None:
            if not ready.done():
                ready.set_exception(exc) if exc is not None else ready.set_result(None)

        def main() -> None:
            try:
                self._load()
            except BaseException as exc:  # noqa: BLE001 - handed to start's caller
                loop.call_soon_threadsafe(settle, exc)
                return
            self.scheduler.thread = threading.current_thread()  # before any submit can start another
            loop.call_soon_threadsafe(settle, None)
            self.scheduler.run()

        thread = threading.Thread(target=main, name="art-engine", daemon=True)
        thread.start()
        try:
            await ready
        except BaseException:
            await asyncio.to_thread(thread.join, 30)
            raise
        self._thread = thread

    def _load(self) -> None:
        from ...models import resolve_base_model

        path = resolve_base_model(self.base_model)
        self.tokenizer = load_tokenizer(path)
        self.chat_template = chat_template_for(self.tokenizer, self.model_config)
        self.parser = get_tool_parser(tool_parser_for(self.base_model, self.model_config, self.chat_template))
        self.model = load_causal_lm(path, dtype=self.dtype, device=self.device)
        self.model.requires_grad_(False)
        contiguous_head_input(self.model)
        self.torch_device = next(self.model.parameters()).device
        weights_dtype = next(self.model.parameters()).dtype
        if (weights_dtype in (torch.bfloat16, torch.float16) and self.torch_device.type == "cpu"
                and self.model.config._attn_implementation == "sdpa"):
            use_float32_cache_attention(self.model)
            self.cache_dtype = torch.float32
        # bfloat16 on CPU: weights packed once for oneDNN (same products, faster at decode sizes), plain ones freed
        self.packed = packed.packable(self.model) and packed.pack(self.model, free=True) > 0
        modules = dict(self.model.named_modules())
        # adapters are merged into copies only, so the base's own weights are the originals (nothing cloned)
        self.base = BaseWeights(self.model, merge_half=merges_half(self.torch_device),
                                originals=lambda name: packed.dense_weight(modules[name]))
        self._models[None] = self.model
        ids = {self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>")}
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self.eos_ids = {i for i in ids if isinstance(i, int) and i >= 0 and i != self.tokenizer.unk_token_id}
        vocab = getattr(self.model.get_output_embeddings(), "out_features", None) or len(self.tokenizer)
        self.grammars = Grammars(self.tokenizer, vocab, sorted(self.eos_ids))  # compiles on first use
        self.scheduler = Scheduler(self._model_for, self.tokenizer, self.eos_ids, self.torch_device, self.cache_dtype,
                                   self.prefix, self.stats, self.max_batch,
                                   prefix_dtype=weights_dtype if self.cache_dtype is not None else None,
                                   idle_s=self.idle_s)
        self.renderer = Renderer(self.tokenizer, self.parser, self.eos_ids, self.stats)
        logger.info("transformers engine ready: %s on %s", path, self.torch_device)

    async def stop(self) -> None:
        if self._thread is None:
            return
        worker = self.scheduler.stop()
        if worker is not None:
            await asyncio.to_thread(worker.join, 30)
        self._thread = None

    # -- adapters ------------------------------------------------------------------------------
    async def load_adapter(self, name: str, path: Path) -> None:
        await self.load_adapter_pairs(name, await asyncio.to_thread(load_lora, path))

    async def load_adapter_pairs(self, name: str, lora: dict[str, LoraPair]) -> None:
        """Serve `lora` (tensors handed over in memory, e.g. by the trainer in this process) as `name`."""
        with self._lock:
            self._adapters[name] = lora
            self._models.pop(name, None)  # re-merge on next use
        if self.prefix is not None:
            self.prefix.drop(name)

    async def adapter_fingerprint(self, name: str) -> str | None:
        """Fingerprint of the LoRA tensors this engine merges for `name` (the ones it loaded, not the file)."""
        from ...weight_sync import lora_fingerprint

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
            t0 = time.perf_counter()
            if self.packed:  # a copy shares the base's tensors but those this merge writes
                target = packed.merge(self.base, self.model, lora, target)
            else:
                target = target if target is not None else copy.deepcopy(self.model)
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

        self.scheduler.submit(run)
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
        self, request: ChatRequest, emit: Callable[[Seq, bool], None]
    ) -> tuple[list[int], list[Seq]]:
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
            seqs.append(Seq(prompt=prompt, params=params, adapter=request.adapter, emit=emit, index=i,
                             generator=gen, grammar=matcher))
        for seq in seqs:
            self.scheduler.submit(seq)
        return prompt, seqs

    async def chat(self, request: ChatRequest) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        remaining = [request.sampling.n]

        def emit(seq: Seq, final: bool) -> None:
            if final:
                remaining[0] -= 1
                if remaining[0] == 0:
                    loop.call_soon_threadsafe(lambda: None if done.done() else done.set_result(None))

        prompt, seqs = await self._submit(request, emit)
        await done
        for seq in seqs:
            if seq.error is not None:
                raise EngineError(f"generation failed: {seq.error}") from seq.error
        return self.renderer.response(request, prompt, seqs)

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[Seq, int, bool]] = asyncio.Queue()
        sent: dict[int, int] = {}

        def emit(seq: Seq, final: bool) -> None:
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
                text = self.renderer.decode(seq.tokens[:count])
                delta_text, texts[seq.index] = text[len(texts[seq.index]):], text
                sent[seq.index] = count
                yield {**head, "choices": [{"index": seq.index, "delta": {"content": delta_text},
                                            "logprobs": self.renderer.logprobs(seq, start, count, request),
                                            "token_ids": seq.tokens[start:count], "finish_reason": None}]}
                continue
            left -= 1
            message = self.renderer.message(seq, request)
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
                                        "logprobs": self.renderer.logprobs(seq, start, end, request),
                                        "token_ids": seq.tokens[start:end], "finish_reason": seq.finish_reason,
                                        **({"tool_parse_error": seq.parse_error} if seq.parse_error else {})}]}
        yield {**head, "choices": [], "usage": self.renderer.usage(prompt, seqs)}
