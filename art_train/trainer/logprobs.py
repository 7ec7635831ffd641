"""Per-token logprobs of chosen tokens without materialising full-vocabulary logits for a whole row.

The lm_head runs on the trained positions only, in chunks, so memory holds one chunk of [chunk, vocab]
at a time (256 x 49k floats is 50 MB; forward and backward each keep about three such tensors alive).
With a frozen head (LoRA), forward also keeps each position's expected output embedding under its
softmax, P @ W ([n, hidden]): the gradient of logp[i] with respect to h[i] is W[target[i]] - (P @ W)[i],
so backward multiplies nothing. With a trained head, backward recomputes each chunk's logits instead.
"""

from __future__ import annotations

from typing import Any

import torch

from ..hf_compat import cache_kwargs, output_cache

__all__ = ["SharedPrefix", "row_logprobs", "rows_logprobs", "selected_logprobs"]


class _SelectedLogprobs(torch.autograd.Function):
    """logp[i] = log_softmax(h[i] @ W.T)[target[i]], computed in chunks; also returns the entropy (no grad).

    Always in the weight's dtype, autocast or not: backward recomputes the logits outside autocast, and
    forward must compute the same ones. `expect`: keep P @ W for a backward to `hidden` only (frozen head).
    """

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int,  # noqa: ANN205
                expect: bool):
        logp = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)  # [n]
        entropy = torch.empty_like(logp)  # [n]
        logz = None if expect else torch.empty_like(logp)  # [n], for a backward that recomputes the logits
        expected = torch.empty_like(hidden) if expect else None  # [n, H]
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, hidden.shape[0], chunk):
                logits = (hidden[s : s + chunk] @ weight.T).float()  # [c, V]
                z = torch.logsumexp(logits, dim=-1)  # [c]
                if logz is not None:
                    logz[s : s + chunk] = z
                logp[s : s + chunk] = logits.gather(1, targets[s : s + chunk, None])[:, 0] - z
                probs = torch.exp(logits - z[:, None])  # [c, V]
                entropy[s : s + chunk] = z - (probs * logits).sum(-1)
                if expected is not None:
                    expected[s : s + chunk] = probs.to(weight.dtype) @ weight
        if expected is not None:
            ctx.save_for_backward(expected, weight, targets)
        else:
            ctx.save_for_backward(hidden, weight, targets, logz)
        ctx.chunk, ctx.expect = chunk, expect
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor, _grad_entropy: torch.Tensor):  # noqa: ANN205
        if ctx.expect:  # d logp / d h = W[target] - P @ W
            expected, weight, targets = ctx.saved_tensors
            grad = (weight[targets].float() - expected.float()) * grad_logp[:, None]  # [n, H]
            return grad.to(expected.dtype), None, None, None, None
        hidden, weight, targets, logz = ctx.saved_tensors
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        with torch.autocast(hidden.device.type, enabled=False):  # the caller may backward inside autocast
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
        return grad_hidden, grad_weight, None, None, None


