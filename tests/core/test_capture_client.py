"""Model.openai_client() records completions into the running trajectory, streamed or not."""

import asyncio

import art_core as art
from tests.support.scripted_openai import ScriptedOpenAI, fake_token_ids


def trainable(url: str) -> art.TrainableModel:
    return art.TrainableModel(name="agent", project="t", base_model="x", inference_base_url=url, inference_api_key="k")


async def test_client_records_turns_with_token_ids():
    with ScriptedOpenAI(lambda body: {"content": "four is the answer"}) as server:
        client = trainable(server.url).openai_client()
        with art.capture() as traj:
            messages = [{"role": "user", "content": "2+2?"}]
            r = await client.chat.completions.create(model="agent", messages=messages, logprobs=True)
            messages += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "sure?"}]
            await client.chat.completions.create(model="agent", messages=messages, logprobs=True)
    assert [m["role"] for m in traj.turns] == ["user", "assistant", "user", "assistant"]
    sample = art.message_sample(traj.turns[1])
    assert sample is not None and sample.token_ids == fake_token_ids("four is the answer")
    assert len(sample.logprobs) == len(sample.token_ids)
    assert traj.additional_histories == []


async def test_prompted_model_turns_are_context():
    with ScriptedOpenAI({"content": "hi"}) as server:
        model = art.Model(name="judge", inference_base_url=server.url, inference_api_key="k")
        with art.capture() as traj:
            await model.openai_client().chat.completions.create(
                model="judge", messages=[{"role": "user", "content": "x"}], logprobs=True
            )
    assert traj.turns[-1]["content"] == "hi"
    assert art.message_sample(traj.turns[-1]) is None


async def test_streamed_completion_is_captured():
    with ScriptedOpenAI({"content": "a b c"}) as server:
        client = trainable(server.url).openai_client()
        with art.capture() as traj:
            stream = await client.chat.completions.create(
                model="agent", messages=[{"role": "user", "content": "go"}], logprobs=True, stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "a b c"
    assert traj.turns[-1]["content"] == "a b c"
    assert art.message_sample(traj.turns[-1]).token_ids == fake_token_ids("a b c")


async def test_unrelated_call_becomes_additional_history():
    with ScriptedOpenAI({"content": "ok"}) as server:
        client = trainable(server.url).openai_client()
        with art.capture() as traj:
            await client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "main"}])
            await client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "side"}])
    assert traj.turns[0]["content"] == "main"
    assert len(traj.additional_histories) == 1
    assert traj.additional_histories[0].turns[0]["content"] == "side"


async def test_no_capture_outside_rollout():
    with ScriptedOpenAI({"content": "ok"}) as server:
        client = trainable(server.url).openai_client()
        r = await client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "x"}])
    assert r.choices[0].message.content == "ok"
    assert art.current_trajectory() is None


async def test_hundred_concurrent_rollouts_never_mix_turns():
    def reply(body):
        return {"content": "echo " + body["messages"][-1]["content"], "delay": 0.001}

    with ScriptedOpenAI(reply) as server:
        client = trainable(server.url).openai_client()

        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                messages = [{"role": "user", "content": f"task-{i}"}]
                for turn in range(3):
                    r = await client.chat.completions.create(model="agent", messages=messages)
                    await asyncio.sleep(0)
                    messages += [{"role": "assistant", "content": r.choices[0].message.content},
                                 {"role": "user", "content": f"task-{i}-more-{turn}"}]
            return traj

        trajs = await asyncio.gather(*(rollout(i) for i in range(100)))
    for i, traj in enumerate(trajs):
        assert traj.additional_histories == []
        contents = [m["content"] for m in traj.turns]
        assert contents[0] == f"task-{i}"
        assert all(f"task-{i}" in c for c in contents), contents
        assert len(contents) == 6


async def test_requests_inside_a_rollout_name_their_trajectory():
    import httpx

    from art_core.openai_capture import CapturingTransport

    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("x-art-trajectory"))
        return httpx.Response(404)

    async with httpx.AsyncClient(transport=CapturingTransport(httpx.MockTransport(answer))) as client:
        with art.capture() as traj:
            await client.post("http://x/v1/chat/completions", json={})
        await client.post("http://x/v1/chat/completions", json={})
    assert seen == [traj.id, None]  # ART's server routes a trajectory's turns to one replica by it
