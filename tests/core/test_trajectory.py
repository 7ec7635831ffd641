import json
import math

import pytest

import art_core as art
from art_core import Trajectory, message_sample


def agent_trajectory() -> art.Trajectory:
    call = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "café ☕"}'}}
    traj = art.Trajectory(
        messages=[
            {"role": "system", "content": "You are helpful. 日本語も話せます"},
            {"role": "user", "content": "Find a café"},
        ],
        tools=[{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}],
        reward=0.75,
        metrics={"turns": 2, "ok": True},
        metadata={"task": {"id": 3, "tags": ["a", "b"]}},
    )
    traj.turns.append(art.assistant_turn(None, tool_calls=[call], token_ids=[5, 6, 7], logprobs=[-0.5, -0.25, -1.0], step=2, node="agent"))
    traj.turns.append({"role": "tool", "tool_call_id": "call_1", "content": "Café Ünïcode, 2 km"})
    traj.turns.append(art.assistant_turn("Try Café Ünïcode 🎉", token_ids=[9, 10], logprobs=[-0.1, -0.2], step=2))
    traj.additional_histories.append(
        art.History(messages=[{"role": "user", "content": "summarise"}, art.assistant_turn("ok", token_ids=[1])])
    )
    traj.log("judge: good")
    return traj.finish()


def test_json_round_trip_is_lossless():
    traj = agent_trajectory()
    text = traj.model_dump_json()
    back = art.Trajectory.model_validate_json(text)
    assert back == traj
    assert back.model_dump_json() == text
    assert json.loads(text)["messages"][2]["sample"]["token_ids"] == [5, 6, 7]
    group = art.TrajectoryGroup([traj, traj.model_copy(update={"reward": 0.1})], metadata={"k": "v"})
    assert art.TrajectoryGroup.model_validate_json(group.model_dump_json()) == group


def test_messages_strip_sampling_data():
    traj = agent_trajectory()
    messages = traj.messages()
    assert all("sample" not in m for m in messages)
    assert messages[2]["tool_calls"][0]["function"]["name"] == "search"
    assert [i for i, _ in traj.histories()[0].samples()] == [2, 4]
    samples = dict(traj.histories()[0].samples())
    assert samples[2].node == "agent" and samples[4].step == 2


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_reward_names_the_trajectory(bad):
    with pytest.raises(ValueError, match="trajectory t-42 has reward"):
        art.Trajectory(id="t-42", messages=[], reward=bad)
    traj = art.Trajectory(id="t-43", messages=[])
    with pytest.raises(ValueError, match="t-43"):
        traj.reward = bad


def test_bad_messages_are_rejected_with_a_reason():
    with pytest.raises(ValueError, match="role"):
        art.Trajectory(messages=[{"content": "no role"}])
    with pytest.raises(ValueError, match="only assistant turns"):
        art.Trajectory(messages=[{"role": "user", "content": "x", "sample": {"token_ids": [1]}}])
    with pytest.raises(ValueError, match="2 token ids but 1 logprobs"):
        art.assistant_turn("x", token_ids=[1, 2], logprobs=[-1.0])


def test_timer_accumulates(monkeypatch):
    import art_core.trajectory as trajectory_module

    clock = iter([10.0, 10.5, 20.0, 20.25])  # two blocks: 0.5 s, then 0.25 s
    monkeypatch.setattr(trajectory_module.time, "perf_counter", lambda: next(clock))
    traj = art.Trajectory(messages=[])
    with traj.timer("tool"):
        pass
    assert traj.metrics["time/tool_s"] == 0.5
    with traj.timer("tool"):
        pass
    assert traj.metrics["time/tool_s"] == 0.75  # added to, not replaced
    monkeypatch.undo()
    assert traj.finish().metrics["duration_s"] >= 0


async def test_group_from_awaitables_records_exceptions():
    async def ok(r: float) -> art.Trajectory:
        return art.Trajectory(messages=[], reward=r)

    async def boom() -> art.Trajectory:
        raise RuntimeError("tool server died")

    group = await art.TrajectoryGroup([ok(1.0), boom(), ok(0.0)])
    assert group.rewards() == [1.0, 0.0]
    assert [e.type for e in group.exceptions] == ["RuntimeError"]
    assert "tool server died" in group.exceptions[0].message


def test_openpipe_art_messages_and_choices_is_accepted_and_choices_become_turns():
    from openai.types.chat.chat_completion import ChatCompletion

    completion = ChatCompletion.model_validate(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": "agent",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "4"},
                    "logprobs": {"content": [{"token": "token_id:19", "logprob": -0.1, "bytes": None, "top_logprobs": []}]},
                }
            ],
        }
    )
    traj = Trajectory(messages_and_choices=[{"role": "user", "content": "2+2?"}], reward=1.0)
    assert len(traj.turns) == 1  # before: an empty trajectory, without a word
    traj.messages_and_choices.append(completion.choices[0])  # what ART's rollouts do
    assert traj.messages() == [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    assert message_sample(traj.turns[1]).token_ids == [19]
    traj.turns += [{"role": "user", "content": "and 3+3?"}]
    again = Trajectory.model_validate_json(traj.model_dump_json())
    assert again.messages() == traj.messages() and again.turns[1]["sample"]["logprobs"] == [-0.1]


def test_unknown_fields_and_unusable_turns_are_refused_where_they_happen():
    with pytest.raises(ValueError, match=r"Trajectory has no field 'mesages'.*messages_and_choices is accepted"):
        Trajectory(mesages=[{"role": "user", "content": "hi"}])
    traj = Trajectory(messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(TypeError, match="message 1 is a int; a history holds OpenAI-format message dicts"):
        traj.turns.append(42)
    assert len(traj.turns) == 1
    with pytest.raises(TypeError, match="is a object"):
        traj.messages_and_choices = [object()]
