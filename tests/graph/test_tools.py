"""Tool-calling graphs: bind_tools turns, tool results, prebuilt agents, context models, nodes."""

from __future__ import annotations

import json

from langgraph.prebuilt import create_react_agent

import art_core as art
import art_graph
from tests.graph.apps import add, async_tool_agent, mul, tool_agent, tool_script, two_node_app
from tests.graph.conftest import hosted, trainable
from tests.support.scripted_openai import ScriptedOpenAI, fake_token_ids


def _args_text(message: dict) -> str:
    return "".join(c["function"]["arguments"] for c in message.get("tool_calls") or [])


def check_tool_loop(traj: art.Trajectory, node: str = "agent") -> None:
    assert [m["role"] for m in traj.turns] == ["user", "assistant", "tool", "assistant"]
    call, result, answer = traj.turns[1], traj.turns[2], traj.turns[3]
    assert call["tool_calls"][0]["function"]["name"] == "add"
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"a": 2, "b": 3}
    assert result["tool_call_id"] == call["tool_calls"][0]["id"] and result["content"] == "5"
    assert answer["content"] == "the sum is 5"
    s1, s2 = art.message_sample(call), art.message_sample(answer)
    assert s1 is not None and s1.token_ids == fake_token_ids(_args_text(call))
    assert s2 is not None and s2.token_ids == fake_token_ids("the sum is 5")
    assert len(s2.logprobs) == len(s2.token_ids) and s1.node == s2.node == node
    assert [t["function"]["name"] for t in traj.tools] == ["add"]
    assert traj.additional_histories == []
    report = traj.metadata["capture"]
    assert report["calls"] == 2 and report["histories"] == 1 and report["trainable_turns"] == 2
    assert report["turns_without_token_ids"] == 0 and report["tool_results"] == 1


def test_sync_graph_with_bind_tools():
    with ScriptedOpenAI(tool_script) as server:
        graph = tool_agent(art_graph.chat_model(trainable(server.url)))

        @art_graph.rollout
        def run(question: str) -> float:
            state = graph.invoke({"messages": [("user", question)]})
            return 1.0 if "5" in state["messages"][-1].content else 0.0

        traj = run("what is 2+3?")
    assert traj.reward == 1.0 and traj.end_time is not None
    check_tool_loop(traj)
    assert server.requests[0]["logprobs"] is True and server.requests[0]["return_tokens_as_token_ids"] is True
    assert traj.metrics["node/agent/calls"] == 2 and traj.metrics["node/agent/tool_calls"] == 1


async def test_async_graph_with_bind_tools():
    with ScriptedOpenAI(tool_script) as server:
        graph = async_tool_agent(art_graph.chat_model(trainable(server.url)))

        @art_graph.rollout
        async def run(question: str) -> float:
            await graph.ainvoke({"messages": [("user", question)]})
            return 0.5

        traj = await run("what is 2+3?")
    assert traj.reward == 0.5
    check_tool_loop(traj)


