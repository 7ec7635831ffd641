"""The LangChain callback handler that turns chat model calls into trajectory turns.

`on_chat_model_start` keeps the request (messages, tools, node) by run id; `on_llm_end` converts the
reply and hands both to art_core's `add_completion` (`record_completion` without validation: this
runs on every LLM call), which joins the history the request extends or starts an additional one.
Tool results are held until the rollout ends and added only where no later request already carried
them, so parallel tools finishing out of order never split a history.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import LLMResult

from art_core import Trajectory, current_trajectory, record_tool_result
from art_core.capture import add_completion, current_node
from art_core.samples import fetch_sample, logprobs_digest, registered_trainable, trainable_endpoint
from art_core.trajectory import SAMPLE_KEY, sample_dict, sampled_tokens

logger = logging.getLogger(__name__)

TRAINABLE_KEY = "art_trainable"  # chat model metadata set by `chat_model()`
MODEL_KEY = "art_model"
STEP_KEY = "art_step"  # the checkpoint step ART's server reports; `chat_model()` keeps it in generation_info
_CACHE_LIMIT = 20_000  # converted messages kept per handler
_dumps = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(x, ensure_ascii=False), one encoder

# The handler of the rollout running in this context; the configure hook attaches it to every run.
active_handler: contextvars.ContextVar[CaptureHandler | None] = contextvars.ContextVar(
    "art_graph_handler", default=None
)


@dataclass
class _Call:
    request: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    node: str | None
    trainable: bool
    model: str | None
    trajectory: Trajectory
    endpoint: tuple[str, str] | None = None  # (base URL, API key): an app's own chat model naming a trainable model


@dataclass
class CaptureStats:
    """Counts behind the capture report of one trajectory."""

    calls: int = 0
    failed_calls: int = 0
    trainable_turns: int = 0
    context_turns: int = 0
    turns_without_token_ids: int = 0
    recovered_turns: int = 0  # sampled ids asked back from ART's server (an app's own chat model)
    no_ids_reasons: Counter[str] = field(default_factory=Counter)
    other_models: Counter[str] = field(default_factory=Counter)  # models named by calls that train nothing
    outside_nodes: Counter[str] = field(default_factory=Counter)  # trainable model's calls left out by trainable_nodes
    tool_results: int = 0
    invalid_tool_calls: int = 0  # calls whose arguments LangChain could not parse (kept, raw)
    node_calls: Counter[str] = field(default_factory=Counter)
    node_trainable: Counter[str] = field(default_factory=Counter)
    node_tokens: Counter[str] = field(default_factory=Counter)
    node_tool_calls: Counter[str] = field(default_factory=Counter)


def to_openai(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        fast = _fast_openai(m)
        converted = [fast] if fast is not None else [_drop_none(d) for d in convert_to_openai_messages([m])]
        if isinstance(m, AIMessage) and m.invalid_tool_calls:
            converted = [_with_invalid_calls(converted[0], m), *converted[1:]]
        out += converted
    return out


def _with_invalid_calls(message: dict[str, Any], m: AIMessage) -> dict[str, Any]:
    """Keep the tool calls LangChain could not parse (``invalid_tool_calls``: arguments that are not
    JSON), with their raw arguments, after the valid ones: the model did make them, and both
    LangChain's converter and a parsed-calls-only view drop them."""
    calls = list(message.get("tool_calls") or [])
    for c in m.invalid_tool_calls:
        args = c.get("args")
        calls.append(
            {
                "type": "function",
                "id": c.get("id") or "",
                "function": {"name": c.get("name") or "", "arguments": args if isinstance(args, str) else ""},
            }
        )
    return {**message, "tool_calls": calls}


def _fast_openai(m: BaseMessage) -> dict[str, Any] | None:
    """`convert_to_openai_messages` for the common shapes (text content), 2-8x cheaper; None otherwise.

    Builds the same dict, key order included (tests/graph/test_convert.py checks it). Capture runs
    on every LLM call: see benchmarks/capture_overhead.py.
    """
    content = m.content
    if not isinstance(content, str):
        return None  # content blocks (images, files, reasoning): langchain's converter
    if isinstance(m, AIMessage):
        role = "assistant"
    elif isinstance(m, HumanMessage):
        role = "user"
    elif isinstance(m, ToolMessage):
        role = "tool"
    elif isinstance(m, SystemMessage) and "__openai_role__" not in m.additional_kwargs:
        role = "system"
    else:
        return None
    out: dict[str, Any] = {"role": role}
    if m.name:
        out["name"] = m.name
    if isinstance(m, AIMessage) and m.tool_calls:
        out["tool_calls"] = [
            {
                "type": "function",
                "id": c["id"],
                "function": {"name": c["name"], "arguments": _dumps(c["args"])},
            }
            for c in m.tool_calls
        ]
    if m.additional_kwargs.get("refusal"):
        out["refusal"] = m.additional_kwargs["refusal"]
    if isinstance(m, ToolMessage) and m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    out["content"] = content
    return out


