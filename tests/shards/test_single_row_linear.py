"""SingleRowLinear: a single row goes through torch.mv, anything else through F.linear,
with F.linear's result either way; the swap leaves parameters and names alone."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from shards.model_loader import load_model
from shards.single_row_linear import SingleRowLinear, use_single_row_linears


def _layer(bias: bool, dtype=torch.float32) -> SingleRowLinear:
    torch.manual_seed(0)
    layer = nn.Linear(6, 4, bias=bias).to(dtype)
    use_single_row_linears(layer)
    return layer


def test_a_known_single_row_product():
    layer = _layer(bias=True)
    with torch.no_grad():
        layer.weight.copy_(torch.arange(24, dtype=torch.float32).view(4, 6))
        layer.bias.copy_(torch.tensor([1.0, 0.0, -1.0, 0.5]))
    x = torch.ones(1, 1, 6)
    # each output is the sum of its weight row plus its bias
    assert layer(x).tolist() == [[[16.0, 51.0, 86.0, 123.5]]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 6), (1, 6), (3, 6), (2, 5, 6), (6,)])
def test_every_shape_gives_f_linear_result(dtype, bias, shape):
    layer = _layer(bias, dtype)
    x = torch.randn(*shape).to(dtype)
    expected = F.linear(x, layer.weight, layer.bias)
    got = layer(x)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tolerance = 0.0 if dtype is torch.float32 else 0.05
    torch.testing.assert_close(got.float(), expected.float(), atol=tolerance, rtol=1e-5 if tolerance == 0 else 0.02)


def test_only_single_rows_take_the_vector_path(monkeypatch):
    layer = _layer(bias=False)
    calls = []
    real_mv = torch.mv
    monkeypatch.setattr(torch, "mv", lambda *a: calls.append(a) or real_mv(*a))
    layer(torch.randn(1, 1, 6))
    assert len(calls) == 1
    layer(torch.randn(1, 2, 6))
    layer(torch.randn(6))
    assert len(calls) == 1


def test_the_swap_changes_only_plain_linears_and_keeps_the_state_dict():
    class Custom(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2)), Custom(2, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert use_single_row_linears(model) == 2
    assert [type(m).__name__ for m in model.modules()].count("SingleRowLinear") == 2
    assert type(model[3]) is Custom
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)


def test_cpu_bfloat16_loads_use_it_and_float32_loads_do_not():
    def kinds(dtype):
        return {type(m) for m in load_model("tiny", dtype=dtype).model.modules() if isinstance(m, nn.Linear)}

    assert kinds("bfloat16") == {SingleRowLinear}
    assert kinds("float32") == {nn.Linear}
