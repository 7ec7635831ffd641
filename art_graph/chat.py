"""`chat_model`: the one line a LangGraph app changes to be trained with ART."""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI

from art_core import Model

from .handler import MODEL_KEY, TRAINABLE_KEY


def chat_model(model: Model, **kwargs: Any) -> ChatOpenAI:
    """A `ChatOpenAI` bound to ``model``'s endpoint (its base URL, API key and served name).

    For a trainable model it asks for logprobs and for tokens written as ``token_id:N``, so the
    sampled token ids survive LangChain and land in the trajectory. Any other model (a hosted
    planner, say) is called as is and its turns are recorded as context. Keyword arguments go to
    `ChatOpenAI` (``temperature``, ``max_tokens``, ...).

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
    return ChatOpenAI(
        model=model.served_name(),
        base_url=model.inference_base_url,
        api_key=model.inference_api_key or "art",
        metadata=metadata,
        **kwargs,
    )
