"""Saved-tensor hooks that keep a note instead of a tensor, and leave every other tensor to the hooks outside.

PyTorch applies only the innermost saved-tensor hooks, so a block that keeps some tensors as notes would
otherwise hide every other tensor saved inside it from the hooks around it (a counting hook such as
`work.saved_bytes_peak`, `torch.utils.checkpoint`). `notes_for` passes those on to the hooks that were in
force when it began.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["notes_for"]


class _Note:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _outer() -> tuple[Callable[[torch.Tensor], Any], Callable[[Any], torch.Tensor]] | None:
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return None if top is None else top(False)  # type: ignore[no-any-return]


@contextmanager
def notes_for(note: Callable[[torch.Tensor], Any], rebuild: Callable[[Any], torch.Tensor]) -> Iterator[None]:
    """Inside the block, a tensor autograd saves for which `note` returns something other than None is kept
    as that note, and `rebuild(note)` gives the tensor back in backward; other tensors go to the outer hooks."""
    outer = _outer()
    outer_pack, outer_unpack = outer if outer is not None else (None, None)

    def pack(t: torch.Tensor) -> Any:
        value = note(t)
        if value is not None:
            return _Note(value)
        return t if outer_pack is None else outer_pack(t)

    def unpack(kept: Any) -> torch.Tensor:
        if isinstance(kept, _Note):
            return rebuild(kept.value)
        return kept if outer_unpack is None else outer_unpack(kept)

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield
