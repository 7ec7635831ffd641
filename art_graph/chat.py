"""`chat_model`: the one line a LangGraph app changes to be trained with ART."""

from __future__ import annotations

from typing import Any

import openai
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI

from art_core import Model

from .handler import MODEL_KEY, STEP_KEY, TRAINABLE_KEY


class ArtChatOpenAI(ChatOpenAI):
    """`ChatOpenAI` that keeps the server's ``art_step`` (the checkpoint that answered).

    `ChatOpenAI` drops unknown response fields (langchain-openai 1.7). This copies ``art_step`` into
    each generation's ``generation_info``, where the capture handler reads it and users find it in
    ``message.response_metadata["art_step"]``. It overrides the same two hooks that
    langchain-openai's own subclasses (``AzureChatOpenAI``) override.
    """

    def _create_chat_result(
        self, response: dict | openai.BaseModel, generation_info: dict | None = None
    ) -> ChatResult:
        result = super()._create_chat_result(response, generation_info)
        extra = response if isinstance(response, dict) else (getattr(response, "model_extra", None) or {})
        for generation in result.generations:
            _keep_step(generation, extra.get(STEP_KEY))
        return result

    def _convert_chunk_to_generation_chunk(
        self, chunk: dict, default_chunk_class: type, base_generation_info: dict | None
    ) -> ChatGenerationChunk | None:
        generation = super()._convert_chunk_to_generation_chunk(
            chunk, default_chunk_class, base_generation_info
        )
        if generation is not None:
            _keep_step(generation, chunk.get(STEP_KEY))
        return generation


def _keep_step(generation: ChatGeneration, step: Any) -> None:
    if step is not None:
        generation.generation_info = {**(generation.generation_info or {}), STEP_KEY: step}


def chat_model(model: Model, **kwargs: Any) -> ChatOpenAI:
    """An `ArtChatOpenAI` (a `ChatOpenAI`) bound to ``model``'s endpoint (base URL, API key, served name).

    For a trainable model it asks for logprobs and for tokens written as ``token_id:N``, so the
    sampled token ids survive LangChain and land in the trajectory. Any other model (a hosted
    planner, say) is called as is and its turns are recorded as context. The checkpoint step the
    server reports (``art_step``) is kept in each reply's ``response_metadata``. Keyword arguments
    go to `ChatOpenAI` (``temperature``, ``max_tokens``, ...).

    Example:
        llm = art_graph.chat_model(model, temperature=0.7)   # was: ChatOpenAI(model="gpt-4.1")
        agent = create_react_agent(llm, tools)
    """
    if not isinstance(model, Model):
        raise TypeError(f"chat_model() takes an art_core Model or TrainableModel, got {type(model).__name__}")
    if not model.inference_base_url:
        raise RuntimeError(
            f"model {model.name!r} has no inference endpoint: call `await model.register(backend)` first, "
            "or set inference_base_url"
        )
    metadata = {
        **(kwargs.pop("metadata", None) or {}),
        TRAINABLE_KEY: model.trainable,
        MODEL_KEY: model.served_name(),
    }
    if model.trainable:
        kwargs["logprobs"] = True
        kwargs["extra_body"] = {**(kwargs.get("extra_body") or {}), "return_tokens_as_token_ids": True}
    kwargs.setdefault("use_responses_api", False)
    return ArtChatOpenAI(
        model=model.served_name(),
        base_url=model.inference_base_url,
        api_key=model.inference_api_key or "art",
        metadata=metadata,
        **kwargs,
    )
