"""The added activations, convolutions, norms and resampling ops compute only through the
backend primitives: on opaque arrays they give the reference backend's values and gradients bit
for bit, with no host copy beyond the inputs and the constants they are given."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.ops import activations as act
from minidl.ops import attention, conv1d, conv_transpose, instance_norms, recurrent, resample
from opaque_backend import NAME, OpaqueBackend
from test_backend_opaque import normal, reference_cpu, run  # noqa: F401  (the autouse fixture)

# name -> (function of (device, *tensors), input arrays, host constants the ops make: interpolation
# indices and weights depend on the sizes alone, are computed on the host and copied once each)
OPS = {
    "activations": (lambda d, x, w: act.leaky_relu(x, 0.1) + act.elu(x) + act.softplus(x, 2.0)
                    + act.silu(x) + act.mish(x) + act.hardsigmoid(x * 4) + act.hardswish(x * 4)
                    + act.prelu(x, w), [normal(2, 3, 4), normal(3)], 0),
    "conv1d_pool1d": (lambda d, x, w: conv1d.max_pool1d(conv1d.conv1d(x, w, padding=1), 2)
                      + conv1d.avg_pool1d(x[:, :2], 3, 1, 1)[..., ::2],
                      [normal(2, 3, 8), normal(2, 3, 3)], 0),
    "conv_transpose2d": (lambda d, x, w, b: conv_transpose.conv_transpose2d(x, w, b, stride=2),
                         [normal(2, 3, 4, 4), normal(3, 2, 3, 3), normal(2)], 0),
    "norms": (lambda d, x, w, b: instance_norms.group_norm(x, 3, w, b)
              + instance_norms.instance_norm(x, weight=w, bias=b),
              [normal(2, 6, 5), normal(6), normal(6)], 0),
    "attention": (lambda d, q, k, v: attention.scaled_dot_product_attention(q, k, v)
                  + attention.scaled_dot_product_attention(q, k, v, is_causal=True),
                  [normal(2, 4, 3), normal(2, 4, 3), normal(2, 4, 5)], 1),  # the causal mask
    "recurrent": (lambda d, x, h, w_ih, w_hh, b, w3, w4, b4: (
        recurrence_sum("GRU", x, [h], w_ih, w_hh, b, b)
        + recurrence_sum("LSTM", x, [h, h], w3, w4, b4, b4, reverse=True)
        + recurrence_sum("RNN", x, [h], w_ih[:2], w_hh[:2, :], b[:2], b[:2])),
        [normal(4, 3, 2), normal(3, 2), normal(6, 2), normal(6, 2), normal(6), normal(8, 2),
         normal(8, 2), normal(8)], 0),
    "resample": (lambda d, x: resample.adaptive_max_pool2d(x, (2, 3)).sum()
                 + resample.interpolate(x, scale_factor=2).sum()
                 + resample.interpolate(x, size=(3, 7), mode="bilinear").sum(),
                 [normal(2, 2, 5, 4)], 4 + 2 + 2 * 3),  # adaptive max: the windows' rows,
    # columns, scan places and a row count; nearest: an index array per axis; bilinear: per
    # axis two index arrays and one weight table
}


def recurrence_sum(mode, x, states, *weights, reverse=False):
    return recurrent.recurrence(mode, x, states, *weights, reverse=reverse).sum()


@pytest.mark.parametrize("name", sorted(OPS))
def test_values_and_gradients_match_the_reference_on_opaque_arrays(name):
    expected, expected_inputs = run(name, "cpu", OPS)
    OpaqueBackend.reset()
    out, inputs = run(name, NAME, OPS)
    assert OpaqueBackend.violations == []
    assert OpaqueBackend.transfers["to_numpy"] == 0, OpaqueBackend.transfers
    constants = OPS[name][2]
    assert OpaqueBackend.transfers["from_numpy"] == len(inputs) + 1 + constants, \
        OpaqueBackend.transfers
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    for tensor, reference in zip(inputs, expected_inputs):
        np.testing.assert_array_equal(tensor.grad.numpy(), reference.grad.numpy())


OPTIMIZERS = {
    "RMSprop": lambda p: optim.RMSprop(p, lr=1e-2, momentum=0.9, centered=True,
                                       weight_decay=0.1),
    "Adagrad": lambda p: optim.Adagrad(p, lr=0.1, lr_decay=0.01),
    "Adadelta": lambda p: optim.Adadelta(p, weight_decay=0.1),
    "NAdam": lambda p: optim.NAdam(p, lr=1e-2, decoupled_weight_decay=True, weight_decay=0.1),
    "RAdam": lambda p: optim.RAdam(p, lr=1e-2, weight_decay=0.1),
}


INPUTS = normal(6, 4)


def train_steps(name, device, steps=8):
    md.manual_seed(0)
    model = nn.Linear(4, 3)
    model.to(device)
    opt = OPTIMIZERS[name](model.parameters())
    x = md.tensor(INPUTS).to(device)
    OpaqueBackend.reset()
    for _ in range(steps):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        nn.utils.clip_grad_value_(model.parameters(), 0.05)
        opt.step()
    return model


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_added_optimizers_and_clipping_step_on_opaque_arrays_with_no_copy(name):
    expected = train_steps(name, "cpu")
    model = train_steps(name, NAME)
    assert OpaqueBackend.violations == []
    assert OpaqueBackend.transfers["to_numpy"] == 0, OpaqueBackend.transfers
    for (key, value), reference in zip(model.state_dict().items(),
                                       expected.state_dict().values()):
        np.testing.assert_array_equal(value, reference, err_msg=key)
