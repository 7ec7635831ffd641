"""The embedded engine: transformers in-process, batching concurrent requests.

`engine` (the model and its adapters, requests in and out), `scheduler` (continuous batching on a
worker thread, the prefix cache), `render` (OpenAI response bodies).
"""

from .engine import TransformersEngine

__all__ = ["TransformersEngine"]
