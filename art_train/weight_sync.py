"""Does the engine serve the checkpoint just trained, or still an older one? The pure half of the check.

A tolerance on |served - trained| logprobs alone cannot tell: one step at an ordinary learning
rate moves logprobs by ~1e-3 while a bfloat16 engine differs from a float32 trainer by ~4e-2,
so an engine serving the previous checkpoint passes any tolerance loose enough for its precision.
Two things can tell, and the swap (`swap.Swap.load_and_verify`) uses both:

1. **Identity**: a fingerprint of the LoRA tensors the engine holds (in-process engine) or of the
   adapter folder it reports having loaded (vLLM's ``/v1/models`` root) must equal the trainer's.
2. **Discrimination** on a probe made of this step's trained sequences: with the trainer's logprobs
   under the new checkpoint (T_new) and an alternative a (the previous checkpoint, step 0), and the
   engine's for the new adapter name and for a (E_new, E_a), fit

       E_new - E_a  ~  s * (T_new - T_a)

   Differences cancel what the two checkpoints share (the base weights' rounding), so s is ~1 when
   the engine serves the new checkpoint and ~0 when it serves a. With se the fit's standard error,
   the two cases are `SEPARATION` standard errors apart when se <= 1 / SEPARATION: then s < 0.5
   fails the step. When se is larger the checkpoints cannot be told apart on this probe and the
   metrics say so (``weight_sync/distinguishable = 0``) rather than claim a pass.

   The fit also needs T_new - T_a to be a move, not rounding: logprobs are float32, and a step whose
   move is a few float32 units in the last place (ulps) of the logprobs (two identical rows with opposite
   advantages, whose gradients cancel) leaves on both sides nothing but rounding, which the engine's
   and the trainer's forwards do differently. Such a fit looked decisive (s = 0.18 +- 0.08 on a move of
   0.7 ulp, a float32 engine on an AVX2 CPU) and failed a correct load. So a move under `MIN_MOVE_ULPS`
   ulps (RMS) is not distinguishable either.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["MIN_MOVE_ULPS", "SEPARATION", "Discrimination", "discriminate", "lora_fingerprint", "sync_tolerance"]

SEPARATION = 6.0  # s = 0 and s = 1 must be this many standard errors apart to decide
MIN_MOVE_ULPS = 16.0  # and the trainer's move this many float32 ulps of the logprobs (RMS), or it is rounding

# max |engine - trainer| logprob on the fixed probe that a correct load may show, by the precision both
# sides compute at (the trainer computes at the engine's dtype when they differ: `sync_reference_dtype`)
# and the device. On CPU a bfloat16 engine against the trainer's bfloat16 reference gave 0.0 (the GPU
# script's CPU twin, tiny model). On CUDA a batched engine forward and the trainer's may take different
# bfloat16 kernels: benchmarks/results/gpu.json's weight_sync section measures it; until then 0.1.
TOLERANCES = {("float32", "cpu"): 2e-3, ("float32", "cuda"): 2e-3, ("half", "cpu"): 0.1, ("half", "cuda"): 0.1}


def sync_tolerance(dtype: str | None, device: str | None) -> float:
    """The weight-sync tolerance for an engine computing at `dtype` ("auto": bfloat16 on CUDA, float32 on
    CPU) on `device` ("cpu", "cuda", "cuda:1", ...; None: CPU)."""
    kind = "cuda" if (device or "cpu").startswith("cuda") else "cpu"
    if dtype in (None, "auto"):
        dtype = "bfloat16" if kind == "cuda" else "float32"
    return TOLERANCES[("float32" if dtype == "float32" else "half", kind)]


def lora_fingerprint(pairs: dict[str, Any]) -> str:
    """sha256 of a LoRA's tensors (``{module: LoraPair}``, float32, modules sorted): equal iff the weights are."""
    h = hashlib.sha256()
    for module in sorted(pairs):
        pair = pairs[module]
        h.update(module.encode())
        h.update(f"{float(pair.scale):.9g}".encode())
        for t in (pair.a, pair.b):
            h.update(t.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Discrimination:
    """How the engine's move from checkpoint a to the new name compares with the trainer's."""

    s: float  # fraction of the trainer's move that the engine shows: ~1 new, ~0 still a
    se: float  # standard error of s
    tokens: int
    moved: float  # RMS of T_new - T_a over the probe: how far the step moved the policy there
    ulp: float = 0.0  # RMS float32 ulp of the trainer's logprobs there: the size of their rounding

    @property
    def distinguishable(self) -> bool:
        return self.se <= 1 / SEPARATION and self.moved >= MIN_MOVE_ULPS * self.ulp

    @property
    def stale(self) -> bool:
        return self.distinguishable and self.s < 0.5


def discriminate(e_new: list[float], e_alt: list[float], t_new: list[float], t_alt: list[float]) -> Discrimination:
    """Least-squares s in (e_new - e_alt) ~ s (t_new - t_alt), over positions present in all four lists."""
    n = min(len(e_new), len(e_alt), len(t_new), len(t_alt))
    e = [a - b for a, b in zip(e_new[:n], e_alt[:n], strict=True)]
    t = [a - b for a, b in zip(t_new[:n], t_alt[:n], strict=True)]
    tt = sum(x * x for x in t)
    ulp = math.sqrt(sum(_ulp32(max(abs(a), abs(b))) ** 2 for a, b in zip(t_new[:n], t_alt[:n], strict=True))
                    / max(n, 1))
    if n < 2 or tt <= 1e-12:  # the step did not move the policy on the probe at all
        return Discrimination(s=math.nan, se=math.inf, tokens=n, moved=math.sqrt(tt / max(n, 1)), ulp=ulp)
    s = sum(a * b for a, b in zip(e, t, strict=True)) / tt
    residual = sum((a - s * b) ** 2 for a, b in zip(e, t, strict=True)) / (n - 1)
    return Discrimination(s=s, se=math.sqrt(residual / tt), tokens=n, moved=math.sqrt(tt / n), ulp=ulp)


def _ulp32(x: float) -> float:
    """The float32 ulp at |x| (a normal number): float64's ulp scaled by their 29 bits of difference."""
    return math.ulp(abs(x)) * 2.0**29 if x else 0.0
