"""Linear layers that multiply a single row as a matrix-vector product (CPU, bfloat16).

On a CPU with AMX or AVX512-BF16, torch multiplies bfloat16 matrices through oneDNN,
which is 2-4x faster than float32 from 8 rows up but slower than float32 for the one
row of a single decode step (measured in session 8: 576x1536 weights, 1 row: 97 us
bfloat16 against 85 us float32; `torch.mv` on the same bfloat16 weights: 63 us). A
`SingleRowLinear` hands exactly that case to `torch.mv` and everything else to
`F.linear`, so a bfloat16 model decodes one request at float32's speed or better and
keeps bfloat16's gain everywhere else.

Invariants: the result equals `F.linear(x, weight, bias)` up to rounding, with the
same shape and dtype; parameters, state dict and module names are unchanged (only the
class of each `nn.Linear` is swapped in place).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SingleRowLinear(nn.Linear):
    """nn.Linear whose single-row inputs go through `torch.mv`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() != x.shape[-1] or x.dim() < 2:
            return F.linear(x, self.weight, self.bias)
        out = torch.mv(self.weight, x.reshape(-1))
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], out.shape[-1])


def use_single_row_linears(model: nn.Module) -> int:
    """Swap every plain `nn.Linear` of `model` to `SingleRowLinear`; returns how many."""
    swapped = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = SingleRowLinear
            swapped += 1
    return swapped
