"""The engine protocol: what the server needs from whatever runs the model.

An engine serves one base model and any number of LoRA adapters, each under a name
(``agent-001@3``). The service decides which adapter a request gets, and holds requests while a
step trains (its gate); the engine only runs what it is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["ChatRequest", "Engine", "EngineError", "EngineUnavailable", "InMemoryAdapters", "SamplingParams", "Sleeps"]


class EngineError(RuntimeError):
    """The engine could not serve a request; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, *, status: int = 500, type: str = "engine_error") -> None:
        super().__init__(message)
        self.status = status
        self.type = type


class EngineUnavailable(EngineError):
    """The engine's process is gone or not answering (connection refused or reset): the request did not
    fail on its own account, and another replica may serve it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=503, type="engine_unavailable")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    n: int = 1
    top_logprobs: int = 0
    ignore_eos: bool = False  # vLLM's extension: generate max_tokens whatever comes (benchmarks)


@dataclass
class ChatRequest:
    """One chat completion, already validated: messages, tools and sampling, plus the adapter to use."""

    messages: list[dict[str, Any]]
    model: str  # the name to answer with
    adapter: str | None = None  # None: the bare base model
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stream: bool = False
    tokens_as_ids: bool = False  # logprob tokens read "token_id:N"
    response_format: dict[str, Any] | None = None  # OpenAI's: json_schema / json_object constrain the reply
    extra: dict[str, Any] = field(default_factory=dict)  # other body fields, passed on where an engine can use them
    session: str | None = None  # the trajectory it belongs to (header X-ART-Trajectory): replicas route on it


@runtime_checkable
class Engine(Protocol):
    """Start, serve chat completions, load and unload adapters, answer the weight-sync probe, stop.

    Attributes:
        sync_tolerance: the largest |served - trained| probe logprob difference this engine can be
            held to (None: the service's default for the model's precision).
        sync_reference_dtype: when set, the trainer computes its side of the probe with the adapter
            merged into the base at this dtype, as the engine serves it (None: in its own precision).
    """

    sync_tolerance: float | None
    sync_reference_dtype: str | None

    async def start(self) -> None: ...

    async def chat(self, request: ChatRequest) -> dict[str, Any]:
        """An OpenAI ``chat.completion`` body; every choice carries ``token_ids`` and ``logprobs.content``."""
        ...

    def chat_stream(self, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        """``chat.completion.chunk`` bodies, the last one with ``finish_reason`` and ``usage``."""
        ...

    async def load_adapter(self, name: str, path: Path) -> None: ...

    async def unload_adapter(self, name: str) -> None: ...

    async def sequence_logprobs(self, token_ids: list[int], adapter: str | None) -> list[float]:
        """log p(token_i | tokens before it) for i >= 1, as served (the weight-sync probe)."""
        ...

    async def sequences_logprobs(self, sequences: list[list[int]], adapter: str | None) -> list[list[float]]:
        """`sequence_logprobs` of several sequences (the embedded engine batches them with
        `adapters.probe_logprobs_batch`, as the trainer's reference does)."""
        ...

    async def adapter_fingerprint(self, name: str) -> str | None:
        """`weight_sync.lora_fingerprint` of the LoRA served as `name`, from what the engine itself holds or
        reports having loaded; None when the engine cannot say (the weight-sync check then relies on logprobs)."""
        ...

    async def stop(self) -> None: ...


@runtime_checkable
class InMemoryAdapters(Protocol):
    """An engine in the trainer's process that can take an adapter's tensors without a disk round trip."""

    async def load_adapter_pairs(self, name: str, lora: dict[str, Any]) -> None:
        """Serve `lora` (``{module: art_train.lora.LoraPair}``) as adapter `name`."""
        ...


@runtime_checkable
class Sleeps(Protocol):
    """An engine that can free its accelerator memory while a trainer on the same device trains a step
    (vLLM's sleep mode). The service calls `sleep` before each step of a model served by it and `wake_up`
    after, before the swap loads the new adapter; meanwhile the model's requests wait at its gate.

    Attributes:
        sleep_mode: whether it was started able to sleep (else both calls do nothing).
    """

    sleep_mode: bool

    async def sleep(self) -> None: ...

    async def wake_up(self) -> None: ...
