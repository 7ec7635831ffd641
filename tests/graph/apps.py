"""Small LangGraph apps written the way users write them (no ART code inside)."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def tool_script(body: dict[str, Any]) -> dict[str, Any]:
    """Ask for add(2, 3) once, then answer with the tool's result."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return {"content": f"the sum is {last['content']}"}
    return {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}


def tool_agent(llm: BaseChatModel, tools: list | None = None) -> Any:
    """agent <-> tools loop, sync node functions."""
    tools = tools or [add]
    bound = llm.bind_tools(tools)

    def agent(state: MessagesState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile()


def async_tool_agent(llm: BaseChatModel, tools: list | None = None) -> Any:
    """The same loop with async nodes."""
    tools = tools or [add]
    bound = llm.bind_tools(tools)

    async def agent(state: MessagesState) -> dict:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile()


def two_node_app(planner: BaseChatModel, writer: BaseChatModel) -> Any:
    """planner (own prompt) -> writer (own prompt): two LLM nodes, two conversations."""

    def plan(state: MessagesState) -> dict:
        task = state["messages"][0].content
        reply = planner.invoke([("system", "You plan."), ("user", task)])
        return {"messages": [reply]}

    def write(state: MessagesState) -> dict:
        task, plan_msg = state["messages"][0].content, state["messages"][-1].content
        reply = writer.invoke([("system", "You write."), ("user", f"{task}\nPlan: {plan_msg}")])
        return {"messages": [reply]}

    g = StateGraph(MessagesState)
    g.add_node("planner", plan)
    g.add_node("writer", write)
    g.add_edge(START, "planner")
    g.add_edge("planner", "writer")
    g.add_edge("writer", END)
    return g.compile()
