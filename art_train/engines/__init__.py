"""Inference engines behind one protocol: `transformers` (embedded) and `vllm` (its own process)."""

from pathlib import Path
from typing import Any

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
    "bundled_engine",
    "get_tool_parser",
    "hermes",
    "tool_parser",
]


def __getattr__(name: str):  # noqa: ANN202 - the engines import torch / spawn processes: load on first use
    if name == "TransformersEngine":
        from .transformers import TransformersEngine

        return TransformersEngine
    if name == "VLLMEngine":
        from .vllm_engine import VLLMEngine

        return VLLMEngine
    raise AttributeError(name)


def bundled_engine(kind: str, path: Path, model_config: Any, device: str | None, dtype: str,
                   vllm_python: str | None = None, env: dict[str, str] | None = None) -> Engine:
    """A new (not started) bundled engine of `kind` for the base model at `path`; `env` goes into the vLLM
    server's environment (the transformers engine runs in this process and has none of its own)."""
    if kind == "transformers":
        from .transformers import TransformersEngine

        if env:
            raise ValueError(f"the transformers engine runs in the server's process, so it cannot be given its own "
                             f"environment ({', '.join(env)}); with replica_devices use replicas >= 2 or engine 'vllm'")
        return TransformersEngine(path, model_config=model_config, device=device, dtype=dtype)
    if kind == "vllm":
        from .vllm_engine import VLLMEngine

        return VLLMEngine(path, model_config=model_config, python=vllm_python, env=env)
    raise ValueError(f"unknown engine {kind!r}; use 'transformers' or 'vllm'")
