"""An ART-style rollout and training loop (art_style_loop.py), ported by changing its imports only,
runs against LocalBackend on the tiny model with a scripted judge on loopback (issue 14)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import art_core as art
from tests.ruler.conftest import answer, shown
from tests.support.scripted_openai import ScriptedOpenAI

from .art_style_loop import pipelined, rollout, train


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