def _drop_none(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if v is not None or k == "content"}


@functools.lru_cache(maxsize=4096)
def _path_from_namespace(namespace: str, node: str | None) -> str:
    parts = [segment.split(":", 1)[0] for segment in namespace.split("|")]
    parts = [p for p in parts if p]
    if node is not None and (not parts or parts[-1] != node):
        parts.append(node)
    return "/".join(parts)


def node_path(metadata: dict[str, Any]) -> str | None:
    """Where in the graph a call was made: the graph nodes from the root down, joined by ``/``.

    A node inside a subgraph (an agent of a supervisor or swarm graph) is named by its path, e.g.
    ``weather_agent/agent``; a top-level node keeps its plain name (``agent``). Read from the
    checkpoint namespace LangGraph puts in the callback metadata (``weather_agent:<id>|agent:<id>``).
    """
    node = metadata.get("langgraph_node")
    namespace = metadata.get("langgraph_checkpoint_ns") or metadata.get("checkpoint_ns")
    if isinstance(namespace, str) and namespace:
        return _path_from_namespace(namespace, node if isinstance(node, str) else None)
    return node if isinstance(node, str) else None


def node_matches(name: str, path: str) -> bool:
    """Whether `name` (a node, an agent, or a path such as ``weather_agent/agent``) names the call at
    `path`: its parts appear in the path's parts, in a row. ``agent`` matches every agent's inner
    node; ``weather_agent`` matches everything inside that agent."""
    if name == path:
        return True
    want, have = name.strip("/").split("/"), path.split("/")
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


@functools.lru_cache(maxsize=256)
def _step_from_model_name(name: str) -> int | None:
    match = re.fullmatch(r".+@(\d+)", name)
    return int(match.group(1)) if match else None


