"""Rollouts as OpenTelemetry traces: read back from an in-memory exporter and from an OTLP/HTTP receiver."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import art_core as art
from art_core import tracing
from tests.support.scripted_openai import ScriptedOpenAI

from .conftest import Run


def _by_trace(spans: list) -> dict[int, list]:
    out: dict[int, list] = {}
    for s in spans:
        out.setdefault(s.context.trace_id, []).append(s)
    return out


def test_each_rollout_of_the_real_run_is_one_trace(run: Run) -> None:
    traces = _by_trace(run.spans)
    assert len(traces) == 2 * 8 + 4  # two steps of 2 groups x 4 rollouts, then 4 val rollouts
    saved = {t.id: t for split, step in [("train", 1), ("train", 2)]
             for g in art.RunDir("obs", "obs-run", run.home).read_trajectories(split, step) for t in g.trajectories}
    assert len(saved) == 16
    matched = 0
    for spans in traces.values():
        [root] = [s for s in spans if s.parent is None]
        assert root.name == "invoke_agent rollout"
        assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
        children = sorted((s for s in spans if s.parent is not None), key=lambda s: s.start_time)
        assert [s.name.split(" ")[0] for s in children] == ["chat", "execute_tool", "chat"]
        assert all(c.parent.span_id == root.context.span_id for c in children)
        assert all(root.start_time <= c.start_time <= c.end_time <= root.end_time for c in children)
        tool, sampled = children[1], children[2]
        assert tool.attributes["gen_ai.tool.name"] == "get_weather" and tool.attributes["gen_ai.tool.call.id"] == "call_1"
        assert sampled.attributes["gen_ai.request.model"] == "obs-run"
        assert sampled.attributes["gen_ai.usage.output_tokens"] > 0
        assert sampled.attributes["gen_ai.usage.input_tokens"] > 0
        assert sampled.attributes["art.trainable"] is True
        tid = root.attributes["art.trajectory.id"]
        if tid in saved:  # a training rollout: the root's reward is the one the trainer got
            traj, matched = saved[tid], matched + 1
            assert root.attributes["art.reward"] == pytest.approx(traj.reward)
            assert sampled.attributes["art.step"] == root.attributes["art.step"] == traj.turns[-1]["sample"]["step"]
            assert sampled.attributes["gen_ai.usage.output_tokens"] == len(traj.turns[-1]["sample"]["token_ids"])
    assert matched == 16
    assert {s.attributes["art.step"] for s in run.spans if s.parent is None} == {0, 1, 2}


class _Receiver:
    """An OTLP/HTTP trace receiver on loopback: decodes each protobuf export request."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.requests: list = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None: ...

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                received.append((self.path, self.headers.get("Content-Type"), req))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_traces_reach_an_otlp_http_collector() -> None:
    receiver = _Receiver()
    script = [{"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}]}, {"content": "done"}]
    try:
        with ScriptedOpenAI(script) as server:
            model = art.Model(name="judge", inference_base_url=server.url, inference_api_key="x")
            client = model.openai_client()

            async def rollout() -> art.Trajectory:
                with art.capture() as traj:
                    msgs = [{"role": "user", "content": "find x"}]
                    r = await client.chat.completions.create(model="gpt-x", messages=msgs, temperature=0.5)
                    call = r.choices[0].message.tool_calls[0]
                    art.record_tool_result(call.id, "x is 1", name=call.function.name)
                    msgs += [r.choices[0].message.model_dump(exclude_none=True),
                             {"role": "tool", "tool_call_id": call.id, "content": "x is 1"}]
                    await client.chat.completions.create(model="gpt-x", messages=msgs)
                traj.reward = 0.75
                traj.metrics["turns"] = 2
                return traj.finish()

            tracing.enable_tracing(endpoint=receiver.url)
            try:
                [traj] = await art.gather_trajectories([rollout()], show_progress=False)
            finally:
                tracing.disable_tracing()  # flushes the batch to the receiver
    finally:
        receiver.close()
    spans = [s for _, _, req in receiver.requests for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert {(p, ct) for p, ct, _ in receiver.requests} == {("/v1/traces", "application/x-protobuf")}
    service = {a.key: a.value.string_value for a in receiver.requests[0][2].resource_spans[0].resource.attributes}
    assert service["service.name"] == "art"

    def attrs(span) -> dict:
        return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}

    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == ["chat gpt-x", "execute_tool lookup", "invoke_agent rollout"]
    root = by_name["invoke_agent rollout"]
    assert attrs(root)["art.reward"] == 0.75 and attrs(root)["art.trajectory.id"] == traj.id
    assert attrs(root)["art.metric.turns"] == 2
    chats = [s for s in spans if s.name == "chat gpt-x"]
    assert len(chats) == 2 and all(s.parent_span_id == root.span_id and s.trace_id == root.trace_id for s in chats)
    first = attrs(min(chats, key=lambda s: s.start_time_unix_nano))
    assert first["gen_ai.request.model"] == "gpt-x" and first["gen_ai.response.model"] == "gpt-x"
    assert first["gen_ai.usage.input_tokens"] == 2 and first["gen_ai.request.temperature"] == 0.5
    assert list(first["gen_ai.response.finish_reasons"].values)[0].string_value == "tool_calls"
    assert attrs(by_name["execute_tool lookup"])["gen_ai.tool.call.id"] == "c1"


async def test_tracing_off_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    assert not tracing.tracing_enabled()
    with art.capture() as traj:
        art.record_completion([{"role": "user", "content": "hi"}], {"role": "assistant", "content": "yo"})
    exporter = InMemorySpanExporter()
    tracing.enable_tracing(exporter)
    try:
        tracing.trace_trajectory(traj)  # its events were never noted: a root span alone
        [root] = exporter.get_finished_spans()
        assert root.name == "invoke_agent rollout"
    finally:
        tracing.disable_tracing()


def test_art_tracing_env_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from art_core.loggers import MissingExtra

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    monkeypatch.setattr(tracing, "_env_checked", False)
    monkeypatch.setenv("ART_TRACING", "1")
    with pytest.raises(MissingExtra, match=r"pip install 'art-rl\[otel\]'"):
        tracing.tracing_enabled()



def test_a_langgraph_agent_is_traced_with_its_tool_node() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import art_graph
    from tests.graph.apps import tool_agent, tool_script
    from tests.graph.conftest import trainable

    exporter = InMemorySpanExporter()
    with ScriptedOpenAI(tool_script) as server:
        graph = tool_agent(art_graph.chat_model(trainable(server.url)))

        @art_graph.rollout
        async def run() -> float:
            state = await graph.ainvoke({"messages": [("user", "2+3")]})
            return 1.0 if "5" in state["messages"][-1].content else 0.0

        async def main() -> list[art.Trajectory]:
            return await art.gather_trajectories([run(), run()], show_progress=False)

        tracing.enable_tracing(exporter)
        try:
            import asyncio

            trajs = asyncio.run(main())
        finally:
            tracing.disable_tracing()
    traces = _by_trace(exporter.get_finished_spans())
    assert len(traces) == 2
    for spans in traces.values():
        [root] = [s for s in spans if s.parent is None]
        children = sorted((s for s in spans if s.parent is not None), key=lambda s: (s.start_time, s.end_time))
        # agent -> ToolNode(add) -> agent, the tool's span between the two calls
        assert [s.name for s in children] == ["chat agent", "execute_tool add", "chat agent"]
        assert children[0].end_time <= children[1].start_time and children[1].end_time <= children[2].end_time
        assert root.attributes["art.reward"] == 1.0
        assert {c.attributes.get("art.node") for c in children if c.name.startswith("chat")} == {"agent"}
        assert root.attributes["art.trajectory.id"] in {t.id for t in trajs}
