"""Options a user porting from PyTorch meets: Conv1d padding='same'/'valid',
ConvTranspose2d.forward(x, output_size=), MultiheadAttention(add_bias_kv=, add_zero_attn=) and
LSTM(proj_size=). Each runs against PyTorch with copied weights, forward and backward (inputs
and parameters); sizes are also checked without torch."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn

RTOL, ATOL = 1e-4, 1e-5
rng = np.random.default_rng(7)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def against_torch(ours, make_theirs, arrays, call=lambda module, *xs: module(*xs)):
    """Copy the torch module's weights into ``ours``; compare outputs (the first one if a
    tuple), input gradients and parameter gradients."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = make_theirs(torch)
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()},
                         strict=True)
    ours_in = [md.tensor(a, requires_grad=True) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    outputs = [call(ours, *ours_in), call(theirs, *theirs_in)]
    ours_out, theirs_out = (out[0] if isinstance(out, tuple) else out for out in outputs)
    assert ours_out.shape == tuple(theirs_out.shape)
    weights = normal(*ours_out.shape)
    ours_out.backward(md.tensor(weights))
    theirs_out.backward(torch.tensor(weights))
    theirs_params = dict(theirs.named_parameters())
    pairs = [("output", ours_out, theirs_out.detach())]
    pairs += [(f"input {i}", a.grad, b.grad) for i, (a, b) in enumerate(zip(ours_in, theirs_in))]
    pairs += [(name, p.grad, theirs_params[name].grad) for name, p in ours.named_parameters()]
    for what, mine, expected in pairs:
        np.testing.assert_allclose(mine.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=what)


# -- Conv1d padding='same' / 'valid' ----------------------------------------------------------

@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("kernel,dilation", [(3, 1), (4, 1), (2, 3)])
def test_conv1d_string_padding(padding, kernel, dilation):
    x = normal(2, 3, 9)
    layer = nn.Conv1d(3, 4, kernel, padding=padding, dilation=dilation)
    out = layer(md.tensor(x))
    span = dilation * (kernel - 1)
    assert out.shape == (2, 4, 9 if padding == "same" else 9 - span)
    assert layer.get_config()["padding"] == padding
    against_torch(nn.Conv1d(3, 4, kernel, padding=padding, dilation=dilation),
                  lambda torch: torch.nn.Conv1d(3, 4, kernel, padding=padding, dilation=dilation),
                  [x])


def test_conv1d_same_padding_refuses_a_stride():
    with pytest.raises(ValueError, match="Conv1d: padding='same' needs stride 1"):
        nn.Conv1d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="conv1d: padding must be an int, 'same' or 'valid'"):
        md.nn.functional.conv1d(md.tensor(normal(1, 3, 5)), md.tensor(normal(4, 3, 3)),
                                padding="full")


# -- ConvTranspose2d.forward(x, output_size=) -------------------------------------------------

@pytest.mark.parametrize("output_size", [(8, 10), [2, 4, 7, 12], (8, 11)])
def test_conv_transpose2d_output_size(output_size):
    x = normal(2, 3, 4, 4)
    options = dict(stride=(2, 3), padding=1, dilation=1)
    layer = nn.ConvTranspose2d(3, 4, 3, **options)
    out = layer(md.tensor(x), output_size=output_size)
    assert out.shape[2:] == tuple(output_size)[-2:]
    against_torch(nn.ConvTranspose2d(3, 4, 3, **options),
                  lambda torch: torch.nn.ConvTranspose2d(3, 4, 3, **options), [x],
                  call=lambda module, t: module(t, output_size=output_size))


def test_conv_transpose2d_refuses_an_output_size_it_cannot_reach():
    layer = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1)
    with pytest.raises(ValueError, match="valid sizes .* range from 7 to 8"):
        layer(md.tensor(normal(1, 3, 4, 4)), output_size=(9, 8))
    with pytest.raises(ValueError, match="2 or 4 elements"):
        layer(md.tensor(normal(1, 3, 4, 4)), output_size=(8,))


# -- MultiheadAttention(add_bias_kv=, add_zero_attn=) -----------------------------------------

@pytest.mark.parametrize("add_bias_kv,add_zero_attn", [(True, False), (False, True),
                                                       (True, True)])
@pytest.mark.parametrize("masks", [False, True])
def test_multihead_attention_extra_keys(add_bias_kv, add_zero_attn, masks):
    options = dict(add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)
    query, key = normal(5, 2, 8), normal(6, 2, 8)
    attn_mask = rng.random((5, 6)) > 0.7
    padding_mask = np.zeros((2, 6), bool)
    padding_mask[1, 4:] = True

    def call(module, q, k, v):
        if not masks:
            return module(q, k, v)
        lib = md if isinstance(q, md.Tensor) else __import__("torch")
        return module(q, k, v, attn_mask=lib.tensor(attn_mask),
                      key_padding_mask=lib.tensor(padding_mask))

    ours = nn.MultiheadAttention(8, 2, **options)
    assert (ours.bias_k is not None) == add_bias_kv
    assert ours.get_config()["add_zero_attn"] == add_zero_attn
    against_torch(ours, lambda torch: torch.nn.MultiheadAttention(8, 2, **options),
                  [query, key, key], call=call)


# -- LSTM(proj_size=) ---------------------------------------------------------------------------

@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)])
def test_lstm_with_projections(layers, bidirectional):
    options = dict(num_layers=layers, bidirectional=bidirectional, proj_size=3)
    ours = nn.LSTM(4, 5, **options)
    x = normal(6, 2, 4)
    out, (h, c) = ours(md.tensor(x))
    directions = 2 if bidirectional else 1
    assert out.shape == (6, 2, 3 * directions)
    assert h.shape == (layers * directions, 2, 3) and c.shape == (layers * directions, 2, 5)
    assert ours.weight_hh_l0.shape == (20, 3) and ours.weight_hr_l0.shape == (3, 5)
    against_torch(ours, lambda torch: torch.nn.LSTM(4, 5, **options), [x])


def test_lstm_with_projections_takes_initial_states_and_checks_them():
    with pytest.raises(ValueError, match=r"h_0 must have shape \(1, 2, 2\)"):
        nn.LSTM(4, 5, proj_size=2)(md.tensor(normal(3, 2, 4)),
                                   (md.tensor(normal(1, 2, 5)), md.tensor(normal(1, 2, 5))))
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(4, 5, proj_size=5)
    ours = nn.LSTM(4, 5, proj_size=2, batch_first=True)
    x, h0, c0 = normal(2, 3, 4), normal(1, 2, 2), normal(1, 2, 5)
    against_torch(ours, lambda torch: torch.nn.LSTM(4, 5, proj_size=2, batch_first=True),
                  [x, h0, c0], call=lambda module, x, h, c: module(x, (h, c)))
