"""`RemoteBackend`: the `Backend` protocol over HTTP, talking to `art serve` on another machine."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import httpx
from rich.progress import Progress

from .backend import DEFAULT_BEST_METRIC, Registration, TrainResult
from .config import SFTConfig, TrainConfig
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


class RemoteBackend:
    """Train and serve through an `art serve` process, e.g. on a GPU box.

    Example:
        backend = RemoteBackend("http://gpu-box:7999", api_key=os.environ["ART_API_KEY"])
        await model.register(backend)
    """

    def __init__(self, url: str = "http://127.0.0.1:7999", *, api_key: str | None = None, timeout: float = 3600.0) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout)

    async def _json(self, method: str, path: str, body: Any = None) -> Any:
        response = await self._client.request(method, path, json=body)
        if response.status_code >= 400:
            raise _error(response.status_code, response.content)
        return response.json()

    async def register(self, model: Model) -> Registration:
        data = await self._json("POST", "/art/v1/models/register", model.model_dump(mode="json"))
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
        raise BackendError(f"the server closed the training stream of {path} without a result")

    async def train(
        self, model: Model, groups: list[TrajectoryGroup], config: TrainConfig, *, verbose: bool = True
    ) -> TrainResult:
        body = {"groups": [g.model_dump(mode="json") for g in groups], "config": config.model_dump(mode="json")}
        return await self._stream(f"/art/v1/models/{model.name}/train", body, verbose)

    async def train_sft(
        self, model: Model, trajectories: list[Trajectory], config: SFTConfig, *, verbose: bool = True
    ) -> TrainResult:
        body = {
            "trajectories": [t.model_dump(mode="json") for t in trajectories],
            "config": config.model_dump(mode="json"),
        }
        return await self._stream(f"/art/v1/models/{model.name}/train_sft", body, verbose)

    async def log(self, model: Model, groups: list[TrajectoryGroup], split: str, step: int | None) -> dict[str, Any]:
        body = {"groups": [g.model_dump(mode="json") for g in groups], "split": split, "step": step}
        return await self._json("POST", f"/art/v1/models/{model.name}/log", body)

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
