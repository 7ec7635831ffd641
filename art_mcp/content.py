"""An MCP tool result as the model sees it: every content block kept.

| block | in the tool message's text | also |
|---|---|---|
| text | the text | |
| image | ``[image N: image/png, 1234 bytes]`` | an OpenAI ``image_url`` part (a data URL) in `images` |
| audio | ``[audio: audio/wav, 1234 bytes]`` | |
| embedded resource, text | ``[resource file:///a.txt (text/plain)]`` and its text | |
| embedded resource, blob | ``[resource file:///a.pdf: application/pdf, 1234 bytes, binary, not shown]`` | |
| resource link | ``[resource link: report <file:///report.pdf> (application/pdf): description]`` | |

A tool message holds text only (OpenAI's tool messages take no images); `ToolResult.image_message`
gives the images as a user message for a model that takes them, and the trajectory keeps them
either way (``metadata["mcp_calls"][i]["images"]``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

__all__ = ["result_content"]


def _get(obj: Any, *names: str) -> Any:
    for name in names:  # snake_case under mcp 2.x, camelCase under 1.x
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _size(data: str | None) -> int:
    try:
        return len(base64.b64decode(data or "", validate=False))
    except (binascii.Error, ValueError):
        return len(data or "")


def result_content(blocks: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """The text the model sees for a result's content blocks, and its images as OpenAI parts."""
    parts: list[str] = []
    images: list[dict[str, Any]] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        mime = _get(block, "mime_type", "mimeType")
        if kind == "text":
            parts.append(block.text)
        elif kind == "image":
            images.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{block.data}"}})
            parts.append(f"[image {len(images)}: {mime}, {_size(block.data)} bytes]")
        elif kind == "audio":
            parts.append(f"[audio: {mime}, {_size(block.data)} bytes]")
        elif kind == "resource":
            parts.append(_resource(block.resource))
        elif kind == "resource_link":
            name = _get(block, "title", "name") or block.name
            about = f" ({mime})" if mime else ""
            desc = f": {block.description}" if getattr(block, "description", None) else ""
            parts.append(f"[resource link: {name} <{block.uri}>{about}{desc}]")
        else:
            parts.append(f"[{kind} content]")
    return "\n".join(parts), images


def _resource(resource: Any) -> str:
    mime = _get(resource, "mime_type", "mimeType")
    text = getattr(resource, "text", None)
    if text is not None:
        return f"[resource {resource.uri}{f' ({mime})' if mime else ''}]\n{text}"
    blob = getattr(resource, "blob", None)
    return f"[resource {resource.uri}: {mime or 'unknown type'}, {_size(blob)} bytes, binary, not shown]"
