"""Per-token logprobs of chosen tokens without materialising full-vocabulary logits for a whole row.

The lm_head runs on the trained positions only, in chunks; backward recomputes each chunk's logits
instead of keeping them, so memory holds one chunk of [chunk, vocab] at a time.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["row_logprobs", "selected_logprobs"]


class _SelectedLogprobs(torch.autograd.Function):
    """logp[i] = log_softmax(h[i] @ W.T)[target[i]], computed in chunks; also returns the entropy (no grad)."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int):  # noqa: ANN205
        logp = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)  # [n]
        entropy = torch.empty_like(logp)  # [n]
        logz = torch.empty_like(logp)  # [n]
        for s in range(0, hidden.shape[0], chunk):
            logits = (hidden[s : s + chunk] @ weight.T).float()  # [c, V]
            z = torch.logsumexp(logits, dim=-1)  # [c]
            logz[s : s + chunk] = z
            logp[s : s + chunk] = logits.gather(1, targets[s : s + chunk, None])[:, 0] - z
            probs = torch.exp(logits - z[:, None])  # [c, V]
            entropy[s : s + chunk] = z - (probs * logits).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, logz)
        ctx.chunk = chunk
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor, _grad_entropy: torch.Tensor):  # noqa: ANN205
        hidden, weight, targets, logz = ctx.saved_tensors
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        for s in range(0, hidden.shape[0], ctx.chunk):
            h = hidden[s : s + ctx.chunk]
            logits = (h @ weight.T).float()  # [c, V]
            g = grad_logp[s : s + ctx.chunk]  # [c]
            grad_logits = -torch.exp(logits - logz[s : s + ctx.chunk, None]) * g[:, None]  # [c, V]
            grad_logits.scatter_add_(1, targets[s : s + ctx.chunk, None], g[:, None])
            grad_logits = grad_logits.to(h.dtype)
            if grad_hidden is not None:
                grad_hidden[s : s + ctx.chunk] = grad_logits @ weight
            if grad_weight is not None:
                grad_weight += (grad_logits.T @ h).float()
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None


def selected_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp [n], entropy [n]) of `targets` [n] under logits hidden [n, H] @ weight.T [H, V]."""
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return _SelectedLogprobs.apply(hidden, weight, targets, chunk)


def row_logprobs(
    causal_lm: Any,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    pred_index: torch.Tensor,
    targets: torch.Tensor,
    chunk: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs and entropies of `targets` predicted at `pred_index` of one packed row.

    input_ids, position_ids: [L]; pred_index, targets: [n]. The decoder runs on the whole row
    (block-diagonal attention from the position ids); the lm_head only on the n positions.
    """
    device = causal_lm.get_output_embeddings().weight.device
    out = causal_lm.get_decoder()(
        input_ids=input_ids[None].to(device), position_ids=position_ids[None].to(device), use_cache=False
    )
    hidden = out.last_hidden_state[0, pred_index.to(device)]  # [n, H]
    head = causal_lm.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise ValueError("lm_head with a bias is not supported by the chunked logprob path")
    return selected_logprobs(hidden, head.weight, targets.to(device), chunk)