class CaptureHandler(BaseCallbackHandler):
    """Records every chat model call of a LangChain / LangGraph run into a trajectory.

    `art_graph.rollout` attaches one automatically. Pass one yourself in ``config["callbacks"]``
    to capture a run outside the decorator: it writes to ``trajectory`` if given, else to the
    trajectory of the surrounding `art_core.capture()` block.

    Example:
        with art_core.capture() as traj:
            graph.invoke(state, config={"callbacks": [CaptureHandler()]})
    """

    run_inline = True  # cheap and thread-safe: no executor hop per event
    raise_error = False  # capture must never break the user's graph
    # Events this handler has no use for are not dispatched to it at all (tool events come as "agent").
    ignore_chain = True
    ignore_retriever = True
    ignore_retry = True
    ignore_custom_event = True

    def __init__(
        self, trajectory: Trajectory | None = None, *, trainable_nodes: set[str] | None = None
    ) -> None:
        self.trajectory = trajectory
        self.trainable_nodes = set(trainable_nodes) if trainable_nodes is not None else None
        self.stats = CaptureStats()
        self._calls: dict[UUID, _Call] = {}
        self._tool_results: list[tuple[Trajectory, ToolMessage]] = []
        self._lock = threading.Lock()
        self._warned_no_ids = False
        # id(message) -> (message, its content, its OpenAI dict): a graph's state hands the same message objects
        # to every later call, so each is converted once. The message is kept so its id stays unique.
        self._converted: dict[int, tuple[BaseMessage, Any, dict[str, Any]]] = {}

    def _target(self) -> Trajectory | None:
        if self.trajectory is not None:
            return self.trajectory
        active = active_handler.get()
        if active is not None and active is not self:
            return None  # inside a rollout its own handler records; don't count the call twice
        return current_trajectory()

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        trajectory = self._target()
        if trajectory is None or not messages:
            return
        metadata = metadata or {}
        params = kwargs.get("invocation_params") or {}
        node = node_path(metadata)
        model = metadata.get(MODEL_KEY) or params.get("model") or params.get("model_name")
        trainable = bool(metadata.get(TRAINABLE_KEY))
        endpoint = None
        if not trainable and TRAINABLE_KEY not in metadata:  # the app's own chat model: is it the trainable one?
            base = (serialized or {}).get("kwargs", {}).get("openai_api_base") or os.environ.get("OPENAI_BASE_URL")
            key = trainable_endpoint(base, model)
            if key is not None and base is not None:  # a key implies a base URL
                trainable, endpoint = True, (base, key)
        if trainable and self.trainable_nodes is not None:
            trainable = node is not None and any(node_matches(n, node) for n in self.trainable_nodes)
            if not trainable:
                self.stats.outside_nodes[node or "-"] += 1
        elif not trainable:
            self.stats.other_models[str(model)] += 1
        call = _Call(self._to_openai(messages[0]), params.get("tools"), node, trainable, model, trajectory, endpoint)
        with self._lock:
            self._calls[run_id] = call

    def _to_openai(self, messages: list[BaseMessage]) -> list[dict[str, Any]]:
        # No lock: single dict reads and writes are atomic, and a lost entry only costs a conversion.
        out = []
        cache = self._converted
        for m in messages:
            hit = cache.get(id(m))
            if hit is None or hit[0] is not m or hit[1] is not m.content:  # new, or content reassigned
                if len(cache) >= _CACHE_LIMIT:  # a long-lived explicit handler: start over
                    cache.clear()
                hit = (m, m.content, to_openai([m])[0])
                cache[id(m)] = hit
            out.append(hit[2])
        return out

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._calls.pop(run_id, None)
        if call is None or not response.generations:
            return
        for index, generation in enumerate(response.generations[0]):  # n > 1: each its own history
            message = getattr(generation, "message", None)
            if message is None:
                continue
            reply = dict(self._to_openai([message])[0])  # cached: the graph's state will hand it back
            sample = self._sample(call, generation.generation_info or {}, response.llm_output or {}, index)
            if sample is not None:
                reply[SAMPLE_KEY] = sample
            with self._lock:
                add_completion(call.trajectory, call.request, reply, call.tools)
                self._count(call, reply, sample)
                invalid = len(getattr(message, "invalid_tool_calls", None) or [])
                if invalid:
                    self.stats.invalid_tool_calls += invalid
                    logger.info("captured %d tool call(s) with arguments that are not JSON (node %r)", invalid, call.node)

    def _sample(
        self, call: _Call, info: dict[str, Any], llm_output: dict[str, Any], index: int = 0
    ) -> dict[str, Any] | None:
        """The reply's sample in stored form (`sample_dict`), or None for context."""
        if not call.trainable:
            return None
        tokens = sampled_tokens({"logprobs": info.get("logprobs")})
        step = info.get(STEP_KEY)
        reason = "build the model with art_graph.chat_model(model) so logprobs and token ids are requested"
        if tokens is None and call.endpoint is not None:
            tokens, step, reason = self._recover(call, info, llm_output, index)
        if tokens is None:
            with self._lock:
                self.stats.no_ids_reasons[reason] += 1
            if not self._warned_no_ids:
                self._warned_no_ids = True
                logger.warning(
                    "a trainable model's reply (node %r) came back without token ids; it is kept as context: %s",
                    call.node, reason,
                )
            return None
        if type(step) is not int:
            step = _step_from_model_name(str(llm_output.get("model_name") or ""))
        node = call.node if call.node is not None else current_node()
        return sample_dict(tokens[0], tokens[1], step=step, node=node, model=call.model)

    def _recover(
        self, call: _Call, info: dict[str, Any], llm_output: dict[str, Any], index: int
    ) -> tuple[tuple[list[int], list[float] | None] | None, Any, str]:
        """Ask ART's server for the ids an app's own chat model dropped: by completion id (unstreamed
        replies) or by the digest of the logprobs LangChain kept (streamed ones)."""
        assert call.endpoint is not None
        content = (info.get("logprobs") or {}).get("content") or []
        digest = logprobs_digest([e["logprob"] for e in content]) if content else None
        completion_id = llm_output.get("id")
        if completion_id is None and digest is None:
            return None, None, "the reply carried neither a completion id nor logprobs to look its token ids up by"
        found = fetch_sample(*call.endpoint, completion_id=completion_id, index=index, digest=digest)
        if found is None:
            return None, None, (f"the server at {call.endpoint[0]} had no record of the completion (more than its "
                                "recent completions ago, or not ART's server)")
        with self._lock:
            self.stats.recovered_turns += 1
        return (found["token_ids"], found.get("logprobs")), found.get("step"), ""

    def untrainable_reason(self) -> str | None:
        """Why this rollout captured nothing trainable, or None when it did."""
        s = self.stats
        if s.trainable_turns:
            return None
        if not s.calls:
            return "no chat model call was captured (did the graph run inside the rollout?)"
        if s.no_ids_reasons:
            return f"{s.turns_without_token_ids} replies of the trainable model came back without token ids: " + (
                "; ".join(s.no_ids_reasons))
        if s.outside_nodes:
            return (f"trainable_nodes {sorted(self.trainable_nodes or ())} matched none of the nodes that called the "
                    f"trainable model ({sorted(s.outside_nodes)})")
        registered = ", ".join(registered_trainable()) or "none"
        return (f"no call went to a trainable model: the calls named {sorted(s.other_models)} (trainable models "
                f"registered in this process: {registered}); build the chat model with art_graph.chat_model(model), "
                "or leave the app unchanged and point it at model.inference_base_url with model=model.name")

    def _count(self, call: _Call, reply: dict[str, Any], sample: dict[str, Any] | None) -> None:
        s = self.stats
        s.calls += 1
        node = call.node or "-"
        s.node_calls[node] += 1
        s.node_tool_calls[node] += len(reply.get("tool_calls") or [])
        if sample is not None:
            s.trainable_turns += 1
            s.node_trainable[node] += 1
            s.node_tokens[node] += len(sample["token_ids"])
        else:
            s.context_turns += 1
            if call.trainable:
                s.turns_without_token_ids += 1

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            if self._calls.pop(run_id, None) is not None:
                self.stats.failed_calls += 1

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if not isinstance(output, ToolMessage):
            return
        trajectory = self._target()
        if trajectory is None:
            return
        with self._lock:  # converted in flush(), and only if no later request carried it
            self._tool_results.append((trajectory, output))
            self.stats.tool_results += 1

    def flush(self) -> None:
        """Add tool results that no later request carried (say, the run ended on a tool)."""
        with self._lock:
            pending, self._tool_results = self._tool_results, []
            seen: dict[int, set[str]] = {}
            for trajectory, output in pending:
                if id(trajectory) not in seen:
                    seen[id(trajectory)] = {
                        m.get("tool_call_id")
                        for turns in [trajectory.turns, *(h.turns for h in trajectory.additional_histories)]
                        for m in turns
                        if m.get("role") == "tool"
                    }
                if output.tool_call_id not in seen[id(trajectory)]:
                    message = to_openai([output])[0]
                    content = message.get("content")
                    record_tool_result(
                        message["tool_call_id"],
                        content if isinstance(content, str) else str(content),
                        name=message.get("name"),
                        trajectory=trajectory,
                    )

    def report(self, trajectory: Trajectory | None = None) -> dict[str, Any]:
        """The short capture report stored in ``trajectory.metadata["capture"]``."""
        s = self.stats
        trajectory = trajectory if trajectory is not None else self.trajectory
        histories = (
            [trajectory.turns, *(h.turns for h in trajectory.additional_histories)] if trajectory else []
        )
        return {
            "calls": s.calls,
            "histories": sum(1 for turns in histories if turns),
            "trainable_turns": s.trainable_turns,
            "context_turns": s.context_turns,
            "turns_without_token_ids": s.turns_without_token_ids,
            "recovered_turns": s.recovered_turns,
            "failed_calls": s.failed_calls,
            "tool_results": s.tool_results,
            "invalid_tool_calls": s.invalid_tool_calls,
            "nodes": dict(s.node_calls),
        }

    def node_metrics(self) -> dict[str, int]:
        """Per-node metrics (calls, trainable turns, sampled tokens, tool calls) and
        ``invalid_tool_calls`` (tool calls whose arguments were not JSON)."""
        s = self.stats
        out: dict[str, int] = {"invalid_tool_calls": s.invalid_tool_calls}
        for node, calls in s.node_calls.items():
            out[f"node/{node}/calls"] = calls
            out[f"node/{node}/trainable_turns"] = s.node_trainable[node]
            out[f"node/{node}/completion_tokens"] = s.node_tokens[node]
            out[f"node/{node}/tool_calls"] = s.node_tool_calls[node]
        return out
