"""Gradients of the added activations, convolutions, per-sample norms and resampling ops
against finite differences in float64, on the Numba backend and the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from minidl.ops import activations as act
from minidl.ops import conv1d, conv_transpose, instance_norms, resample
from ops_helpers import check_gradients, cpu_backend, distinct, normal  # noqa: F401

# name -> (function of tensors, input arrays). Inputs of the piecewise ops come from
# ``distinct`` (values 0.1 apart, none at a kink); the kinks themselves are at ±3 and 0, which
# 0.05 + k·0.1 never hits.
CASES = {
    "leaky_relu": (lambda x: act.leaky_relu(x, 0.2), [distinct(0, (3, 4))]),
    "elu": (lambda x: act.elu(x, 0.7), [distinct(1, (3, 4))]),
    "softplus": (lambda x: act.softplus(x, 1.5, 2.0), [distinct(2, (3, 4)) * 3]),
    "silu": (act.silu, [normal(3, (3, 4)) * 3]),
    "mish": (act.mish, [normal(4, (3, 4)) * 3]),
    "hardsigmoid": (act.hardsigmoid, [distinct(5, (5, 6)) * 2]),
    "hardswish": (act.hardswish, [distinct(6, (5, 6)) * 2]),
    "prelu": (act.prelu, [distinct(7, (2, 3, 4)), np.array([0.1, -0.3, 0.5])]),
    "prelu_shared": (act.prelu, [distinct(8, (2, 3)), np.array([0.25])]),
    "conv1d": (lambda x, w, b: conv1d.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
               [normal(9, (2, 4, 9)), normal(10, (6, 2, 3)), normal(11, (6,))]),
    "pool1d": (lambda x: conv1d.max_pool1d(x, 3, 2, 1) + conv1d.avg_pool1d(x, 3, 2, 1),
               [distinct(12, (2, 2, 8))]),
    "conv_transpose2d": (lambda x, w, b: conv_transpose.conv_transpose2d(
        x, w, b, stride=2, padding=1, output_padding=1, groups=2, dilation=1),
        [normal(13, (2, 4, 3, 3)), normal(14, (4, 1, 3, 2)), normal(15, (2,))]),
    "group_norm": (lambda x, w, b: instance_norms.group_norm(x, 2, w, b),
                   [normal(16, (2, 4, 3)), normal(17, (4,)), normal(18, (4,))]),
    "instance_norm": (lambda x, w, b: instance_norms.instance_norm(x, weight=w, bias=b),
                      [normal(19, (2, 3, 4)), normal(20, (3,)), normal(21, (3,))]),
    "adaptive_max_pool2d": (lambda x: resample.adaptive_max_pool2d(x, (2, 3)),
                            [distinct(22, (2, 2, 5, 4))]),
    "upsample_nearest": (lambda x: resample.interpolate(x, scale_factor=2),
                         [normal(23, (1, 2, 3, 2))]),
    "upsample_bilinear": (lambda x: resample.interpolate(x, size=(5, 3), mode="bilinear"),
                          [normal(24, (1, 2, 3, 4))]),
    "upsample_bilinear_corners": (lambda x: resample.interpolate(
        x, scale_factor=1.5, mode="bilinear", align_corners=True), [normal(25, (1, 1, 3, 4))]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_finite_differences(name, cpu_backend):
    f, arrays = CASES[name]
    check_gradients(f, *arrays, rtol=1e-5, atol=1e-7)


def test_softplus_is_finite_far_from_zero():
    import minidl as md
    x = md.tensor(np.array([-800.0, -30.0, 0.0, 30.0, 800.0]), dtype=np.float64)
    y = act.softplus(x, threshold=1e9).numpy()  # no linear shortcut: the stable formula alone
    assert np.isfinite(y).all() and y[0] == 0.0 and y[-1] == 800.0
    np.testing.assert_allclose(y[2], np.log(2.0))
