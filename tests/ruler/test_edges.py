"""Groups RULER cannot rank (issue 14): no silent scores, and OpenPipe ART's call still works."""

from __future__ import annotations

import logging

import art_core as art
import ruler
from tests.ruler.conftest import judge_by, rollout, solved
from tests.support.scripted_openai import ScriptedOpenAI


def judge_args(server: ScriptedOpenAI, **kw) -> dict:
    return {"judge": "openai/scripted-judge", "litellm_params": {"api_base": server.url, "api_key": "x"}, "timeout": 5.0, **kw}


async def test_a_group_of_one_keeps_its_reward_and_calls_no_judge(caplog) -> None:
    stats = ruler.RulerStats()
    with ScriptedOpenAI(judge_by(solved)) as server:
        group = art.TrajectoryGroup([rollout("It is invoice-42.", 0.9)])
        out = await ruler.score_group(group, **judge_args(server), stats=stats)
        assert server.requests == []  # before: one judge call, and the reward became 0.5
    assert out is group and group.rewards() == [0.9] and "ruler_score" not in group.trajectories[0].metrics
    assert group.metrics["ruler_skipped"] == 1 and stats.groups_skipped == 1 and stats.judge_calls == 0
    assert "one trajectory cannot be scored relative to others" in caplog.text


async def test_trajectories_with_nothing_to_judge_are_named(caplog) -> None:
    caplog.set_level(logging.WARNING)
    empty = art.Trajectory()
    prompt_only = art.Trajectory(messages=[{"role": "user", "content": "Which invoice did ACME send?"}])
    with ScriptedOpenAI(judge_by(solved)) as server:
        group = art.TrajectoryGroup([rollout("It is invoice-42."), empty, prompt_only])
        await ruler.score_group(group, **judge_args(server))
    assert group.metrics["ruler_empty_trajectories"] == 1 and group.metrics["ruler_no_assistant_turn"] == 1
    assert f"have no messages ({empty.id})" in caplog.text
    assert f"have no assistant turn ({prompt_only.id})" in caplog.text


async def test_openpipe_art_ruler_score_group_names(caplog) -> None:
    caplog.set_level(logging.INFO, logger="ruler.score")
    with ScriptedOpenAI(judge_by(solved)) as server:
        group = art.TrajectoryGroup([rollout("It is invoice-42.", 0.1), rollout("No idea.", 0.9)])
        out = await ruler.ruler_score_group(
            group,
            "openai/scripted-judge",
            extra_litellm_params={"api_base": server.url, "api_key": "x"},
            debug=True,
        )
    assert out is not None and out.rewards() == [1.0, 0.0]
    assert f"RULER {group.trajectories[0].id}: RULER openai/scripted-judge: 1.000" in caplog.text