def test_run_that_ends_on_a_tool_keeps_the_tool_result():
    with ScriptedOpenAI({"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}) as server:
        llm = art_graph.chat_model(trainable(server.url)).bind_tools([add])
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode

        g = StateGraph(MessagesState)
        g.add_node("agent", lambda s: {"messages": [llm.invoke(s["messages"])]})
        g.add_node("tools", ToolNode([add]))
        g.add_edge(START, "agent")
        g.add_edge("agent", "tools")
        graph = g.compile()

        with art_graph.capturing() as traj:
            graph.invoke({"messages": [("user", "add")]})
    assert [m["role"] for m in traj.turns] == ["user", "assistant", "tool"]
    assert traj.turns[2]["content"] == "5"


def test_parallel_tool_calls_stay_in_one_history():
    def script(body: dict) -> dict:
        if body["messages"][-1]["role"] == "tool":
            return {"content": "done"}
        return {
            "tool_calls": [
                {"name": "mul", "arguments": {"a": 6, "b": 7}},
                {"name": "add", "arguments": {"a": 1, "b": 1}},
            ]
        }

    with ScriptedOpenAI(script) as server:
        graph = tool_agent(art_graph.chat_model(trainable(server.url)), tools=[add, mul])
        with art_graph.capturing() as traj:
            graph.invoke({"messages": [("user", "go")]})
    assert [m["role"] for m in traj.turns] == ["user", "assistant", "tool", "tool", "assistant"]
    assert sorted(m["content"] for m in traj.turns[2:4]) == ["2", "42"]
    assert traj.additional_histories == []


def test_prebuilt_react_agent_from_langgraph():
    with ScriptedOpenAI(tool_script) as server:
        agent = create_react_agent(art_graph.chat_model(trainable(server.url)), [add], prompt="You add.")

        @art_graph.rollout
        def run() -> float:
            agent.invoke({"messages": [("user", "what is 2+3?")]})
            return 1.0

        traj = run()
    assert traj.turns[0] == {"role": "system", "content": "You add."}
    traj.turns = traj.turns[1:]
    check_tool_loop(traj)


async def test_prebuilt_agent_from_langchain_create_agent():
    from langchain.agents import create_agent

    with ScriptedOpenAI(tool_script) as server:
        agent = create_agent(
            art_graph.chat_model(trainable(server.url)), tools=[add], system_prompt="You add."
        )

        @art_graph.rollout
        async def run() -> float:
            await agent.ainvoke({"messages": [{"role": "user", "content": "what is 2+3?"}]})
            return 1.0

        traj = await run()
    assert traj.turns[0] == {"role": "system", "content": "You add."}
    node = art.message_sample(traj.turns[2]).node
    assert node == "model"  # create_agent names its LLM node "model"
    traj.turns = traj.turns[1:]
    check_tool_loop(traj, node="model")


def test_hosted_model_turns_are_context_and_not_asked_for_token_ids():
    with ScriptedOpenAI(lambda body: {"content": f"reply from {body['model']}"}) as server:
        graph = two_node_app(
            art_graph.chat_model(hosted(server.url, "planner")),
            art_graph.chat_model(trainable(server.url, "writer")),
        )
        with art_graph.capturing() as traj:
            graph.invoke({"messages": [("user", "write a haiku")]})
    plan_req, write_req = server.requests
    assert "logprobs" not in plan_req and "return_tokens_as_token_ids" not in plan_req
    assert write_req["logprobs"] is True
    histories = traj.histories()
    assert [h.turns[-1]["content"] for h in histories] == ["reply from planner", "reply from writer"]
    assert art.message_sample(histories[0].turns[-1]) is None
    sample = art.message_sample(histories[1].turns[-1])
    assert sample.node == "writer" and sample.model == "writer"
    report = traj.metadata["capture"]
    assert report["histories"] == 2 and report["context_turns"] == 1 and report["trainable_turns"] == 1
    assert report["nodes"] == {"planner": 1, "writer": 1}


def test_trainable_nodes_keep_other_nodes_as_context():
    with ScriptedOpenAI({"content": "ok then"}) as server:
        llm = art_graph.chat_model(trainable(server.url))
        graph = two_node_app(llm, llm)

        @art_graph.rollout(trainable_nodes={"writer"})
        def run() -> float:
            graph.invoke({"messages": [("user", "task")]})
            return 1.0

        traj = run()
    planner_turn, writer_turn = (h.turns[-1] for h in traj.histories())
    assert art.message_sample(planner_turn) is None
    assert art.message_sample(writer_turn).node == "writer"
    assert traj.metadata["trainable_nodes"] == ["writer"]
    assert traj.metadata["capture"]["turns_without_token_ids"] == 0  # dropped on purpose, not missing
    assert (
        traj.metrics["node/planner/trainable_turns"] == 0 and traj.metrics["node/writer/trainable_turns"] == 1
    )


def test_plain_chat_openai_on_the_trainable_endpoint_is_context():
    from langchain_openai import ChatOpenAI

    with ScriptedOpenAI({"content": "hi"}) as server:
        llm = ChatOpenAI(model="agent", base_url=server.url, api_key="k")
        with art_graph.capturing() as traj:
            llm.invoke("hello")
    assert traj.turns[-1]["content"] == "hi" and art.message_sample(traj.turns[-1]) is None


def test_trainable_reply_without_logprobs_is_reported(caplog):
    reply = {
        "raw": {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "agent",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "no ids"}, "finish_reason": "stop"}
            ],
        }
    }
    with ScriptedOpenAI(reply) as server:
        llm = art_graph.chat_model(trainable(server.url))
        with art_graph.capturing() as traj:
            llm.invoke("hello")
    assert art.message_sample(traj.turns[-1]) is None
    assert traj.metadata["capture"]["turns_without_token_ids"] == 1
    assert "without token ids" in caplog.text


