"""score_group and score against a real OpenAI-compatible server on loopback, litellm doing the calls."""

from __future__ import annotations

import functools
import json
import logging

import pytest

import art_core as art
import ruler
from ruler import JudgeError, RulerStats
from ruler.judge import explanation_limit
from tests.ruler.conftest import TOOLS, answer, judge_by, rollout, shown, solved
from tests.support.scripted_openai import ScriptedOpenAI

FAST = {"retry_delay": 0.01, "timeout": 5.0}


def judge_args(server: ScriptedOpenAI, **kw) -> dict:
    return {"judge": "openai/scripted-judge", "litellm_params": {"api_base": server.url, "api_key": "x"}, **FAST, **kw}


def assert_untouched(group: art.TrajectoryGroup, rewards: list[float]) -> None:
    """A failed judge leaves rewards as they were: never a zero, never a partial score."""
    assert group.rewards() == rewards
    assert all("ruler_score" not in t.metrics for t in group.trajectories)


async def test_structured_answer_sets_rewards_logs_and_usage(group: art.TrajectoryGroup) -> None:
    stats = RulerStats()
    with ScriptedOpenAI(judge_by(solved)) as server:
        out = await ruler.score_group(group, **judge_args(server, structured=True), stats=stats)
    assert out is group
    assert len(server.requests) == 1  # one call for the whole group
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "JudgeAnswer"
    assert fmt["json_schema"]["schema"]["properties"]["scores"]["type"] == "array"
    # the duplicate (4th) was sent once and shares the 1st one's score
    assert list(shown(server.requests[0])) == ["1", "2", "3"]
    assert group.rewards() == [1.0, 0.4, 0.0, 1.0]
    assert [t.metrics["independent_reward"] for t in group.trajectories] == [0.1, 0.2, 0.3, 0.4]
    assert [t.metrics["ruler_score"] for t in group.trajectories] == [1.0, 0.4, 0.0, 1.0]
    assert group.trajectories[1].logs == ["RULER openai/scripted-judge: 0.400: judged 2"]
    assert group.trajectories[3].logs == ["RULER openai/scripted-judge: 1.000: judged 1"]
    assert group.metrics["ruler_judge_calls"] == 1
    assert group.metrics["ruler_judge_prompt_tokens"] > 100
    assert group.metrics["ruler_judge_completion_tokens"] > 0
    assert "ruler_judge_cost_usd" not in group.metrics  # litellm has no price for this model
    assert (stats.groups_scored, stats.groups_dropped, stats.judge_calls) == (1, 0, 1)


async def test_prompt_shows_tools_and_shared_context_once(group: art.TrajectoryGroup) -> None:
    with ScriptedOpenAI(judge_by(solved)) as server:
        await ruler.score_group(group, **judge_args(server))
    user = server.requests[0]["messages"][1]["content"]
    assert user.count("You are an email agent.") == 10  # the system prompt's 10 sentences, once
    assert user.count('"name":"search","parameters"') == 1  # the agent's tool list, once
    assert '[tool call c1] search({"q": "ACME"})' in user and "[tool result c1]\n1 result: the ACME invoice" in user
    sent = json.dumps(server.requests[0])
    assert group.trajectories[0].turns[-1]["sample"]["token_ids"][0] > 31337  # the turns were sampled ...
    assert not any(f"{t.turns[-1]['sample']['token_ids'][0]}" in sent for t in group.trajectories)  # ... ids not sent
    assert "-0.123456" not in sent and '"sample"' not in sent and "token_ids" not in sent


async def test_scoring_twice_keeps_the_first_independent_reward(group: art.TrajectoryGroup) -> None:
    with ScriptedOpenAI(judge_by(solved)) as server:
        await ruler.score_group(group, **judge_args(server))
        await ruler.score_group(group, **judge_args(server))
    assert [t.metrics["independent_reward"] for t in group.trajectories] == [0.1, 0.2, 0.3, 0.4]
    assert len(group.trajectories[0].logs) == 2


async def test_json_inside_prose_without_response_format(group: art.TrajectoryGroup) -> None:
    def prose(body: dict) -> dict:
        scores = {i: solved(text) for i, text in shown(body).items()}
        return {"content": f"Let me think.\nThe first one is best.\n```json\n{answer(scores)}\n```\nHope that helps {{sic}}."}

    with ScriptedOpenAI(prose) as server:
        await ruler.score_group(group, **judge_args(server))  # structured=None: litellm says no
    assert "response_format" not in server.requests[0]
    assert group.rewards() == [1.0, 0.4, 0.0, 1.0]


