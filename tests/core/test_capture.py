import asyncio

import pytest

import art_core as art


def test_calls_extending_a_history_join_it_and_others_branch():
    with art.capture() as traj:
        sys_user = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        art.record_completion(sys_user, {"role": "assistant", "content": "a1"}, sample=art.Sample(token_ids=[1]))
        art.record_completion(
            [*sys_user, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}],
            {"role": "assistant", "content": "a2"},
            sample=art.Sample(token_ids=[2]),
        )
        art.record_completion([{"role": "user", "content": "sub-agent"}], {"role": "assistant", "content": "b"})
        art.record_completion(
            [{"role": "user", "content": "sub-agent"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "more"}],
            {"role": "assistant", "content": "b2"},
        )
    assert [m["content"] for m in traj.turns] == ["s", "u", "a1", "u2", "a2"]
    assert art.message_sample(traj.turns[2]).token_ids == [1]  # the sampled turn keeps its sample when extended
    assert len(traj.additional_histories) == 1
    assert [m["content"] for m in traj.additional_histories[0].turns] == ["sub-agent", "b", "more", "b2"]


def test_tool_results_follow_the_call_that_asked_for_them():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    with art.capture() as traj:
        art.record_completion([{"role": "user", "content": "main"}], {"role": "assistant", "content": "x"})
        art.record_completion([{"role": "user", "content": "other"}], {"role": "assistant", "content": None, "tool_calls": [call]})
        art.record_tool_result("c1", "42", name="f")
    assert traj.additional_histories[0].turns[-1] == {"role": "tool", "tool_call_id": "c1", "content": "42", "name": "f"}
    assert traj.turns[-1]["content"] == "x"


def test_node_context_tags_samples():
    with art.capture() as traj, art.node("planner"):
        art.record_completion([{"role": "user", "content": "q"}], {"role": "assistant", "content": "p"}, sample=art.Sample(token_ids=[3]))
    assert art.message_sample(traj.turns[-1]).node == "planner"


def test_nothing_is_recorded_outside_a_rollout():
    assert art.record_completion([{"role": "user", "content": "q"}], {"role": "assistant", "content": "p"}) is None


def test_sample_from_choice_reads_both_forms():
    lp = [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:9", "logprob": -0.25}]
    assert art.sample_from_choice({"logprobs": {"content": lp}}).token_ids == [7, 9]
    s = art.sample_from_choice({"token_ids": [1, 2], "logprobs": {"content": [{"token": "a", "logprob": -1.0}, {"token": "b", "logprob": -2.0}]}})
    assert s.token_ids == [1, 2] and s.logprobs == [-1.0, -2.0]
    assert art.sample_from_choice({"message": {"content": "x"}}) is None


async def test_concurrent_tasks_see_their_own_trajectory():
    async def rollout(i: int) -> art.Trajectory:
        with art.capture() as traj:
            for k in range(5):
                await asyncio.sleep(0.001 * ((i * 7 + k) % 3))
                messages = [{"role": "user", "content": f"r{i}"}] + [
                    m for j in range(k) for m in ({"role": "assistant", "content": f"r{i}-{j}"}, {"role": "user", "content": "go"})
                ]
                art.record_completion(messages, {"role": "assistant", "content": f"r{i}-{k}"})
        return traj

    trajs = await asyncio.gather(*(rollout(i) for i in range(100)))
    for i, traj in enumerate(trajs):
        assert traj.additional_histories == []
        assert [m["content"] for m in traj.turns if m["role"] == "assistant"] == [f"r{i}-{k}" for k in range(5)]


async def test_models_say_how_to_fix_misuse():
    model = art.TrainableModel(name="m", base_model="x")
    with pytest.raises(RuntimeError, match="register"):
        model.openai_client()
    with pytest.raises(RuntimeError, match="register"):
        await model.get_step()
    with pytest.raises(ValueError, match="not a valid name"):
        art.TrainableModel(name="bad name", base_model="x")
    assert art.TrainConfig().loss == "grpo"
    with pytest.raises(ValueError):
        art.TrainConfig(lossx=1)
