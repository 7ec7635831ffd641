"""An existing LangGraph app: a researcher that uses calculator tools, then a writer that answers.

Nothing in this file knows about ART. The only thing `train.py` changes is which chat model the app
is built with (`build_app(llm)`): in production it was `ChatOpenAI(model="gpt-4.1-mini")`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

RESEARCH_PROMPT = "You solve arithmetic word problems. Use the add and multiply tools for every step."
WRITER_PROMPT = (
    "Write the final answer as one short sentence that ends with the number, like: The answer is 12."
)


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


TOOLS = [add, multiply]


def build_app(llm: BaseChatModel, *, max_tool_rounds: int = 3) -> Any:
    """researcher <-> tools, then writer. Two LLM nodes, one tool node."""
    researcher_llm = llm.bind_tools(TOOLS)

    async def researcher(state: MessagesState) -> dict:
        rounds = sum(1 for m in state["messages"] if m.type == "tool")
        model = researcher_llm if rounds < max_tool_rounds else llm  # stop offering tools after a few rounds
        reply = await model.ainvoke([SystemMessage(RESEARCH_PROMPT), *state["messages"]])
        return {"messages": [reply]}

    async def writer(state: MessagesState) -> dict:
        question = state["messages"][0].content
        notes = "\n".join(str(m.content) for m in state["messages"][1:] if m.content)
        reply = await llm.ainvoke(
            [SystemMessage(WRITER_PROMPT), ("user", f"Question: {question}\nNotes:\n{notes}\nFinal answer:")]
        )
        return {"messages": [reply]}

    graph = StateGraph(MessagesState)
    graph.add_node("researcher", researcher)
    graph.add_node("tools", ToolNode(TOOLS))
    graph.add_node("writer", writer)
    graph.add_edge(START, "researcher")
    graph.add_conditional_edges("researcher", tools_condition, {"tools": "tools", END: "writer"})
    graph.add_edge("tools", "researcher")
    graph.add_edge("writer", END)
    return graph.compile()
