"""Checks on what a training call brings over the wire, done before anything is journalled or trained
(and the defaults a registered trainable model gets from its base model, checked the same way).

A step refused here leaves no trace in the run directory, so it cannot be replayed as a pending
step; a step that passes cannot fail later on an index out of the embedding table.
"""

from __future__ import annotations

import math
from typing import Any

from art_core import Model, TrainableModel, TrajectoryGroup

__all__ = ["check_train_groups", "vocab_size", "with_model_defaults"]


def vocab_size(trainer: Any) -> int:
    """Rows of the trained model's input embedding: the valid token ids are 0 .. this - 1."""
    return int(trainer.peft.get_input_embeddings().num_embeddings)


def check_train_groups(groups: list[TrajectoryGroup], vocab: int) -> None:
    """Raise ValueError naming the first trajectory that cannot be trained, and how to fix it."""
    if not groups:
        raise ValueError("no trajectory groups to train: pass at least one TrajectoryGroup "
                         "(two or more finished rollouts of one task)")
    for gi, group in enumerate(groups):
        for ti, traj in enumerate(group.trajectories):
            where = f"group {gi}, trajectory {ti} (id {traj.id})"
            histories = traj.histories()
            if not any(m.get("role") == "assistant" for h in histories for m in h.turns):
                raise ValueError(
                    f"{where} has no assistant turn, so nothing in it can be trained: call the model through "
                    "model.openai_client() inside art.capture() (or art_graph / art_mcp's rollouts), or leave "
                    "the trajectory out")
            for hi, history in enumerate(histories):
                for mi, sample in history.samples():
                    at = f"{where}, history {hi}, message {mi}"
                    bad = next((t for t in sample.token_ids if not 0 <= t < vocab), None)
                    if bad is not None:
                        raise ValueError(
                            f"{at}: token id {bad} is outside the model's vocabulary (0..{vocab - 1}); the turn "
                            "was not sampled from this base model: drop the turn's 'sample' (it is then context, "
                            "or re-tokenized and trained with train_unsampled_turns=True)")
                    lp = next((x for x in sample.logprobs or () if not (math.isfinite(x) and x <= 1e-4)), None)
                    if lp is not None:
                        raise ValueError(
                            f"{at}: logprob {lp:g} is not a log-probability (log-probabilities are <= 0 and "
                            "finite); send the sampler's logprobs of the sampled tokens, not probabilities, or none")


def with_model_defaults(model: Model) -> TrainableModel:
    """A copy of `model` as a TrainableModel whose config has the base model's alias defaults in every
    field the user left unset (`apply_model_defaults`); the user's object is not changed. ValueError
    naming the model when those defaults are invalid."""
    from .models import apply_model_defaults

    if not isinstance(model, TrainableModel):
        model = TrainableModel.model_validate(model.model_dump(exclude_unset=True))
    try:
        config = apply_model_defaults(model.config, model.base_model)
    except ValueError as exc:  # pydantic's ValidationError too: an alias whose defaults do not validate
        raise ValueError(f"model {model.name!r}: the defaults of base model {model.base_model!r} are invalid: "
                         f"{exc}; fix its ModelSpec or set the fields in ModelConfig") from exc
    return model.model_copy(update={"config": config})