class _ServedBy:
    """A backend that serves every model it registers at `url` (the scripted server stands in for `art serve`)."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def register(self, model: art.Model) -> art.Registration:
        return art.Registration(base_url=self.url, served_name="scripted-judge")


async def test_a_judge_served_by_an_art_backend_gets_response_format_by_default() -> None:
    def fresh() -> art.TrajectoryGroup:
        return art.TrajectoryGroup([rollout("It is invoice-42.", searched=True), rollout("No idea.")])

    with ScriptedOpenAI(judge_by(solved)) as server:
        served = art.Model(name="judge", project="ruler-test")
        await served.register(_ServedBy(server.url))
        pointed = art.Model(name="judge", project="ruler-test", inference_base_url=server.url,
                            inference_model_name="scripted-judge")  # fmt: skip
        await ruler.score_group(fresh(), judge=served, **FAST)  # registered: ART's engines honour it
        await ruler.score_group(fresh(), judge=served, structured=False, **FAST)
        await ruler.score_group(fresh(), judge=pointed, **FAST)  # an endpoint only: litellm says no
    sent = [r.get("response_format", {}).get("type") for r in server.requests]
    assert sent == ["json_schema", None, None]
    # the schema is the group's own: its two ids, in order, each score from 0 to 1
    schema = server.requests[0]["response_format"]["json_schema"]["schema"]
    entries = schema["properties"]["scores"]["prefixItems"]
    assert [e["properties"]["trajectory_id"]["const"] for e in entries] == ["1", "2"]
    assert schema["properties"]["scores"]["maxItems"] == 2
    assert entries[0]["properties"]["score"] == {"type": "number", "minimum": 0, "maximum": 1}
    assert entries[0]["properties"]["explanation"]["maxLength"] == 300  # no max_tokens: the full length


async def test_a_capped_judge_gets_explanations_short_enough_to_finish() -> None:
    """A reply cut off at max_tokens mid-explanation holds no JSON (a tiny random judge writing
    one-character tokens could run 4 x 300 characters past 1,024 tokens); under a cap each
    explanation is bounded to fit."""
    group = art.TrajectoryGroup([rollout("It is invoice-42.", searched=True), rollout("No idea."), rollout("?")])
    with ScriptedOpenAI(judge_by(solved)) as server:
        served = art.Model(name="judge", project="ruler-test")
        await served.register(_ServedBy(server.url))
        await ruler.score_group(group, judge=served, litellm_params={"max_tokens": 400}, **FAST)
    entries = server.requests[0]["response_format"]["json_schema"]["schema"]["properties"]["scores"]["prefixItems"]
    assert [e["properties"]["explanation"]["maxLength"] for e in entries] == [explanation_limit(400, 3)] * 3
    assert explanation_limit(400, 3) == 56


@pytest.mark.parametrize("max_tokens", [64, 200, 1024, 4096])
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_the_longest_answer_the_schema_allows_fits_the_cap_at_one_token_per_byte(max_tokens, n) -> None:
    limit = explanation_limit(max_tokens, n)
    entry = {"trajectory_id": "9999", "explanation": "x" * limit, "score": 0.0000001}
    longest = json.dumps({"scores": [dict(entry, trajectory_id=str(9990 + i)) for i in range(n)]})
    assert limit == 0 or len(longest.encode()) <= max_tokens
    assert limit <= 300 and (max_tokens < 4096 or n > 8 or limit == 300)


async def test_wrong_count_gets_one_corrective_retry(group: art.TrajectoryGroup) -> None:
    replies = [{"content": answer({"1": 0.9, "2": 0.5})}, judge_by(solved)]
    with ScriptedOpenAI(replies) as server:
        await ruler.score_group(group, **judge_args(server))
    assert len(server.requests) == 2
    fix = server.requests[1]["messages"]
    assert fix[-2] == {"role": "assistant", "content": answer({"1": 0.9, "2": 0.5})}
    assert "missing ['3']" in fix[-1]["content"]
    assert group.rewards() == [1.0, 0.4, 0.0, 1.0]
    assert group.metrics["ruler_judge_calls"] == 2


@pytest.mark.parametrize(
    "bad, cause",
    [
        (answer({"1": 1.5, "2": 0.5, "3": -0.2}), "out of range"),
        (answer({"1": 1.0, "2": 0.5, "7": 0.1}), "unknown ['7']"),
        ("I like the first one best.", "no JSON object"),
    ],
)
async def test_wrong_answer_twice_raises_or_drops(group: art.TrajectoryGroup, bad: str, cause: str) -> None:
    with ScriptedOpenAI({"content": bad}) as server:
        with pytest.raises(JudgeError) as info:
            await ruler.score_group(group, **judge_args(server))
        message = str(info.value)
        assert "openai/scripted-judge" in message and "acme-invoice" in message and cause in message
        assert len(server.requests) == 2  # the answer and one corrective retry, no more
        assert_untouched(group, [0.1, 0.2, 0.3, 0.4])

        stats = RulerStats()
        assert await ruler.score_group(group, **judge_args(server), swallow_exceptions=True, stats=stats) is None
    assert stats.groups_dropped == 1 and stats.drop_reasons == {"BadAnswer": 1} and stats.judge_calls == 2
    assert_untouched(group, [0.1, 0.2, 0.3, 0.4])


@pytest.mark.parametrize(
    "failure",
    [{"status": 500, "error": "judge crashed"}, {"status": 429, "error": "slow down"}, {"status": 503, "error": "busy"}],
)
async def test_transient_error_is_retried(group: art.TrajectoryGroup, failure: dict) -> None:
    with ScriptedOpenAI([failure, failure, judge_by(solved)]) as server:
        await ruler.score_group(group, **judge_args(server))
    assert len(server.requests) == 3
    assert group.rewards() == [1.0, 0.4, 0.0, 1.0]
    assert group.metrics["ruler_judge_calls"] == 3


async def test_timeout_is_retried(group: art.TrajectoryGroup) -> None:
    slow = {"delay": 2.0, "content": answer({"1": 0.0, "2": 0.0, "3": 0.0})}
    with ScriptedOpenAI([slow, judge_by(solved)]) as server:
        await ruler.score_group(group, **judge_args(server, timeout=0.5))
    assert len(server.requests) == 2
    assert group.rewards() == [1.0, 0.4, 0.0, 1.0]


async def test_judge_outage_drops_group_and_never_zero_fills(group: art.TrajectoryGroup, caplog) -> None:
    stats = RulerStats()
    with ScriptedOpenAI({"status": 500, "error": "judge down"}) as server:
        with caplog.at_level(logging.WARNING, logger="ruler"):
            out = await ruler.score_group(group, **judge_args(server, max_attempts=3), swallow_exceptions=True, stats=stats)
        assert out is None
        assert len(server.requests) == 3
        with pytest.raises(JudgeError, match=r"openai/scripted-judge.*acme-invoice.*judge down"):
            await ruler.score_group(group, **judge_args(server, max_attempts=2))
    assert stats.groups_dropped == 1 and stats.drop_reasons == {"InternalServerError": 1}
    assert any("dropping the group" in r.message and "judge down" in r.message for r in caplog.records)
    assert_untouched(group, [0.1, 0.2, 0.3, 0.4])


async def test_client_error_is_not_retried(group: art.TrajectoryGroup) -> None:
    with ScriptedOpenAI({"status": 401, "error": "bad key"}) as server:
        with pytest.raises(JudgeError, match="bad key"):
            await ruler.score_group(group, **judge_args(server))
    assert len(server.requests) == 1
    assert_untouched(group, [0.1, 0.2, 0.3, 0.4])


async def test_cost_recorded_when_litellm_knows_the_model(group: art.TrajectoryGroup) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    with ScriptedOpenAI(lambda body: {**judge_by(solved)(body), "usage": usage}) as server:
        await ruler.score_group(
            group, judge="openai/gpt-4.1-mini", litellm_params={"api_base": server.url, "api_key": "x"}, **FAST
        )
    import litellm

    price = litellm.model_cost["gpt-4.1-mini"]
    expected = 1000 * price["input_cost_per_token"] + 100 * price["output_cost_per_token"]
    assert group.metrics["ruler_judge_cost_usd"] == pytest.approx(expected)
    assert group.metrics["ruler_judge_prompt_tokens"] == 1000


async def test_cache_answers_repeat_groups_without_a_call(tmp_path) -> None:
    def fresh() -> art.TrajectoryGroup:
        return art.TrajectoryGroup([rollout("It is invoice-42.", searched=True), rollout("No idea.")])

    stats = RulerStats()
    with ScriptedOpenAI(judge_by(solved)) as server:
        first = await ruler.score_group(fresh(), **judge_args(server), cache=tmp_path, stats=stats)
        again = await ruler.score_group(fresh(), **judge_args(server), cache=tmp_path, stats=stats)
        assert len(server.requests) == 1
        assert again.rewards() == first.rewards() == [1.0, 0.0]
        assert again.metrics["ruler_cache_hits"] == 1 and again.metrics["ruler_judge_calls"] == 0
        await ruler.score_group(fresh(), **judge_args(server), cache=tmp_path, rubric="Shorter is better.")
        assert len(server.requests) == 2  # another rubric is another question
        model = art.Model(name="judge-cache", project="ruler-test")
        await ruler.score_group(fresh(), **judge_args(server), cache=model)
        assert len(server.requests) == 3
    assert stats.cache_hits == 1
    entries = list(tmp_path.rglob("*.json"))
    assert len(entries) == 2
    wrong_ids = '{"scores": {"9": {"trajectory_id": "9", "explanation": "", "score": 1}}}'
    for damage in (wrong_ids, "{not json"):  # a damaged entry costs a call, not a crash
        for entry in entries:
            entry.write_text(damage)
        with ScriptedOpenAI(judge_by(solved)) as server:
            again = await ruler.score_group(fresh(), **judge_args(server), cache=tmp_path)
            assert len(server.requests) == 1 and again.rewards() == [1.0, 0.0]


async def test_noise_check_reports_rank_agreement(group: art.TrajectoryGroup) -> None:
    with ScriptedOpenAI(judge_by(solved)) as server:
        await ruler.score_group(group, **judge_args(server), noise_check=True)
    first, second = (list(shown(r).values()) for r in server.requests)
    assert len(server.requests) == 2 and sorted(first) == sorted(second) and first != second  # same, shuffled
    assert group.metrics["ruler_rank_agreement"] == 1.0  # a judge that reads content agrees with itself
    assert group.rewards() == [1.0, 0.4, 0.0, 1.0]
    assert group.trajectories[0].logs[0].startswith("RULER openai/scripted-judge: 1.000: pass 1 (1.00)")

    def by_position(body: dict) -> dict:  # a judge that ignores the content and likes whatever comes first
        ids = list(shown(body))
        return {"content": answer({i: 1.0 - k / len(ids) for k, i in enumerate(ids)})}

    fresh = art.TrajectoryGroup([rollout(f"answer {k}") for k in range(5)])
    with ScriptedOpenAI(by_position) as server:
        await ruler.score_group(fresh, **judge_args(server), noise_check=True)
    assert fresh.metrics["ruler_rank_agreement"] < 1.0


async def test_score_message_lists_with_tools() -> None:
    convs = [rollout("It is invoice-42.", searched=True).messages(), rollout("No idea.").messages()]
    with ScriptedOpenAI(judge_by(solved)) as server:
        scores = await ruler.score(convs, tools=TOOLS, **judge_args(server))
        assert [s.score for s in scores] == [1.0, 0.0]
        assert scores[1].explanation == "judged 2"
        with pytest.raises(JudgeError, match="2 conversations"):
            await ruler.score(convs, judge="openai/nobody", litellm_params={"api_base": "http://127.0.0.1:9/v1", "api_key": "x"},
                              max_attempts=1)


async def test_score_group_as_after_each_in_gather() -> None:
    async def run(reply: str, searched: bool) -> art.Trajectory:
        return rollout(reply, searched=searched)

    def flaky(body: dict) -> dict:  # the judge chokes on one task only
        if any("doomed" in text for text in shown(body).values()):
            return {"status": 400, "error": "cannot judge this"}
        return judge_by(solved)(body)

    stats = RulerStats()
    with ScriptedOpenAI(flaky) as server:
        groups = await art.gather_trajectory_groups(
            [
                art.TrajectoryGroup([run("It is invoice-42.", True), run("Hmm.", False)]),
                art.TrajectoryGroup([run("doomed", False), run("also doomed", True)]),
            ],
            after_each=functools.partial(ruler.score_group, **judge_args(server), swallow_exceptions=True, stats=stats),
            show_progress=False,
        )
    assert len(groups) == 1 and groups[0].rewards() == [1.0, 0.0]
    assert stats.groups_scored == 1 and stats.groups_dropped == 1 and stats.drop_reasons == {"BadRequestError": 1}


async def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match="TrajectoryGroup"):
        await ruler.score_group([rollout("x")], judge="openai/x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="litellm_params must not contain 'model'"):
        await ruler.score_group(art.TrajectoryGroup([rollout("x")]), judge="openai/x", litellm_params={"model": "y"})
    with pytest.raises(ValueError, match="one each"):
        await ruler.score([[{"role": "user", "content": "a"}]], judge="openai/x", tools=[TOOLS, TOOLS])
    empty = art.TrajectoryGroup([])
    assert await ruler.score_group(empty, judge="openai/x") is empty  # nothing to judge, no call

