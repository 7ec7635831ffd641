"""`RemoteBackend`: the `Backend` protocol over HTTP, talking to `art serve` on another machine."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel
from rich.progress import Progress

from .backend import DEFAULT_BEST_METRIC, Registration, TrainResult
from .config import SFTConfig, TrainConfig, train_config
from .trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from .model import Model

logger = logging.getLogger(__name__)


class BackendError(RuntimeError):
    """The backend answered with an error; the message is the server's."""

    def __init__(self, message: str, *, status: int | None = None, type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type


class _StreamCut(BackendError):
    """The training stream ended before its result: the server went away mid-call."""


class RemoteBackend:
    """Train and serve through an `art serve` process, e.g. on a GPU box.

    Example:
        backend = RemoteBackend("http://gpu-box:7999", api_key=os.environ["ART_API_KEY"])
        await model.register(backend)
    """

    def __init__(self, url: str = "http://127.0.0.1:7999", *, api_key: str | None = None, timeout: float = 3600.0,
                 restart_timeout: float = 600.0, max_retries: int = 3) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.restart_timeout = restart_timeout  # how long `train` waits for a server that went away to come back
        self.max_retries = max_retries
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout)

    async def _json(self, method: str, path: str, body: Any = None) -> Any:
        response = await self._client.request(method, path, json=body)
        if response.status_code >= 400:
            raise _error(response.status_code, response.content)
        return response.json()

    async def register(self, model: Model) -> Registration:
        body = model.model_dump(mode="json")
        config = getattr(model, "config", None)
        if isinstance(config, BaseModel):
            # only the fields the user set: the server fills the rest from the base model's alias defaults
            # (e.g. its LoRA target modules) and then ModelConfig's, as LocalBackend does
            body["config"] = config.model_dump(mode="json", exclude_unset=True)
        data = await self._json("POST", "/art/v1/models/register", body)
        reg = Registration.model_validate(data)
        # The server cannot know the address clients reach it by; ours is the one that works.
        return reg.model_copy(update={"base_url": f"{self.url}/v1", "api_key": self.api_key or reg.api_key})

    async def get_step(self, model: Model) -> int:
        return int((await self._json("GET", f"/art/v1/models/{model.name}/step"))["step"])

    async def _stream(self, path: str, body: dict[str, Any], verbose: bool) -> TrainResult:
        with Progress(disable=not verbose, transient=True) as progress:
            task = progress.add_task("train", total=None)
            async with self._client.stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    raise _error(response.status_code, await response.aread())
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind = event.get("type")
                    if kind == "progress":
                        progress.update(
                            task,
                            description=str(event.get("phase", "train")),
                            completed=event.get("done"),
                            total=event.get("total"),
                        )
                    elif kind == "result":
                        return TrainResult(step=event["step"], metrics=event.get("metrics") or {})
                    elif kind == "error":
                        err = event.get("error") or {}
                        raise BackendError(err.get("message", "training failed"), type=err.get("type"))
        raise _StreamCut(f"the server closed the training stream of {path} without a result")

    async def _train_with_retries(self, model: Model, path: str, body: dict[str, Any], verbose: bool) -> TrainResult:
        """POST a training call; if the server goes away (killed, restarted) wait for it, register the model
        again and resend the same body. Its ``step_id`` makes the server return the step it already
        trained (or finish the one it journalled) rather than train the groups twice."""
        for attempt in range(self.max_retries + 1):
            try:
                return await self._stream(path, body, verbose)
            except (httpx.TransportError, _StreamCut) as exc:
                if attempt == self.max_retries:
                    raise BackendError(f"training call {body['step_id']} failed {attempt + 1} times, the server going "
                                       f"away each time (last: {exc!r}); check the server's log") from exc
                logger.warning("the server went away during a training call (%r); waiting up to %.0f s for it, then "
                               "retrying step id %s", exc, self.restart_timeout, body["step_id"])
                await self._wait_for_server()
                await self.register(model)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _wait_for_server(self) -> None:
        deadline = time.monotonic() + self.restart_timeout
        while time.monotonic() < deadline:
            try:
                if (await self._client.get("/health", timeout=5)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.5)
        raise BackendError(f"the server at {self.url} did not come back within {self.restart_timeout:g} s")

    async def train(
        self, model: Model, groups: list[TrajectoryGroup], config: TrainConfig | None = None, *,
        verbose: bool = True, **fields: Any,
    ) -> TrainResult:
        """One step on `groups`; `fields` set `TrainConfig` fields (``learning_rate=1e-5``)."""
        config = train_config(config, fields)
        body = {"groups": [g.model_dump(mode="json") for g in groups], "config": config.model_dump(mode="json"),
                "step_id": uuid.uuid4().hex}
        return await self._train_with_retries(model, f"/art/v1/models/{model.name}/train", body, verbose)

    async def train_sft(
        self, model: Model, trajectories: list[Trajectory], config: SFTConfig, *, verbose: bool = True
    ) -> TrainResult:
        body = {
            "trajectories": [t.model_dump(mode="json") for t in trajectories],
            "config": config.model_dump(mode="json"),
            "step_id": uuid.uuid4().hex,
        }
        return await self._train_with_retries(model, f"/art/v1/models/{model.name}/train_sft", body, verbose)

    async def log(self, model: Model, groups: list[TrajectoryGroup], split: str, step: int | None) -> dict[str, Any]:
        body = {"groups": [g.model_dump(mode="json") for g in groups], "split": split, "step": step}
        metrics: dict[str, Any] = await self._json("POST", f"/art/v1/models/{model.name}/log", body)
        return metrics

    async def list_checkpoints(self, model: Model) -> list[int]:
        return list((await self._json("GET", f"/art/v1/models/{model.name}/checkpoints"))["steps"])

    async def delete_checkpoints(
        self, model: Model, steps: list[int] | None = None, *, best_checkpoint_metric: str | None = DEFAULT_BEST_METRIC
    ) -> list[int]:
        body = {"steps": steps, "best_checkpoint_metric": best_checkpoint_metric}
        data = await self._json("POST", f"/art/v1/models/{model.name}/checkpoints/delete", body)
        return list(data["deleted"])

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> RemoteBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _error(status: int, content: bytes) -> BackendError:
    try:
        err = json.loads(content).get("error") or {}
        message, kind = err.get("message") or content.decode(), err.get("type")
    except (ValueError, AttributeError):
        message, kind = content.decode("utf-8", "replace"), None
    return BackendError(f"backend answered {status}: {message}", status=status, type=kind)
