"""The gradient bucket kernels against their NumPy reference, the host bucket of data-parallel
training: packing (times a weight) and unpacking (divided by the total weight) bit for bit,
across more gradients than one launch takes, with empty and missing ones."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_helpers import down, requires_cuda, up  # noqa: E402

import minidl as md  # noqa: E402
from minidl.nn.parallel.buckets import _Bucket  # noqa: E402

pytestmark = requires_cuda


def host_bucket(shapes, dtype, seed):
    """A host bucket over CPU parameters of ``shapes`` whose gradients are random (the third
    one has none)."""
    rng = np.random.default_rng(seed)
    params = []
    for k, shape in enumerate(shapes):
        param = md.zeros(shape, dtype=dtype, requires_grad=True)
        if k != 2:
            param.grad = md.tensor(rng.standard_normal(shape).astype(dtype))
        params.append(param)
    return _Bucket(params, np.dtype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weight", [1.0, 0.75, 1 / 3])
def test_pack_and_unpack_equal_the_host_bucket_bit_for_bit(dtype, weight):
    from minidl.backend.cuda import gradient_buckets
    from minidl.backend.cuda.movement import zeros
    # 40 gradients: two launches of the table; one empty, one missing (zeros in the bucket).
    shapes = [(3,), (2, 5), (4,), (0,), (7,)] + [(k % 4 + 1,) for k in range(35)]
    bucket = host_bucket(shapes, dtype, seed=len(shapes))
    present = [i for i, p in enumerate(bucket.params) if p.grad is not None]
    values = zeros((int(bucket.offsets[-1]),), dtype)
    gradient_buckets.pack(values, [up(bucket.params[i].grad.numpy()) for i in present],
                          [bucket.offsets[i] for i in present], weight)
    bucket.pack(weight)
    expected = bucket.buffer[:bucket.offsets[-1]].copy()
    np.testing.assert_array_equal(down(values), expected)

    # A "sum over the ranks" both sides agree on, then the division by the summed weight.
    total = dtype(weight) + dtype(0.5)
    bucket.buffer[-1] = total
    grads = gradient_buckets.unpack(values, [bucket.params[i].shape for i in present],
                                    [bucket.offsets[i] for i in present], total)
    bucket.unpack()
    for i, grad in zip(present, grads):
        assert grad.dtype == dtype
        np.testing.assert_array_equal(down(grad), bucket.params[i].grad.numpy())


def test_a_gradient_of_another_dtype_is_refused():
    from minidl.backend.cuda import gradient_buckets
    from minidl.backend.cuda.movement import zeros
    with pytest.raises(TypeError, match="float64 gradient does not fit a float32 bucket"):
        gradient_buckets.pack(zeros((4,), np.float32), [up(np.zeros(4))], [0], 1.0)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32])
def test_without_a_divisor_unpack_copies_what_pack_packed(dtype):
    from minidl.backend.cuda import gradient_buckets
    from minidl.backend.cuda.movement import zeros
    arrays = [np.arange(6, dtype=dtype).reshape(2, 3) - 2, np.array([7], dtype), np.zeros(0, dtype)]
    flat = zeros((7,), dtype)
    gradient_buckets.pack(flat, up(arrays), [0, 6, 7], 1)
    np.testing.assert_array_equal(down(flat), np.concatenate([a.ravel() for a in arrays]))
    copies = gradient_buckets.unpack(flat, [a.shape for a in arrays], [0, 6, 7])
    for copy, array in zip(copies, arrays):
        assert copy.dtype == dtype and copy.shape == array.shape
        np.testing.assert_array_equal(down(copy), array)
