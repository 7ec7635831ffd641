"""ART for LangGraph: train an existing graph by changing its chat model and adding one decorator.

Example:
    llm = art_graph.chat_model(model)            # the one changed line

    @art_graph.rollout
    async def run(task: str) -> float:
        state = await graph.ainvoke({"messages": [("user", task)]})
        return score(state)

    trajectory = await run("...")                # every LLM call of the run, with token ids
"""

from .chat import chat_model
from .handler import CaptureHandler
from .nodes import keep_nodes, node_groups
from .port import init_chat_model, wrap_rollout
from .rollout import capturing, rollout, set_node_rewards

__all__ = [
    "CaptureHandler",
    "capturing",
    "chat_model",
    "init_chat_model",
    "keep_nodes",
    "node_groups",
    "rollout",
    "set_node_rewards",
    "wrap_rollout",
]
