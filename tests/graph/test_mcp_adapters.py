"""langchain-mcp-adapters beside ART (issue 14): it needs mcp 1.x, so this runs in .venv-mcp1
(scripts/setup_mcp1.sh; CI runs tests/mcp and tests/graph there too).

A LangGraph agent whose tools come from an MCP server through the adapters, captured by art_graph.
"""

from __future__ import annotations

import warnings

import pytest

import art_core as art
import art_graph
from tests.graph.conftest import trainable
from tests.support.scripted_openai import ScriptedOpenAI

adapters = pytest.importorskip("langchain_mcp_adapters.client", reason="langchain-mcp-adapters needs mcp 1.x (.venv-mcp1)")
warnings.filterwarnings("ignore", message=".*create_react_agent.*")


def script(body: dict) -> dict:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return {"content": f"saved: {last['content'][:40]}"}
    return {"tool_calls": [{"name": "add_note", "arguments": {"title": "groceries", "body": "eggs"}}]}


async def test_tools_loaded_through_langchain_mcp_adapters_are_captured():
    from langgraph.prebuilt import create_react_agent

    import art_mcp

    notes = art_mcp.bundled_server("notes")
    client = adapters.MultiServerMCPClient(
        {"notes": {"command": notes.command, "args": list(notes.args), "transport": "stdio"}}
    )
    tools = await client.get_tools()
    assert "add_note" in {t.name for t in tools}
    with ScriptedOpenAI(script) as server:
        agent = create_react_agent(art_graph.chat_model(trainable(server.url)), tools)

        @art_graph.rollout
        async def run(task: str) -> float:
            state = await agent.ainvoke({"messages": [("user", task)]})
            return 1.0 if "saved" in state["messages"][-1].content else 0.0

        traj = await run("note that I need eggs")
    assert traj.reward == 1.0
    roles = [m["role"] for m in traj.turns]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert traj.turns[1]["tool_calls"][0]["function"]["name"] == "add_note"
    assert "groceries" in traj.turns[2]["content"]  # the MCP server's answer, through the adapter
    assert all(art.message_sample(m) is not None for m in traj.turns if m["role"] == "assistant")
