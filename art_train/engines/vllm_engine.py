"""The vLLM engine: `vllm.entrypoints.openai.api_server` in its own process, adapters loaded at run time.

The server runs under any interpreter (``ART_VLLM_PYTHON``, e.g. ``.venv-vllm/bin/python`` from
``scripts/setup_vllm.sh``), in its own process group, and is stopped by its pid. A watchdog
restarts it if it dies and loads the adapters again. Requests are forwarded with
``logprobs`` and ``return_token_ids`` so every choice carries what was sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from art_core.config import VLLMConfig

from .base import ChatRequest, EngineError, EngineUnavailable
from .child import core_share, free_port, stop_group

__all__ = ["VLLMEngine", "omp_binding"]

logger = logging.getLogger(__name__)

BASE_NAME = "base"


def _on_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _cpu_dtype() -> str:
    """vLLM's dtype on CPU: bfloat16 where the CPU multiplies it natively, else float32 (emulated bfloat16
    is many times slower there: `benchmarks/autocast.py`)."""
    try:
        from ..models import cpu_has_native_bf16

        return "bfloat16" if cpu_has_native_bf16() else "float32"
    except ImportError:
        return "bfloat16"


def _dtype_in(args: list[str]) -> str | None:
    """The last ``--dtype X`` or ``--dtype=X`` in `args` (vLLM takes the last one)."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--dtype" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--dtype="):
            found = arg.split("=", 1)[1]
    return found


