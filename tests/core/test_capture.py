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


def test_prefix_match_ignores_form_and_copies_what_it_keeps():
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    with art.capture() as traj:
        request = [{"role": "user", "content": "q"}]
        art.record_completion(
            request, {"role": "assistant", "content": "", "tool_calls": [call]}, sample=art.Sample(token_ids=[5])
        )
        # the same turns in another form: content parts, arguments re-serialised, extra keys, content None
        respaced = {**call, "function": {"name": "add", "arguments": '{"b":2,"a":1}'}}
        again = [
            {"role": "user", "content": [{"type": "text", "text": "q"}], "name": "me"},
            {"role": "assistant", "content": None, "tool_calls": [respaced]},
            {"role": "tool", "tool_call_id": "c1", "content": "3"},
        ]
        art.record_completion(again, {"role": "assistant", "content": "3"})
        again[2]["content"] = "changed after the call"
        # a different tool call id is a different conversation
        other = [request[0], {"role": "assistant", "content": "", "tool_calls": [{**call, "id": "c2"}]}]
        art.record_completion(other, {"role": "assistant", "content": "x"})
    assert [m.get("content") for m in traj.turns] == ["q", "", "3", "3"]
    assert traj.turns[2] == {"role": "tool", "tool_call_id": "c1", "content": "3"}  # a copy, not the caller's dict
    assert art.message_sample(traj.turns[1]).token_ids == [5]
    assert len(traj.additional_histories) == 1


def test_a_request_joins_the_longest_history_it_extends_first_on_a_tie():
    u = {"role": "user", "content": "u"}
    with art.capture() as traj:
        art.record_completion([u], {"role": "assistant", "content": "a"})
        art.record_completion([{"role": "user", "content": "v"}], {"role": "assistant", "content": "b"})
        art.record_completion([{"role": "user", "content": "v"}], {"role": "assistant", "content": "b"})
        art.record_completion([u, {"role": "assistant", "content": "a"}], {"role": "assistant", "content": "c"})
        second = art.record_completion(
            [{"role": "user", "content": "v"}, {"role": "assistant", "content": "b"}], {"role": "assistant", "content": "d"}
        )
    assert [m["content"] for m in traj.turns] == ["u", "a", "c"]
    assert [[m["content"] for m in h.turns] for h in traj.additional_histories] == [["v", "b", "d"], ["v", "b"]]
    assert second is traj.additional_histories[0]


def test_sample_from_choice_needs_every_token_as_an_id():
    mixed = [{"token": "token_id:7", "logprob": -0.5}, {"token": "hi", "logprob": -0.25}]
    assert art.sample_from_choice({"logprobs": {"content": mixed}}) is None
    assert art.sample_from_choice({"logprobs": {"content": [{"token": None, "logprob": -1.0}]}}) is None
    ids = [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:123", "logprob": -0.25}]
    s = art.sample_from_choice({"logprobs": {"content": ids}, "art_step": 3}, model="m")
    assert (s.token_ids, s.logprobs, s.step, s.model) == ([7, 123], [-0.5, -0.25], 3, "m")
    for bad in ("token_id:7x", "token_id:\u00b2", "token_id:"):  # not a number ("²" passes str.isdigit)
        assert art.sample_from_choice({"logprobs": {"content": [{"token": bad, "logprob": -0.5}]}}) is None


def test_the_fast_path_stores_what_record_completion_stores():
    from art_core.capture import add_completion, sampled_tokens
    from art_core.trajectory import sample_dict

    ids = [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:9", "logprob": -0.25}]
    assert sampled_tokens({"logprobs": {"content": ids}}) == ([7, 9], [-0.5, -0.25])
    for fields in ({}, {"step": 2, "node": "n", "model": "m"}, {"step": 0}):
        for logprobs in (None, [-0.5, -0.25]):
            expected = art.Sample(token_ids=[7, 9], logprobs=logprobs, **fields).model_dump(exclude_none=True)
            assert sample_dict([7, 9], logprobs, **fields) == expected
            assert list(sample_dict([7, 9], logprobs, **fields)) == list(expected)  # same key order

    request = [{"role": "user", "content": "u"}]
    sample = art.Sample(token_ids=[7, 9], logprobs=[-0.5, -0.25], node="n")
    with art.capture() as slow:
        art.record_completion(request, {"role": "assistant", "content": "a"}, sample=sample)
        art.record_completion([*request, {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}],
                              {"role": "assistant", "content": "b"})
        art.record_completion([{"role": "user", "content": "w"}], {"role": "assistant", "content": "c"})
    fast = art.Trajectory()
    assert add_completion(fast, request, {"role": "assistant", "content": "a", "sample": sample_dict([7, 9], [-0.5, -0.25], node="n")}) is None
    add_completion(fast, [*request, {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}],
                   {"role": "assistant", "content": "b"})
    branch = add_completion(fast, [{"role": "user", "content": "w"}], {"role": "assistant", "content": "c"})
    assert branch is fast.additional_histories[0]
    assert fast.turns == slow.turns and fast.additional_histories == slow.additional_histories
