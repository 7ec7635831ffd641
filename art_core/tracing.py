"""OpenTelemetry traces of rollouts, following the GenAI semantic conventions.

One trace per rollout: a root span ``invoke_agent <agent>`` (trajectory id, reward, checkpoint
step and the trajectory's numeric metrics), a child ``chat <model>`` span per LLM call (model,
input/output tokens, finish reasons, step) and an ``execute_tool <name>`` span per tool result.

While a rollout runs, the capture hooks only note each event's time; the spans are made when the
rollout is done and its reward is known (`gather_trajectory_groups` calls `trace_trajectory` after
`after_each`, so a RULER score is on the root). A call made through `Model.openai_client()` has
its exact start time; other calls (LangChain handlers) start where the previous event ended.

Off unless enabled: `enable_tracing()` in code, or ``ART_TRACING=1`` in the environment, which
exports over OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (Langfuse, Phoenix and Jaeger accept it).
Needs the ``otel`` extra: ``pip install 'art-rl[otel]'``.
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .trajectory import Message, Tool, Trajectory

__all__ = ["disable_tracing", "enable_tracing", "trace_trajectory", "tracing_enabled"]

logger = logging.getLogger(__name__)

MAX_PENDING = 10_000  # rollouts whose events wait for trace_trajectory; the oldest are dropped past it


@dataclass
class _Event:
    kind: str  # "chat" | "tool"
    start_ns: int | None
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


class _Events(list[Any]):  # one rollout's events, plus the tool call ids already among them
    def __init__(self) -> None:
        super().__init__()
        self.tool_ids: set[str] = set()
        self.chats = 0


class _State:
    def __init__(self, provider: Any, tracer: Any, owned: bool) -> None:
        self.provider, self.tracer, self.owned = provider, tracer, owned
        self.pending: OrderedDict[str, _Events] = OrderedDict()


_state: _State | None = None
_env_checked = False
_call: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("art_trace_call", default=None)


def _need_otel() -> None:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        from .loggers import MissingExtra

        raise MissingExtra(
            "tracing needs opentelemetry-sdk and the OTLP exporter: pip install 'art-rl[otel]' "
            "(or unset ART_TRACING)"
        ) from exc


def enable_tracing(
    exporter: Any = None,
    *,
    endpoint: str | None = None,
    provider: Any = None,
    service_name: str = "art",
    batch: bool | None = None,
) -> Any:
    """Start tracing rollouts; returns the `TracerProvider` used.

    Args:
        exporter: a span exporter (e.g. ``InMemorySpanExporter``); default OTLP over HTTP.
        endpoint: the collector's OTLP/HTTP root, e.g. ``http://127.0.0.1:4318`` (default
            ``OTEL_EXPORTER_OTLP_ENDPOINT``, else the exporter's own default).
        provider: an existing `TracerProvider` to add spans to (then `exporter` is ignored and
            `disable_tracing` leaves it running).
        batch: batch spans before export (default: yes for OTLP, no for an exporter you pass).

    Example:
        enable_tracing(endpoint="http://127.0.0.1:4318")   # Jaeger, Phoenix, Langfuse...
        groups = await art.gather_trajectory_groups(...)   # one trace per rollout
        disable_tracing()                                   # flush
    """
    global _state
    _need_otel()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    disable_tracing()
    owned = provider is None
    if provider is None:
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            url = None
            if endpoint:
                url = endpoint.rstrip("/") if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
            exporter = OTLPSpanExporter(endpoint=url)
            batch = True if batch is None else batch
        provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    _state = _State(provider, provider.get_tracer("art_core.tracing"), owned)
    return provider


def disable_tracing() -> None:
    """Flush and stop tracing (a provider you passed in is flushed, not shut down)."""
    global _state
    state, _state = _state, None
    if state is None:
        return
    state.provider.force_flush()
    if state.owned:
        state.provider.shutdown()


def tracing_enabled() -> bool:
    return _active() is not None


def _active() -> _State | None:
    global _env_checked
    if _state is None and not _env_checked:
        _env_checked = True
        if os.environ.get("ART_TRACING", "").lower() in ("1", "true", "otlp", "yes"):
            enable_tracing()
    return _state


# -- hooks called by art_core's capture (cheap no-ops while tracing is off) -----------------------
def call_started() -> None:
    """The transport is about to send a chat completion (its start time)."""
    if _active() is not None:
        _call.set({"start_ns": time.time_ns()})


def note_response(body: dict[str, Any], data: dict[str, Any]) -> None:
    """The transport got a chat completion response: keep what the span reports."""
    if _active() is None:
        return
    call = dict(_call.get() or {})
    usage = data.get("usage") or {}
    call.update(model=body.get("model"), response_model=data.get("model"), response_id=data.get("id"),
                input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens"),
                finish=[c.get("finish_reason") for c in data.get("choices") or [] if c.get("finish_reason")],
                temperature=body.get("temperature"), max_tokens=body.get("max_tokens") or body.get("max_completion_tokens"))
    _call.set(call)


def _pending(state: _State, traj: Trajectory) -> _Events:
    events = state.pending.get(traj.id)
    if events is None:
        events = state.pending[traj.id] = _Events()
        if len(state.pending) > MAX_PENDING:
            dropped, _ = state.pending.popitem(last=False)
            logger.warning("tracing: rollout %s was never traced (trace_trajectory not called); dropped", dropped)
    return events


def on_completion(traj: Trajectory, request: list[Message], reply: Message, tools: list[Tool] | None) -> None:
    state = _active()
    if state is None:
        return
    call = _call.get() or {}
    _call.set(None)
    events = _pending(state, traj)
    _tools_from_request(events, request, call.get("start_ns") or time.time_ns())
    sample = reply.get("sample") or {}
    model = call.get("model") or sample.get("model") or "unknown"
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",  # the API flavour: every call goes to an OpenAI-compatible endpoint
        "gen_ai.request.model": model,
        "art.request.messages": len(request),
    }
    out_tokens = len(sample["token_ids"]) if "token_ids" in sample else call.get("output_tokens")
    optional = {
        "gen_ai.response.model": call.get("response_model"),
        "gen_ai.response.id": call.get("response_id"),
        "gen_ai.usage.input_tokens": call.get("input_tokens"),
        "gen_ai.usage.output_tokens": out_tokens,
        "gen_ai.response.finish_reasons": call.get("finish") or None,
        "gen_ai.request.temperature": call.get("temperature"),
        "gen_ai.request.max_tokens": call.get("max_tokens"),
        "art.step": sample.get("step"),
        "art.node": sample.get("node"),
        "art.trainable": "token_ids" in sample,
        "art.tool_calls": len(reply.get("tool_calls") or []) or None,
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    if tools:
        attrs["art.tools"] = len(tools)
    events.append(_Event("chat", call.get("start_ns"), time.time_ns(), attrs))
    events.chats += 1


def _tools_from_request(events: _Events, request: list[Message], before_ns: int) -> None:
    """Tool results that reach the model only inside a request (a LangGraph ToolNode, a plain
    OpenAI loop) get a span too: from the previous event's end to this call's start."""
    if not events.chats:  # tool results before the first call are context
        return
    new = [m for m in request if m.get("role") == "tool" and m.get("tool_call_id") not in events.tool_ids]
    if not new:
        return
    names: dict[Any, Any] = {}
    for m in request:
        for c in m.get("tool_calls") or []:
            names[c.get("id")] = (c.get("function") or {}).get("name")
    for m in new:
        cid = m.get("tool_call_id")
        if cid and cid not in events.tool_ids:
            events.tool_ids.add(cid)
            name = m.get("name") or names.get(cid) or "unknown"
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": cid,
                     "gen_ai.tool.name": name, "gen_ai.tool.type": "function"}
            events.append(_Event("tool", None, before_ns, attrs))


def on_tool_result(traj: Trajectory, tool_call_id: str, name: str | None) -> None:
    state = _active()
    if state is None:
        return
    events = _pending(state, traj)
    if tool_call_id in events.tool_ids:
        return
    events.tool_ids.add(tool_call_id)
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": tool_call_id,
             "gen_ai.tool.name": name or "unknown", "gen_ai.tool.type": "function"}
    events.append(_Event("tool", None, time.time_ns(), attrs))


def trace_trajectory(traj: Trajectory, *, agent: str | None = None, split: str | None = None) -> None:
    """Export the finished rollout `traj` as one trace (gather does this for you).

    Example:
        with art.capture() as traj:
            ...
        traj.reward = 1.0
        trace_trajectory(traj)
    """
    state = _active()
    if state is None:
        return
    from opentelemetry import trace

    events: list[Any] = state.pending.pop(traj.id, [])
    start = int(traj.start_time * 1e9)
    end = int(traj.end_time * 1e9) if traj.end_time else max([e.end_ns for e in events] + [time.time_ns()])
    name = agent or str(traj.metadata.get("agent", "rollout"))
    steps = [s.step for _, s in traj.samples() if s.step is not None]
    root_attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.conversation.id": traj.id,
        "art.trajectory.id": traj.id,
        "art.reward": float(traj.reward),
        "art.messages": len(traj.turns),
        "art.additional_histories": len(traj.additional_histories),
    }
    if steps:
        root_attrs["art.step"] = max(steps)
    if split:
        root_attrs["art.split"] = split
    for key, value in traj.metrics.items():
        if isinstance(value, (int, float)):
            root_attrs[f"art.metric.{key}"] = value
    root = state.tracer.start_span(f"invoke_agent {name}", start_time=start, attributes=root_attrs,
                                   kind=trace.SpanKind.INTERNAL)
    ctx = trace.set_span_in_context(root)
    prev = start
    for e in events:
        begin = e.start_ns if e.start_ns is not None else prev
        label = e.attributes.get("gen_ai.request.model") if e.kind == "chat" else e.attributes.get("gen_ai.tool.name")
        op = "chat" if e.kind == "chat" else "execute_tool"
        kind = trace.SpanKind.CLIENT if e.kind == "chat" else trace.SpanKind.INTERNAL
        span = state.tracer.start_span(f"{op} {label}", context=ctx, start_time=min(begin, e.end_ns),
                                       attributes=e.attributes, kind=kind)
        span.end(end_time=e.end_ns)
        prev = e.end_ns
    root.end(end_time=max(end, prev))
