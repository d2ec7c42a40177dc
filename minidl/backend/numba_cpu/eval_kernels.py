"""Max pooling for evaluation only, writing into buffers the compiled inference plan owns.

The training kernel (:mod:`.pool`) also records each window's argmax, the cell its gradient goes
back to, and allocates both results. A compiled plan (:mod:`minidl.inference`) has no backward
pass and knows every shape when it is built. For the usual 2x2 pool, the kernel here computes
only the maxima, straight into the plan's buffer, with the ReLU that usually follows applied on
the way out (the plan moves a ReLU after the pool: max(relu a, relu b) = relu(max(a, b))); its
input may be a convolution's output rows with unused columns on the right. Other geometries run
the training kernel into plan-owned buffers.

They run this backend's ``plan_max_pool2d`` steps (:mod:`.plan_steps`); other backends compose
that primitive of ``max_pool2d_forward`` and ``relu``. ``tests/backend/test_eval_kernels_agree.py``
checks them against that composition.
Compiled on first call (``cache=True``), never at import.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .pool import _max_pool_serial

__all__ = ["max_pool2d_values_", "max_pool2x2_values_"]


@njit(cache=True)
def max_pool2x2_values_(x, out, relu):
    """Write the 2x2 window maxima of ``x`` (N, C, H, W) into ``out`` (N, C, OH, OW), then ReLU
    if ``relu``: the usual ``MaxPool2d(2)`` (stride 2, no padding, every window inside the
    image, so the four taps are spelled out with no bounds tests, and columns of ``x`` past
    2·OW are never read). A NaN in a window gives NaN, as in the training kernel."""
    n, channels = x.shape[0], x.shape[1]
    out_h, out_w = out.shape[2], out.shape[3]
    for b in range(n):
        for c in range(channels):
            for oh in range(out_h):
                for ow in range(out_w):
                    a, d = x[b, c, 2 * oh, 2 * ow], x[b, c, 2 * oh, 2 * ow + 1]
                    e, f = x[b, c, 2 * oh + 1, 2 * ow], x[b, c, 2 * oh + 1, 2 * ow + 1]
                    best = a if (a > d or a != a) else d
                    best = best if (best > e or best != best) else e
                    best = best if (best > f or best != best) else f
                    out[b, c, oh, ow] = 0.0 if relu and best < 0 else best
    return out


def max_pool2d_values_(x, out, scratch, geometry, relu) -> None:
    """Window maxima of ``x`` (N, C, H, W) into ``out`` (N, C, OH, OW), then ReLU if ``relu``,
    for any window geometry (kh, kw, sh, sw, ph, pw, dh, dw): the training kernel, whose argmax
    goes to ``scratch`` (int64, out's shape), a buffer the plan owns and never reads."""
    _max_pool_serial(x, out, scratch, *geometry, False)  # one sample: no threads
    if relu:
        np.maximum(out, 0, out=out)
