"""A scripted teacher for the app in `app.py`: a LangChain chat model that solves its word problems.

It stands where a strong hosted model would (``ChatOpenAI(model="gpt-4.1")``): the app is built
with it and run under `art_graph.capturing`, so the teacher's turns are recorded through the real
graph (same prompts, same tool schemas, same node split) and become SFT data for the small model.
The researcher calls ``multiply(rows, per_row)``, then ``add(product, extra)``, then states the
sum; the writer answers "The answer is N."
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

_QUESTION = re.compile(r"(\d+) rows of (\d+) apples, and (\d+) more")


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


class ScriptedTeacher(BaseChatModel):
    """Answers the researcher with the right tool calls and the writer with the right sentence."""

    @property
    def _llm_type(self) -> str:
        return "scripted-teacher"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        # the schemas go into the call's parameters, where the capture handler reads them
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        question = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
        found = _QUESTION.search(question)
        if found is None:
            raise ValueError(f"the teacher only knows the app's apple problems, not {question[:60]!r}")
        rows, per_row, extra = (int(g) for g in found.groups())
        if isinstance(messages[0], SystemMessage) and "final answer" in str(messages[0].content).lower():
            return AIMessage(content=f"The answer is {rows * per_row + extra}.")  # the writer
        results = [_number(float(str(m.content))) for m in messages if isinstance(m, ToolMessage)]
        calls = len(results)
        if calls == 0:
            return _call("multiply", {"a": rows, "b": per_row}, calls)
        if calls == 1:
            return _call("add", {"a": results[0], "b": extra}, calls)
        return AIMessage(content=f"{rows} x {per_row} = {results[0]}, plus {extra} makes {results[1]}.")


def _call(name: str, args: dict[str, Any], index: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{index}", "type": "tool_call"}])
