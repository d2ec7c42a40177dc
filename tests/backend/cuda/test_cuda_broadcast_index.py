"""The 32-bit broadcast walk of the elementwise kernels (:mod:`minidl.backend.cuda.broadcast_index`).

The magic numbers divide exactly like ``//`` (on the host and in a kernel), collapsing axes keeps
the elements a walk reads, broadcasts of every shape pattern give NumPy's values on the device,
arrays too large for 32 bits take the 64-bit path with the same values (layout copies too), and
the compiled kernels contain no integer division at all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_helpers import backend, down, requires_cuda, up  # noqa: E402

from minidl.backend.cuda import broadcast_index  # noqa: E402
from minidl.backend.cuda.broadcast_index import (  # noqa: E402
    LIMIT_32, collapse_axes, magic_divisor, quotient, quotient_on_host,
)

pytestmark = requires_cuda
ROOT = Path(__file__).resolve().parents[3]
DIVISORS = [1, 2, 3, 5, 7, 10, 12, 255, 256, 641, 65535, 2 ** 20 + 1, 3 ** 19, LIMIT_32 - 1]


def dividends(n, rng):
    edges = [0, 1, n - 1, n, n + 1, 2 * n - 1, LIMIT_32 - 2, LIMIT_32 - 1]
    return [i for i in edges if 0 <= i < LIMIT_32] + list(rng.integers(0, LIMIT_32, 300))


@pytest.mark.parametrize("n", DIVISORS)
def test_the_magic_numbers_divide_every_31_bit_index_exactly(n):
    magic, shift = magic_divisor(n)
    assert 0 < magic < 2 ** 32 and (1 << shift) >= n
    for i in dividends(n, np.random.default_rng(n)):
        assert quotient_on_host(int(i), magic, shift) == int(i) // n, (i, n)


@cuda.jit
def divide_all(values, magic, shift, out):
    i = cuda.grid(1)
    if i < values.size:
        out[i] = quotient(values[i], magic, shift)


def test_a_kernel_divides_like_the_host():
    values = np.array([0, 1, 6, 7, 8, 13, 14, 2 ** 31 - 1, 123456789], np.uint32)
    out = cuda.device_array(values.size, np.uint32)
    magic, shift = magic_divisor(7)
    divide_all[1, values.size](cuda.to_device(values), np.uint32(magic), np.uint32(shift), out)
    np.testing.assert_array_equal(out.copy_to_host(), values // 7)


def test_magic_numbers_refuse_divisors_outside_31_bits():
    for n in (0, LIMIT_32):
        with pytest.raises(ValueError, match=f"divisor {n} outside"):
            magic_divisor(n)


@pytest.mark.parametrize("shape, strides, expected", [
    # a (1, C, 1, 1) bias on (N, C, H, W): height and width are one run for both operands
    ((4, 3, 5, 6), [(90, 30, 6, 1), (0, 1, 0, 0)], ((4, 3, 30), (90, 30, 1), (0, 1, 0))),
    # a (C,) bias on (N, C) stays two axes: the bias restarts on every row
    ((4, 3), [(3, 1), (0, 1)], ((4, 3), (3, 1), (0, 1))),
    # both contiguous: one axis; size-1 axes go
    ((2, 1, 3, 4), [(12, 12, 4, 1), (12, 12, 4, 1)], ((24,), (1,), (1,))),
    # a transposed operand merges nothing
    ((3, 4), [(1, 3), (4, 1)], ((3, 4), (1, 3), (4, 1))),
    ((1, 1), [(0, 0)], ((1,), (0,))),
])
def test_collapsing_merges_the_axes_every_operand_walks_as_one(shape, strides, expected):
    assert collapse_axes(shape, *strides) == expected


def test_collapsed_walks_read_the_same_offsets():
    # Every element's offset, by the full strides and by the collapsed walk (host arithmetic).
    shape, strides = (2, 3, 1, 4, 5), (0, 5, 0, 0, 1)
    sizes, walked = collapse_axes(shape, strides)
    full = [sum(i * s for i, s in zip(np.unravel_index(k, shape), strides))
            for k in range(int(np.prod(shape)))]
    short = [sum(i * s for i, s in zip(np.unravel_index(k, sizes), walked))
             for k in range(int(np.prod(sizes)))]
    assert full == short


SHAPE_PAIRS = [((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((2, 1, 4), (1, 3, 1)),
               ((4, 3, 2, 2), (1, 3, 1, 1)), ((5,), ()), ((2, 1, 3, 1, 2), (2, 4, 1, 3, 1))]


@pytest.mark.parametrize("a_shape, b_shape", SHAPE_PAIRS)
def test_broadcast_arithmetic_and_where_give_numpys_values(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    be = backend()
    np.testing.assert_array_equal(down(be.sub(up(a), up(b))), a - b)
    np.testing.assert_array_equal(down(be.mul(up(b), up(a))), b * a)
    np.testing.assert_array_equal(down(be.sub(up(b), 0.5)), b - np.float32(0.5))
    np.testing.assert_array_equal(down(be.where(up(a > 0), up(b), -1.0)),
                                  np.where(a > 0, b, np.float32(-1)))


def test_arrays_past_32_bits_take_the_64_bit_path_with_the_same_values(monkeypatch):
    # (The limit lowered: an array of 2**31 elements is 8 GB.)
    monkeypatch.setattr(broadcast_index, "LIMIT_32", 16)
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(4, dtype=np.float32)
    be = backend()
    np.testing.assert_array_equal(down(be.add(up(a), up(b))), a + b)
    np.testing.assert_array_equal(down(be.where(up(a > 5), up(b), 0.0)),
                                  np.where(a > 5, b, np.float32(0)))


@pytest.mark.parametrize("limit", [LIMIT_32, 40])
def test_layout_copies_walk_views_in_32_bits_or_64(monkeypatch, limit):
    # Transposes, broadcasts, casts and concatenations (slabs at an offset) copy through the
    # same walk; past the limit (lowered to 40 here: concatenating puts the second slab past
    # it) they take the 64-bit copy.
    monkeypatch.setattr(broadcast_index, "LIMIT_32", limit)
    be = backend()
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(36, dtype=np.float32).reshape(3, 3, 4)
    np.testing.assert_array_equal(down(be.transpose(up(a), (2, 0, 1))), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(down(be.broadcast_to(up(a[:1]), (3, 3, 4))),
                                  np.broadcast_to(a[:1], (3, 3, 4)))
    np.testing.assert_array_equal(down(be.astype(up(a), np.int32)), a.astype(np.int32))
    np.testing.assert_array_equal(down(be.concatenate([up(a), up(b)], 0)),
                                  np.concatenate([a, b]))
    np.testing.assert_array_equal(down(be.full((5, 2), 2.5, np.float32)),
                                  np.full((5, 2), 2.5, np.float32))


@pytest.mark.parametrize("limit", [LIMIT_32, 16])
def test_reductions_through_strides_walk_in_32_bits_or_move_the_axes_last(monkeypatch, limit):
    monkeypatch.setattr(broadcast_index, "LIMIT_32", limit)
    be = backend()
    values = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5) % 7
    for axes in [(0,), (0, 2, 3), (1, 3)]:
        np.testing.assert_array_equal(down(be.sum(up(values), axes)), values.sum(axis=axes))
        np.testing.assert_array_equal(down(be.max(up(values), axes)), values.max(axis=axes))


INTEGER_DIVISION = re.compile(r"\b(?:div|rem)\.[su]\d+")

PTX_SCRIPT = """
import sys
sys.path[:0] = ["scripts", "."]
import check_cuda_compile
check_cuda_compile.install_compile_only_cuda()
from numba import cuda, types
from minidl.backend.cuda import elementwise as e, movement
arrays, _, _, flat_arrays, _, _ = e._binary_kernels(e.add)
f32, u3, u32 = types.float32[::1], types.UniTuple(types.uint32, 3), types.uint32
for kernel, signature in [(flat_arrays, (f32, types.int64, f32, f32)),
                          (arrays, (f32, u32, u3, u3, u3, f32, u3, f32, u3)),
                          (movement._copy_strided, (u32, u3, u3, u3, f32, u32, u3, f32, u32, u3))]:
    print(cuda.compile_ptx(kernel.py_func, signature, cc=(8, 0))[0])
    print("== end of kernel ==")
"""


@pytest.mark.slow
def test_the_compiled_elementwise_kernels_never_divide_integers():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", PTX_SCRIPT], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=600)
    if result.returncode and "nvvm" in result.stderr.lower():
        pytest.skip("numba finds no NVVM here")
    assert result.returncode == 0, result.stderr
    kernels = result.stdout.split("== end of kernel ==")[:3]
    assert len(kernels) == 3 and all(".entry" in ptx for ptx in kernels), result.stdout
    for ptx in kernels:  # the flat add, the broadcasting add, the layout copy
        assert not INTEGER_DIVISION.findall(ptx), ptx