def omp_binding(cpus: list[int], ranks: int) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for a vLLM server with `ranks` CPU ranks on `cpus`: the cores cut into
    `ranks` equal runs, ``|`` between ranks ([0, 1, 2, 3], 2 -> ``0,1|2,3``); None (vLLM's 'auto') when
    there are fewer cores than ranks."""
    if len(cpus) < max(1, ranks):
        return None
    return "|".join(",".join(map(str, core_share(cpus, ranks, r))) for r in range(ranks))


class VLLMEngine:
    """Serves a base model and LoRA adapters through a vLLM OpenAI server in a child process.

    Example:
        engine = VLLMEngine("/models/smollm2", python=".venv-vllm/bin/python")
        await engine.start()
    """

    def __init__(
        self,
        base_model: str | Path,
        *,
        model_config: Any = None,
        python: str | None = None,
        port: int | None = None,
        extra_args: list[str] | None = None,
        startup_timeout: float = 600.0,
        restart: bool = True,
        cpus: list[int] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.base_model = str(base_model)
        self.model_config = model_config
        self.python = python or os.environ.get("ART_VLLM_PYTHON") or sys.executable
        self.port = port or free_port()
        self.env = dict(env or {})  # over everything else in the server's environment (a replica's GPUs)
        self.settings: VLLMConfig = getattr(model_config, "vllm", None) or VLLMConfig()
        self.extra_args = [*self.settings.extra_args, *(extra_args or [])]
        self.startup_timeout = startup_timeout
        # False: no watchdog and no restart on a dropped connection, which raises `EngineUnavailable` (a
        # `ReplicaSet` restarts its replicas itself, and retries the request on another)
        self.restart = restart
        self.cpus = cpus  # on a CPU: the cores its ranks are bound to (a replica's share), None: vLLM's 'auto'
        self.url = f"http://127.0.0.1:{self.port}"
        self.gpu = _on_gpu()
        if self.settings.enable_sleep_mode and not self.gpu:
            raise ValueError(
                "vllm.enable_sleep_mode needs a GPU: vLLM's sleep mode frees GPU memory (CUDA or ROCm), and vLLM on "
                "CPU refuses to start with it ('Sleep mode is not supported on current platform'); set "
                "VLLMConfig(enable_sleep_mode=False) on this machine, or run on a GPU")
        # what vLLM serves on CPU: a --dtype in extra_args (it comes last and wins), else by the CPU
        self.cpu_dtype = None if self.gpu else _dtype_in(self.extra_args) or _cpu_dtype()
        # bfloat16 on CPU against a float32 trainer: rounding alone moves some probe tokens by ~0.25
        self.sync_tolerance: float | None = 0.5 if self.cpu_dtype == "bfloat16" else 0.02
        self.sync_reference_dtype: str | None = None  # the trainer's own precision, within sync_tolerance
        self.vllm_tool_parser = getattr(model_config, "tool_parser", None) or "hermes"  # refined in start()
        self._adapters: dict[str, Path] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        # vLLM's own port is on loopback but any local user could reach it: it takes this key on /v1
        # (given in its environment, not on its command line, so `ps` does not show it)
        self.api_key = secrets.token_urlsafe(32)
        self._client = httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(600.0, connect=10.0),
                                         headers={"Authorization": f"Bearer {self.api_key}"})
        self._watchdog: asyncio.Task[None] | None = None
        self._stopping = False
        self._restart_lock = asyncio.Lock()
        self.sleep_mode = self.settings.enable_sleep_mode
        self._sleepers = 0  # models whose step is training now: vLLM sleeps while there is one
        self._sleep_lock = asyncio.Lock()
        self.log_path = Path(tempfile.gettempdir()) / f"art-vllm-{self.port}.log"

    # -- process -------------------------------------------------------------------------------
    def _command(self, template_file: Path) -> list[str]:
        vllm = self.settings
        rank = vllm.max_lora_rank
        if rank is None:
            rank = max(8, int(getattr(self.model_config, "lora_rank", 8) or 8))
            rank = 1 << (rank - 1).bit_length()  # vLLM accepts powers of two
        max_len = int(getattr(self.model_config, "max_seq_len", 2048) or 2048)
        args = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.base_model, "--served-model-name", BASE_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", str(min(max_len, 4096)),
            "--enable-lora", "--max-lora-rank", str(rank), "--max-loras", str(vllm.max_loras),
            "--enable-auto-tool-choice",
            "--tool-call-parser", self.vllm_tool_parser,
            "--chat-template", str(template_file),
        ]
        # each only where it differs from vLLM's default, so the default command line stays as it was
        if vllm.tensor_parallel_size != 1:
            args += ["--tensor-parallel-size", str(vllm.tensor_parallel_size)]
        if vllm.data_parallel_size != 1:
            args += ["--data-parallel-size", str(vllm.data_parallel_size)]
        if vllm.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", str(vllm.gpu_memory_utilization)]
        if vllm.enable_sleep_mode:
            args += ["--enable-sleep-mode"]
        if not self.gpu:
            args += ["--dtype", str(self.cpu_dtype), "--enforce-eager"]
        return args + self.extra_args

    def _env(self) -> dict[str, str]:
        """The server's environment: ours, the LoRA and key settings, and on a CPU its KV cache and cores
        (a value already set in ours wins)."""
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_API_KEY": self.api_key}
        if not self.gpu:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            bind = omp_binding(self.cpus or [], self.settings.tensor_parallel_size)
            if bind is not None:
                env.setdefault("VLLM_CPU_OMP_THREADS_BIND", bind)
        if self.sleep_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # vLLM serves /sleep and /wake_up only in its dev mode
        return {**env, **self.env}

    def _spawn(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self._proc = subprocess.Popen(self._command(self._template_file), env=self._env(), stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        logger.info("started vLLM (pid %d) on %s, log %s", self._proc.pid, self.url, self.log_path)

    async def _wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.startup_timeout
        while loop.time() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
                raise EngineError(f"vLLM exited during startup (interpreter {self.python}); log tail:\n{tail}",
                                  status=503, type="server_error")
            with contextlib.suppress(httpx.HTTPError):
                if (await self._client.get("/health", timeout=2)).status_code == 200:
                    return
            await asyncio.sleep(1.0)
        raise EngineError(f"vLLM did not become ready in {self.startup_timeout:.0f}s; see {self.log_path}", status=503)

    async def start(self) -> None:
        if self._proc is not None:
            return
        from ..models import chat_template_for, load_tokenizer, vllm_tool_parser_for

        tokenizer = await asyncio.to_thread(load_tokenizer, self.base_model)
        self.tokenizer = tokenizer
        fd, name = tempfile.mkstemp(prefix="art-template-", suffix=".jinja")
        template = chat_template_for(tokenizer, self.model_config)
        with os.fdopen(fd, "w") as f:
            f.write(template)
        self._template_file = Path(name)
        self.vllm_tool_parser = vllm_tool_parser_for(self.base_model, self.model_config, template)
        self._spawn()
        try:
            await self._wait_ready()
        except BaseException:
            self._kill()
            raise
        if self.restart:
            self._watchdog = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(2.0)
            if self._proc is not None and self._proc.poll() is not None and not self._stopping:
                try:
                    await self._restart()
                except EngineError:
                    logger.exception("restarting vLLM failed; the next request tries again")

    async def _healthy(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return (await self._client.get("/health", timeout=5)).status_code == 200
        return False

    async def _restart(self) -> None:
        """Bring the server back if it is gone (a request saw a dropped connection, or the watchdog a dead pid)."""
        async with self._restart_lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                if await self._healthy():
                    return  # another caller restarted it already, or the error was transient
                for _ in range(40):  # a killed server closes its socket a moment before its pid exits
                    await asyncio.sleep(0.25)
                    if proc.poll() is not None:
                        break
                else:
                    logger.error("vLLM (pid %d) stopped answering; killing its process group", proc.pid)
                    await asyncio.to_thread(self._kill)
            code = proc.returncode if proc is not None else None
            logger.error("vLLM (pid %s) exited with code %s; restarting", proc.pid if proc else None, code)
            self._spawn()
            await self._wait_ready()
            for name, path in list(self._adapters.items()):
                await self._load(name, path)

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        stop_group(proc, grace=30)

    async def stop(self) -> None:
        self._stopping = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        await asyncio.to_thread(self._kill)
        await self._client.aclose()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- sleep mode (GPU) ---------------------------------------------------------------------------
    async def _dev_post(self, path: str, params: dict[str, str] | None = None) -> None:
        try:
            r = await self._client.post(path, params=params)
        except httpx.TransportError as exc:
            raise EngineUnavailable(f"vLLM at {self.url} (pid {self.pid}) did not answer {path}: {exc!r}") from exc
        if r.status_code >= 400:
            raise EngineError(f"vLLM refused {path} ({r.status_code}): {r.text}")

    async def sleep(self) -> None:
        """Free vLLM's GPU memory for a training step: level 1 moves the base weights to CPU memory and drops
        the KV cache; requests in flight finish first (mode=wait), later ones wait in vLLM until `wake_up`.
        Models sharing this engine nest: it sleeps at the first `sleep` and wakes at the last `wake_up`.
        Nothing happens without `enable_sleep_mode`."""
        if not self.sleep_mode:
            return
        async with self._sleep_lock:
            if self._sleepers == 0:
                await self._dev_post("/sleep", {"level": "1", "mode": "wait"})
                logger.info("vLLM (pid %s) is asleep while a step trains", self.pid)
            self._sleepers += 1

    async def wake_up(self) -> None:
        """Bring the weights back (the adapters loaded stay loaded); see `sleep`."""
        if not self.sleep_mode:
            return
        async with self._sleep_lock:
            self._sleepers = max(0, self._sleepers - 1)
            if self._sleepers == 0:  # tried again at the next step's end if this fails
                await self._dev_post("/wake_up")
                logger.info("vLLM (pid %s) is awake", self.pid)

    # -- adapters ------------------------------------------------------------------------------
    async def _load(self, name: str, path: Path) -> None:
        r = await self._client.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)})
        if r.status_code >= 400:
            raise EngineError(f"vLLM could not load adapter {name} from {path}: {r.text}")

    async def load_adapter(self, name: str, path: Path) -> None:
        if name in self._adapters:
            await self.unload_adapter(name)
        await self._load(name, Path(path))
        self._adapters[name] = Path(path)

    async def adapter_fingerprint(self, name: str) -> str | None:
        """Fingerprint of the adapter folder vLLM reports serving as `name` (``root`` in /v1/models).

        vLLM's weights cannot be read from outside; what it says it loaded, read back from disk, is the
        nearest identity there is. None when vLLM does not list the adapter or its folder.
        """
        from ..lora import load_lora
        from ..weight_sync import lora_fingerprint

        r = await self._client.get("/v1/models")
        if r.status_code >= 400:
            return None
        root = next((m.get("root") for m in r.json().get("data", []) if m.get("id") == name), None)
        if not root or not Path(root).is_dir():
            return None
        return await asyncio.to_thread(lambda: lora_fingerprint(load_lora(root)))

    async def unload_adapter(self, name: str) -> None:
        if self._adapters.pop(name, None) is not None:
            await self._client.post("/v1/unload_lora_adapter", json={"lora_name": name})

    # -- requests ------------------------------------------------------------------------------
    def _body(self, request: ChatRequest) -> dict[str, Any]:
        p = request.sampling
        body: dict[str, Any] = {
            **{k: v for k, v in request.extra.items() if k not in ("model_config",)},
            "model": request.adapter or BASE_NAME,
            "messages": request.messages,
            "temperature": p.temperature, "top_p": p.top_p, "n": p.n,
            "logprobs": True, "return_token_ids": True,
        }
        for key, value in (("max_tokens", p.max_tokens), ("seed", p.seed), ("stop", list(p.stop) or None),
                           ("top_logprobs", p.top_logprobs or None), ("tools", request.tools),
                           ("tool_choice", request.tool_choice if request.tools else None),
                           ("response_format", request.response_format)):
            if value is not None:
                body[key] = value
        if p.ignore_eos:
            body["ignore_eos"] = True
        if request.tokens_as_ids:
            body["return_tokens_as_token_ids"] = True
        return body

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = await self._client.post(path, json=body)
        except httpx.TransportError as exc:
            if not self.restart:
                raise EngineUnavailable(f"vLLM at {self.url} (pid {self.pid}) did not answer: {exc!r}") from exc
            await self._restart()
            r = await self._client.post(path, json=body)
        if r.status_code >= 400:
            try:
                message = r.json().get("error", {}).get("message") or r.text
            except ValueError:
                message = r.text
            raise EngineError(f"vLLM: {message}", status=r.status_code if r.status_code < 500 else 502)
        return r.json()

    async def chat(self, request: ChatRequest) -> dict[str, Any]:
        data = await self._post("/v1/chat/completions", self._body(request))
        data["model"] = request.model
        return data

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        body = {**self._body(request), "stream": True, "stream_options": {"include_usage": True}}
        try:
            async with self._client.stream("POST", "/v1/chat/completions", json=body) as r:
                if r.status_code >= 400:
                    raise EngineError(f"vLLM: {(await r.aread()).decode(errors='replace')}", status=r.status_code)
                async for line in r.aiter_lines():
                    if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    chunk["model"] = request.model
                    yield chunk
        except httpx.TransportError as exc:
            if self.restart:
                raise
            raise EngineUnavailable(f"vLLM at {self.url} (pid {self.pid}) dropped a stream: {exc!r}") from exc

    async def sequences_logprobs(self, sequences: list[list[int]], adapter: str | None) -> list[list[float]]:
        # one at a time: vllm-cpu 0.32's EngineCore died on concurrent prompt_logprobs requests here
        return [await self.sequence_logprobs(ids, adapter) for ids in sequences]

    async def sequence_logprobs(self, token_ids: list[int], adapter: str | None) -> list[float]:
        body = {"model": adapter or BASE_NAME, "prompt": token_ids, "max_tokens": 1, "prompt_logprobs": 0,
                "temperature": 0}
        data = await self._post("/v1/completions", body)
        entries = data["choices"][0]["prompt_logprobs"][1:]
        out = []
        for tid, entry in zip(token_ids[1:], entries, strict=True):
            out.append(float(entry[str(tid)]["logprob"]))
        return out