def selected_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp [n], entropy [n]) of `targets` [n] under logits hidden [n, H] @ weight.T [H, V]."""
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    expect = torch.is_grad_enabled() and hidden.requires_grad and not weight.requires_grad
    return _SelectedLogprobs.apply(hidden.to(weight.dtype), weight, targets, chunk, expect)  # autocast may give bf16


class SharedPrefix:
    """Keys and values of a prompt that several sequences start with: forward once, backward once.

    Each sequence runs its suffix on top of detached copies of the prefix's keys and values; its
    backward leaves their gradients there. `backward()` then sends the summed gradient through the
    prefix's graph in one pass. Exact: the same math as running every sequence whole.

    With `recompute`, the first forward keeps no graph (only the keys and values), and `backward()`
    runs the prefix forward again, with the random state of the first, to send the gradient through:
    the prompt's activations are not held while its sequences run, for one more forward of the prompt.

    Example:
        prefix = SharedPrefix(causal_lm, row.input_ids[:k])
        for row in rows: row_logprobs(causal_lm, ..., prefix=prefix)[0].sum().backward()
        prefix.backward()
    """

    def __init__(self, causal_lm: Any, input_ids: torch.Tensor, *, recompute: bool = False) -> None:
        self.length = int(input_ids.shape[0])
        self._decoder = causal_lm.get_decoder()
        self._ids = input_ids[None].to(causal_lm.get_output_embeddings().weight.device)
        self._rng = _rng_state(self._ids.device) if recompute else None  # set: the graph is not kept
        if recompute:
            with torch.no_grad():
                kv = self._forward()
            self._kv: list[tuple[torch.Tensor, torch.Tensor]] = []
            self._leaves = [(k.requires_grad_(), v.requires_grad_()) for k, v in kv]
        else:
            self._kv = self._forward()  # [1, heads, k, head_dim] per layer, with their graph
            self._leaves = [
                (k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
                for k, v in self._kv
            ]

    def _forward(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        from transformers import DynamicCache

        out = self._decoder(input_ids=self._ids, **cache_kwargs(self._decoder, DynamicCache()), use_cache=True)
        return [(k, v) for k, v, *_ in output_cache(out)]

    def cache(self, batch: int = 1) -> Any:
        """A fresh cache holding the prefix (suffixes append to their own copy, never to the prefix), for
        `batch` suffixes at once (an expanded view: their gradients sum on the prefix's leaves)."""
        from transformers import DynamicCache

        if batch == 1:
            return DynamicCache(ddp_cache_data=self._leaves)
        return DynamicCache(ddp_cache_data=[(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1))
                                            for k, v in self._leaves])  # fmt: skip

    def backward(self) -> None:
        """Backpropagate the gradients the suffixes left on the prefix's keys and values."""
        kv, leaves = self._kv, self._leaves
        self._kv, self._leaves = [], []
        if not any(t.grad is not None for pair in leaves for t in pair):
            return
        if self._rng is not None:  # no graph kept: the forward again, drawing what the first drew
            with torch.random.fork_rng(devices=[self._ids.device] if self._ids.device.type == "cuda" else []):
                _set_rng_state(self._rng, self._ids.device)
                with torch.enable_grad():
                    kv = self._forward()
        outputs, grads = [], []
        for (k, v), (lk, lv) in zip(kv, leaves, strict=True):
            for t, leaf in ((k, lk), (v, lv)):
                if t.requires_grad and leaf.grad is not None:
                    outputs.append(t)
                    grads.append(leaf.grad)
        if outputs:
            torch.autograd.backward(outputs, grads)


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The random state a forward on `device` draws from (LoRA dropout): CPU's, and the GPU's on CUDA."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def row_logprobs(
    causal_lm: Any,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    pred_index: torch.Tensor,
    targets: torch.Tensor,
    chunk: int = 256,
    prefix: SharedPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs and entropies of `targets` predicted at `pred_index` of one packed row.

    input_ids, position_ids: [L]; pred_index, targets: [n]. The decoder runs on the whole row
    (block-diagonal attention from the position ids); the lm_head only on the n positions.
    With `prefix` (a single-sequence row starting with the prefix's tokens, no prediction inside
    the prefix), the decoder runs only on the rest, attending to the prefix's cached keys and values.
    """
    device = causal_lm.get_output_embeddings().weight.device
    if prefix is not None:
        k = prefix.length
        decoder = causal_lm.get_decoder()
        out = decoder(
            input_ids=input_ids[None, k:].to(device),
            position_ids=position_ids[None, k:].to(device),
            **cache_kwargs(decoder, prefix.cache()),
            use_cache=True,
        )
        pred_index = pred_index - k
    else:
        out = causal_lm.get_decoder()(
            input_ids=input_ids[None].to(device), position_ids=position_ids[None].to(device), use_cache=False
        )
    hidden = out.last_hidden_state[0, pred_index.to(device)]  # [n, H]
    return selected_logprobs(hidden, _head_weight(causal_lm), targets.to(device), chunk)


def rows_logprobs(
    causal_lm: Any,
    rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
    chunk: int = 256,
    prefix: SharedPrefix | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`row_logprobs` of several one-sequence rows (input_ids, position_ids, pred_index, targets) in one
    decoder call: their tokens after `prefix` right-padded to one width. Attention is causal, so the
    padding after a row's last token changes none of its logprobs; it only costs its compute.
    """
    device = causal_lm.get_output_embeddings().weight.device
    k = prefix.length if prefix is not None else 0
    width = max(int(ids.shape[0]) - k for ids, *_ in rows)
    ids = torch.stack([_pad(ids[k:], width, 0) for ids, *_ in rows]).to(device)  # [B, W]
    positions = torch.stack([_pad(pos[k:], width, None) for _, pos, *_ in rows]).to(device)  # [B, W]
    decoder = causal_lm.get_decoder()
    if prefix is not None:
        out = decoder(input_ids=ids, position_ids=positions, **cache_kwargs(decoder, prefix.cache(len(rows))),
                      use_cache=True)  # fmt: skip
    else:
        out = decoder(input_ids=ids, position_ids=positions, use_cache=False)
    hidden = torch.cat([out.last_hidden_state[b, pred.to(device) - k] for b, (_, _, pred, _) in enumerate(rows)])
    targets = torch.cat([t for *_, t in rows]).to(device)
    logp, entropy = selected_logprobs(hidden, _head_weight(causal_lm), targets, chunk)  # [sum n]
    sizes = [int(t.shape[0]) for *_, t in rows]
    return list(zip(logp.split(sizes), entropy.split(sizes), strict=True))


def _head_weight(causal_lm: Any) -> torch.Tensor:
    """The lm_head's weight; a head with a bias is refused (the chunked path computes h @ W.T only)."""
    head = causal_lm.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise ValueError("lm_head with a bias is not supported by the chunked logprob path")
    return head.weight


def _pad(t: torch.Tensor, width: int, value: int | None) -> torch.Tensor:
    """`t` [L] right-padded to `width` with `value` (None: counting on from its last value, as positions do)."""
    extra = width - int(t.shape[0])
    if extra == 0:
        return t
    tail = (torch.arange(1, extra + 1, dtype=t.dtype) + t[-1]) if value is None else t.new_full((extra,), value)
    return torch.cat([t, tail])
