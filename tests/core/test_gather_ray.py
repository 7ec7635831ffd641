"""``gather_trajectory_groups(..., executor="ray")`` on a real local Ray (2 CPUs), against an OpenAI server on
loopback: the same groups as the local gather, exceptions counted and recorded as there."""

from __future__ import annotations

import os
import pickle
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import art_core as art
from art_core import Registration
from tests.support.scripted_openai import ScriptedOpenAI

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.timeout(300)


class _Backend:
    """Registers a model on the scripted server. It holds a lock, which cannot be pickled: what reaches
    a Ray worker must be the model's endpoint, not its backend."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.lock = threading.Lock()

    async def register(self, model: Any) -> Registration:
        return Registration(base_url=self.url, api_key="secret", served_name=f"{model.name}-served")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAI]:
    with ScriptedOpenAI(lambda body: {"content": f"echo {body['messages'][-1]['content']}"}) as s:
        yield s


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """One Ray for the module, started by the first gather that asks for it; shut down at the end."""
    assert not ray.is_initialized()
    yield
    ray.shutdown()


@pytest.fixture
async def model(server: ScriptedOpenAI) -> art.TrainableModel:
    model = art.TrainableModel(name="agent", project="ray", base_model="unused")
    await model.register(_Backend(server.url))  # type: ignore[arg-type]
    return model


async def rollout(model: art.Model, question: str, *, fail: bool = False) -> art.Trajectory:
    client = model.openai_client()
    with art.capture() as traj:
        reply = await client.chat.completions.create(
            model=model.served_name(), messages=[{"role": "user", "content": question}], max_tokens=8, logprobs=True
        )
    if fail:
        raise ValueError(f"no reward for {question!r}")
    traj.reward = float(len(reply.choices[0].message.content or ""))
    traj.metadata["pid"] = os.getpid()
    return traj


def _groups(model: art.Model, fail: str | None = None) -> list[art.TrajectoryGroup]:
    return [
        art.TrajectoryGroup(rollout(model, f"{q} {i}", fail=q == fail) for i in range(2))
        for q in ("alpha", "beta words", "gamma")
    ]


def _shape(groups: list[art.TrajectoryGroup]) -> list[Any]:
    return [
        (
            [(t.reward, [m["content"] for m in t.turns], t.turns[-1]["sample"]["token_ids"]) for t in g.trajectories],
            [(e.type, e.message) for e in g.exceptions],
        )
        for g in groups
    ]


@pytest.mark.heavy
async def test_ray_rollouts_give_the_groups_the_local_gather_gives(
    ray_session: None, server: ScriptedOpenAI, model: art.TrainableModel
) -> None:
    local = await art.gather_trajectory_groups(_groups(model), show_progress=False)
    seen = len(server.requests)
    remote = await art.gather_trajectory_groups(_groups(model), show_progress=False, executor="ray")
    assert ray.is_initialized() and ray.cluster_resources()["CPU"] == 2  # started by the gather
    assert _shape(remote) == _shape(local) and len(remote[0].trajectories) == 2
    assert len(server.requests) == seen + 6  # each rollout called the endpoint, over HTTP
    pids = {t.metadata["pid"] for g in remote for t in g.trajectories}
    assert os.getpid() not in pids  # in Ray workers, not here
    assert model.backend() is not None  # the driver's model keeps its backend


@pytest.mark.heavy
async def test_a_failing_rollout_is_counted_and_recorded_as_locally(
    ray_session: None, model: art.TrainableModel, caplog: pytest.LogCaptureFixture
) -> None:
    local = await art.gather_trajectory_groups(_groups(model, fail="beta words"), max_exceptions=2, show_progress=False)
    caplog.clear()
    remote = await art.gather_trajectory_groups(
        _groups(model, fail="beta words"), max_exceptions=2, show_progress=False, executor="ray"
    )
    assert _shape(remote) == _shape(local)
    assert remote[1].exceptions[0].type == "ValueError" and "no reward for 'beta words 0'" in remote[1].exceptions[0].message
    assert "Traceback" in remote[1].exceptions[0].traceback
    assert sum("rollout failed" in r.message for r in caplog.records) == 2

    with pytest.raises(art.TooManyExceptions, match="more than max_exceptions=1") as info:
        await art.gather_trajectory_groups(
            _groups(model, fail="beta words"), max_exceptions=1, show_progress=False, executor="ray"
        )
    assert isinstance(info.value.__cause__, ValueError)


async def test_a_rollout_defined_inside_a_function_is_refused_before_anything_runs(model: art.Model) -> None:
    async def nested(model: art.Model) -> art.Trajectory:
        return art.Trajectory()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the coroutines are closed, none left "never awaited"
        with pytest.raises(TypeError, match="define it at module level"):
            await art.gather_trajectory_groups(
                [art.TrajectoryGroup([rollout(model, "q"), nested(model)])], executor="ray", show_progress=False
            )
    with pytest.raises(ValueError, match="executor must be 'local' or 'ray', got 'dask'"):
        await art.gather_trajectory_groups([], executor="dask")  # type: ignore[arg-type]


async def test_a_pickled_model_is_its_endpoint_without_its_backend(model: art.TrainableModel) -> None:
    copy = pickle.loads(pickle.dumps(model))  # the backend holds a lock: pickling it would fail
    assert copy.inference_base_url == model.inference_base_url and copy.served_name() == "agent-served"
    assert copy._backend is None and model._backend is not None
    with pytest.raises(RuntimeError, match="not registered"):
        copy.backend()


def test_rollout_call_recovers_every_kind_of_argument() -> None:
    from art_core.ray_gather import rollout_call

    coro = _all_kinds(1, 2, 3, 4, c=5, d=6)
    fn, args, kwargs = rollout_call(coro)
    assert fn is _all_kinds and args == (1, 2, 3, 4) and kwargs == {"c": 5, "d": 6}


async def _all_kinds(a: int, /, b: int, *rest: int, c: int, **more: int) -> art.Trajectory:
    return art.Trajectory()
