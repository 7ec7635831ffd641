"""A raw stdio MCP server (newline-delimited JSON-RPC, no SDK) whose tools return every content kind
and carry the schemas and names real servers send: `$schema`, a top-level `anyOf`, names OpenAI
refuses, a task-required tool, and a slow tool that reports progress.

Written without the SDK so it says exactly what the spec allows, under mcp 1.x and 2.x alike. (A
non-object input schema is against the spec and mcp 2.x's client refuses the whole list, so that
case is tested on `openai_parameters` alone.)
"""

from __future__ import annotations

import base64
import json
import sys
import time

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000" "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)).decode()
OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}
TOOLS = [
    {"name": "media", "description": "Every kind of content.", "inputSchema": {"type": "object"}},
    {"name": "files.read/v2", "description": "A name with a dot and a slash.", "inputSchema": OBJECT},
    {"name": "files_read_v2", "description": "What the first one's name maps to, taken.", "inputSchema": OBJECT},
    {"name": "a_tool_whose_name_runs_on_" + "and_on_" * 8 + "end", "inputSchema": OBJECT},
    {"name": "strict", "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", **OBJECT}},
    {"name": "either", "inputSchema": {"type": "object", "anyOf": [
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
    ]}},
    {"name": "background", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}},
    {"name": "slow", "description": "Sleeps `seconds`, reporting progress every 0.2 s if `progress`.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"},
                                                      "progress": {"type": "boolean"}}}},
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def call(name: str, args: dict, token: object) -> list[dict]:
    if name == "media":
        return [
            {"type": "text", "text": "here is everything"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///notes.txt", "mimeType": "text/plain",
                                              "text": "the note body"}},
            {"type": "resource", "resource": {"uri": "file:///scan.pdf", "mimeType": "application/pdf",
                                              "blob": base64.b64encode(b"%PDF-1.4 fake").decode()}},
            {"type": "resource_link", "uri": "file:///report.pdf", "name": "report",
             "description": "the quarterly report", "mimeType": "application/pdf"},
        ]
    if name == "slow":
        end = time.monotonic() + float(args.get("seconds", 1))
        step = 0
        while time.monotonic() < end:
            time.sleep(0.2)
            step += 1
            if args.get("progress") and token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": step}})
        return [{"type": "text", "text": "done"}]
    return [{"type": "text", "text": f"{name} got {json.dumps(args, sort_keys=True)}"}]


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "id" not in msg:
            continue  # a notification
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "content", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            token = (params.get("_meta") or {}).get("progressToken")
            result = {"content": call(params["name"], params.get("arguments") or {}, token), "isError": False}
        elif method == "ping":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": f"no method {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": msg["id"], "result": result})


if __name__ == "__main__":
    main()
