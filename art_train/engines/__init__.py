"""Inference engines behind one protocol: `transformers` (embedded) and `vllm` (its own process)."""

from .base import ChatRequest, Engine, EngineError, SamplingParams
from .tool_parsers import ParsedOutput, ToolParser, add_tool_parser, get_tool_parser, hermes, tool_parser

__all__ = [
    "ChatRequest",
    "Engine",
    "EngineError",
    "ParsedOutput",
    "SamplingParams",
    "ToolParser",
    "TransformersEngine",
    "VLLMEngine",
    "add_tool_parser",
    "get_tool_parser",
    "hermes",
    "tool_parser",
]


def __getattr__(name: str):  # noqa: ANN202 - the engines import torch / spawn processes: load on first use
    if name == "TransformersEngine":
        from .transformers_engine import TransformersEngine

        return TransformersEngine
    if name == "VLLMEngine":
        from .vllm_engine import VLLMEngine

        return VLLMEngine
    raise AttributeError(name)
