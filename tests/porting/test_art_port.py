"""An ART-style rollout and training loop (art_style_loop.py), ported by changing its imports only,
runs against LocalBackend on the tiny model with a scripted judge on loopback (issue 14)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import art_core as art
from tests.ruler.conftest import answer, shown
from tests.support.scripted_openai import ScriptedOpenAI

from .art_style_loop import current_style, pipelined, rollout, train


def judge(body: dict) -> dict:
    ids = list(shown(body))
    return {"content": answer({i: (n + 1) / len(ids) for n, i in enumerate(ids)})}


def test_art_style_loop_runs_with_only_its_imports_changed(tiny_model_path: Path, tmp_path: Path) -> None:
    from art_train import LocalBackend

    async def main() -> tuple[list, list, list, art.Trajectory]:
        backend = LocalBackend(path=tmp_path)
        model = art.TrainableModel(name="port", project="port", base_model=str(tiny_model_path))
        await model.register(backend)
        try:
            with ScriptedOpenAI(judge) as server:
                seen = await train(model, "openai/judge", {"api_base": server.url, "api_key": "x"})
            sizes = await pipelined(model)
            one = await rollout(model, {"id": 9, "secret": 3})
            return seen, sizes, await model.list_checkpoints(), one
        finally:
            await backend.close()

    seen, sizes, checkpoints, one = asyncio.run(main())
    assert [s["step"] for s in seen] == [1, 2]
    for step in seen:
        for group in step["groups"]:
            assert group.rewards() == [1 / 3, 2 / 3, 1.0]  # the judge's scores replaced the rewards
            assert all("independent_reward" in t.metrics for t in group.trajectories)
    # choices appended to messages_and_choices became sampled assistant turns, with token ids
    turns = [m for m in one.turns if m["role"] == "assistant"]
    assert turns and all(art.message_sample(m) is not None for m in turns)
    assert one.metrics["duration_s"] > 0 and one.messages()[0]["role"] == "system"
    assert sizes == [2, 2]
    history = art.RunDir("port", "port", root=tmp_path).read_history()
    assert [round(r["group/win_rate"], 3) for r in history if "group/win_rate" in r] == [
        round(sum(t.reward > 0.5 for g in s["groups"] for t in g.trajectories) / 6, 3) for s in seen
    ]
    assert 2 in checkpoints  # the newest stays


def test_art_current_style_loop_logs_every_steps_metrics(tiny_model_path: Path, tmp_path: Path) -> None:
    with ScriptedOpenAI(judge) as server:
        results = asyncio.run(current_style(str(tiny_model_path), str(tmp_path), "openai/judge",
                                            {"api_base": server.url, "api_key": "x"}))
    assert [r.step for r in results] == [1, 2]
    assert all(r.metrics["trained_tokens"] > 0 for r in results)
    history = art.RunDir("port", "port-now", root=tmp_path).read_history()
    logged = {r["step"]: r for r in history if r.get("split") == "val" and "group/trained_tokens" in r}
    assert sorted(logged) == [1, 2]  # every step's metrics, logged after the step
    for r in results:
        assert logged[r.step]["group/trained_tokens"] == r.metrics["trained_tokens"]
        assert logged[r.step]["group/loss"] == r.metrics["loss"]


def test_a_plain_with_starts_and_stops_the_backend(tmp_path: Path) -> None:
    import httpx

    from art_train import LocalBackend

    with LocalBackend(path=tmp_path) as backend:
        backend._start()  # what registering a model does first
        assert httpx.get(f"{backend.url}/health").status_code == 200
        url = backend.url
    try:
        httpx.get(f"{url}/health", timeout=2)
        raise AssertionError("the server still answers after the with block")
    except httpx.TransportError:
        pass


def test_train_keywords_and_logging_what_train_returns(tiny_model_path: Path, tmp_path: Path) -> None:
    from art_train import LocalBackend

    async def main() -> tuple[art.TrainResult, dict]:
        async with LocalBackend(path=tmp_path) as backend:
            model = art.TrainableModel(name="kw", project="port", base_model=str(tiny_model_path))
            await model.register(backend)
            group = art.TrajectoryGroup([await rollout(model, {"id": i, "secret": 5}) for i in range(2)])
            group.trajectories[0].reward, group.trajectories[1].reward = 1.0, 0.0
            result = await backend.train(model, [group, art.TrajectoryGroup([])], learning_rate=1e-3)
            return result, await model.log([group], metrics=result.metrics, step=result.step)

    result, logged = asyncio.run(main())
    assert result.step == 1 and result.metrics["skipped_groups"]  # a list, as `train` returns it
    assert logged["group/trained_tokens"] == result.metrics["trained_tokens"]
