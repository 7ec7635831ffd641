"""What the docs' code blocks run against: a LocalBackend on the tiny random model, and small task sets.

A page's hidden setup block (`<!-- invisible-code-block: python ... -->`) calls these, so the visible
blocks run as written. `TINY` is set by the test before a page runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import art_core as art

TINY: dict[str, Path] = {}  # {"path": the tiny model's folder}
BACKENDS: list[Any] = []  # closed by the test after the page
RESTORE: list[Callable[[], None]] = []  # called by the test after the page


def tiny_model_path() -> str:
    return str(TINY["path"])


async def tiny_model(name: str = "docs-agent", project: str = "docs", max_seq_len: int = 256) -> art.TrainableModel:
    """A TrainableModel on the tiny random model, registered on a fresh LocalBackend (closed after the page)."""
    from art_train import LocalBackend

    backend = LocalBackend(device="cpu")
    BACKENDS.append(backend)
    model = art.TrainableModel(name=name, project=project, base_model=tiny_model_path(),
                               config=art.ModelConfig(max_seq_len=max_seq_len))
    await model.register(backend)
    return model


def tiny_as(alias: str) -> None:
    """Until the page ends, the model alias `alias` loads the tiny model: a block that names a real
    model (`base_model="smollm2-135m"`) runs as written, in seconds (README.md runs the real one)."""
    from art_train.models import add_model, model_spec

    original = model_spec(alias)
    assert original is not None, f"{alias!r} is not a model alias"
    add_model(dataclasses.replace(original, folder=tiny_model_path(), gguf=None, sha256=None))
    RESTORE.append(lambda: add_model(original))


def sft_records(count: int = 4) -> list[dict[str, Any]]:
    """Small teacher records in the OpenAI chat fine-tuning shape: a question and the right sum."""
    return [{"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                          {"role": "assistant", "content": str(2 * i)}]} for i in range(count)]


def addition_tasks(count: int = 4) -> list[dict[str, str]]:
    return [{"question": f"What is {i} + 1? Reply with the number only.", "answer": str(i + 1)}
            for i in range(count)]


# -- docs/langgraph.md -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    question: str
    answer: str


def graph_tasks(count: int = 2) -> list[Task]:
    return [Task(**t) for t in addition_tasks(count)]


def build_my_graph(llm: Any, *, max_tokens: int = 12) -> Any:
    """A small real LangGraph app: a `researcher` node, then a `writer` node, each one call of `llm`."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    bound = llm.bind(max_tokens=max_tokens)  # short replies, so a page runs in seconds

    def researcher(state: MessagesState) -> dict:
        return {"messages": [bound.invoke([("system", "List the facts needed."), *state["messages"]])]}

    def writer(state: MessagesState) -> dict:
        return {"messages": [bound.invoke([("system", "Answer with the number only."), *state["messages"]])]}

    g = StateGraph(MessagesState)
    g.add_node("researcher", researcher)
    g.add_node("writer", writer)
    g.add_edge(START, "researcher")
    g.add_edge("researcher", "writer")
    g.add_edge("writer", END)
    return g.compile()


def teacher_llm() -> Any:
    """A scripted LangChain chat model standing in for a stronger (hosted) teacher."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    return FakeListChatModel(responses=["We add the two numbers.", "1", "We add the two numbers.", "2"])


# -- docs/mcp.md -------------------------------------------------------------------------------------
MY_SERVER = '''"""my_server: the MCP server docs/mcp.md connects to: a few invoices to search and read, and a tax."""
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("invoices", log_level="WARNING")
INVOICES = [
    {"id": 1, "customer": "Acme", "item": "invoice for 40 widgets", "total": 120.0},
    {"id": 2, "customer": "Globex", "item": "invoice for a support plan", "total": 99.5},
    {"id": 3, "customer": "Initech", "item": "refund of invoice 1", "total": -20.0},
]


@server.tool()
def search(query: str) -> list[dict]:
    """Find the invoices whose customer or item contains the query (for example "invoice" or "acme")."""
    q = query.lower()
    return [i for i in INVOICES if q in i["customer"].lower() or q in i["item"].lower()]


@server.tool()
def get_invoice(invoice_id: int) -> dict:
    """Read one invoice by id."""
    for invoice in INVOICES:
        if invoice["id"] == invoice_id:
            return invoice
    raise ToolError(f"no invoice with id {invoice_id}; use search to find ids")


@server.tool()
def tax(amount: float, rate_percent: float) -> float:
    """The tax on an amount at a rate in percent."""
    return round(amount * rate_percent / 100, 2)


if __name__ == "__main__":
    server.run("stdio")
'''


def write_my_server() -> None:
    """Write `my_server.py` here and put a `python` first on PATH that runs this interpreter with this
    folder on its path, so `"python -m my_server"` starts it, also from a rollout's own directory.

    The test restores PATH after the page.
    """
    here = Path.cwd()
    (here / "my_server.py").write_text(MY_SERVER)
    bin_dir = here / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{here}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