def test_handler_passed_explicitly_in_config():
    with ScriptedOpenAI(tool_script) as server:
        graph = tool_agent(art_graph.chat_model(trainable(server.url)))
        handler = art_graph.CaptureHandler()
        with art.capture() as traj:
            graph.invoke({"messages": [("user", "what is 2+3?")]}, config={"callbacks": [handler]})
        handler.flush()
        assert handler.report(traj) | {"nodes": None} == {
            "calls": 2,
            "histories": 1,
            "trainable_turns": 2,
            "context_turns": 0,
            "turns_without_token_ids": 0,
            "recovered_turns": 0,
            "failed_calls": 0,
            "tool_results": 1,
            "invalid_tool_calls": 0,
            "nodes": None,
        }
        # inside a rollout an explicit handler defers to the rollout's own: nothing is counted twice
        with art_graph.capturing() as traj2:
            graph.invoke(
                {"messages": [("user", "what is 2+3?")]}, config={"callbacks": [art_graph.CaptureHandler()]}
            )
    assert [m["role"] for m in traj.turns] == ["user", "assistant", "tool", "assistant"]
    assert [m["role"] for m in traj2.turns] == ["user", "assistant", "tool", "assistant"]
    assert traj2.metadata["capture"]["calls"] == 2


def test_no_capture_outside_a_rollout():
    with ScriptedOpenAI(tool_script) as server:
        graph = tool_agent(art_graph.chat_model(trainable(server.url)))
        state = graph.invoke({"messages": [("user", "what is 2+3?")]})
    assert state["messages"][-1].content == "the sum is 5"
    assert art.current_trajectory() is None


def test_n_choices_each_become_a_history():
    reply = {
        "raw": {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "agent",
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": f"option {i}"},
                    "finish_reason": "stop",
                    "logprobs": {
                        "content": [
                            {
                                "token": f"token_id:{10 + i}",
                                "logprob": -0.5,
                                "bytes": None,
                                "top_logprobs": [],
                            }
                        ]
                    },
                }
                for i in range(2)
            ],
        }
    }
    with ScriptedOpenAI(reply) as server:
        llm = art_graph.chat_model(trainable(server.url), n=2)
        with art_graph.capturing() as traj:
            llm.invoke("pick")
    assert [h.turns[-1]["content"] for h in traj.histories()] == ["option 0", "option 1"]
    assert [art.message_sample(h.turns[-1]).token_ids for h in traj.histories()] == [[10], [11]]


def test_tool_call_with_arguments_that_are_not_json_is_kept():
    # LangChain files such a call under invalid_tool_calls; it used to vanish (content '', no call, no metric)
    reply = {"tool_calls": [{"id": "call_bad", "name": "add", "arguments": '{"a": 2, "b": '}]}
    with ScriptedOpenAI(reply) as server:
        llm = art_graph.chat_model(trainable(server.url)).bind_tools([add])
        with art_graph.capturing() as traj:
            message = llm.invoke("2+3?")
    assert message.invalid_tool_calls and not message.tool_calls
    turn = traj.turns[-1]
    assert turn["tool_calls"] == [
        {"type": "function", "id": "call_bad", "function": {"name": "add", "arguments": '{"a": 2, "b": '}}
    ]
    assert art.message_sample(turn) is not None  # the sampled tokens still train
    assert traj.metadata["capture"]["invalid_tool_calls"] == 1 and traj.metrics["invalid_tool_calls"] == 1
