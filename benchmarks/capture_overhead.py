"""What capturing a LangGraph run with art_graph costs, per LLM call and in wall time.

The same graph (an agent that calls a tool three times, then answers: 4 LLM calls a run) runs
against the same local OpenAI-compatible server, in alternating batches, with and without
`@art_graph.rollout`. The server runs in its own process so it does not share our GIL.

Reported (medians of per-run wall times, measured in the same run):
    overhead_us_per_call = (median_with - median_without) / calls_per_run
    overhead_ratio       = median_with / median_without
and, as a steadier second view, the time spent inside the capture handler per call.

Run: .venv/bin/python benchmarks/capture_overhead.py [--runs 400]
Targets (issue 6): overhead_us_per_call <= 300, overhead_ratio <= 1.03.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

import art_core as art  # noqa: E402
import art_graph  # noqa: E402
from art_graph.handler import CaptureHandler  # noqa: E402

TOOL_ROUNDS = 3
CALLS_PER_RUN = TOOL_ROUNDS + 1

# A fast server (uvicorn) in its own process; replies are built by the tests' scripted server code.
SERVER = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.support.scripted_openai import completion

async def chat(request):
    body = await request.json()
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done >= {TOOL_ROUNDS}:
        reply = {{"content": "the total is " + body["messages"][-1]["content"] + " and that is final"}}
    else:
        reply = {{"tool_calls": [{{"name": "add", "arguments": {{"a": done, "b": 10}}}}]}}
    return JSONResponse(completion(body, reply, "agent"))

app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
config = uvicorn.Config(app, host="127.0.0.1", port={{port}}, log_level="warning", access_log=False)
uvicorn.Server(config).run()
"""


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def build_graph(url: str) -> Any:
    model = art.TrainableModel(name="agent", base_model="x", inference_base_url=url, inference_api_key="k")
    llm = art_graph.chat_model(model).bind_tools([add])

    async def agent(state: MessagesState) -> dict:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([add]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the benchmark server did not start on port {port}")


class TimedHandler(CaptureHandler):
    """Adds up the seconds spent in the handler's own work (benchmark only)."""

    spent = 0.0

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        super().on_chat_model_start(*args, **kwargs)
        TimedHandler.spent += time.perf_counter() - t0

    def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        super().on_llm_end(*args, **kwargs)
        TimedHandler.spent += time.perf_counter() - t0


async def main(runs: int, batch: int) -> dict[str, Any]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER.replace("{port}", str(port))])
    try:
        url = f"http://127.0.0.1:{port}/v1"
        wait_ready(port)
        graph = build_graph(url)

        async def plain(i: int) -> None:
            await graph.ainvoke({"messages": [("user", f"task {i}")]})

        @art_graph.rollout
        async def captured(i: int) -> float:
            await graph.ainvoke({"messages": [("user", f"task {i}")]})
            return 1.0

        for i in range(20):  # warm up both paths
            await plain(i)
            traj = await captured(i)
        assert traj.metadata["capture"]["calls"] == CALLS_PER_RUN, traj.metadata["capture"]
        assert traj.metadata["capture"]["trainable_turns"] == CALLS_PER_RUN

        without: list[float] = []
        with_: list[float] = []
        for start in range(0, runs, batch):  # alternate batches so drift hits both sides alike
            for mode, times in ((plain, without), (captured, with_)):
                for i in range(start, min(start + batch, runs)):
                    t0 = time.perf_counter()
                    await mode(i)
                    times.append(time.perf_counter() - t0)

        handler_runs = min(runs, 200)
        for i in range(handler_runs):
            with art.capture():
                await graph.ainvoke(
                    {"messages": [("user", f"task {i}")]}, config={"callbacks": [TimedHandler()]}
                )
    finally:
        server.terminate()
        server.wait(timeout=10)

    m_without, m_with = statistics.median(without), statistics.median(with_)
    return {
        "overhead_us_per_call": round((m_with - m_without) / CALLS_PER_RUN * 1e6, 1),
        "overhead_ratio": round(m_with / m_without, 4),
        "handler_us_per_call": round(TimedHandler.spent / (handler_runs * CALLS_PER_RUN) * 1e6, 1),
        "median_run_ms_without": round(m_without * 1e3, 3),
        "median_run_ms_with": round(m_with * 1e3, 3),
        "runs_per_mode": runs,
        "llm_calls_per_run": CALLS_PER_RUN,
        "targets": {"overhead_us_per_call": 300, "overhead_ratio": 1.03},
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "command": "python benchmarks/capture_overhead.py " + " ".join(sys.argv[1:]),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400, help="graph runs per mode")
    parser.add_argument("--batch", type=int, default=20, help="runs per batch before switching mode")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/capture_overhead.json")
    args = parser.parse_args()
    result = asyncio.run(main(args.runs, args.batch))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
