"""The CUDA kernels against the NumPy reference, on shapes chosen to reach their edge cases:
GEMM edge tiles and broadcast batches, reductions over leading axes and rows longer than a
block, argmax ties and nan, overlapping and ceil-mode pooling, dilated im2col, the Philox counter
wrapping, every advanced-index form, duplicate scatter-adds. The optimizer updates and the
uniform random stream must equal the CPU bit for bit (the contract's rounding order); float math
elsewhere agrees to the dtype's precision.

Every primitive of the contract is also run against hand-worked values in
tests/backend/test_backend_primitive_list.py, which includes this backend when CUDA is present.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_helpers import backend, down, requires_cuda, up  # noqa: E402

from minidl.backend.primitives import ALL_PRIMITIVES, MATH_FUNCTIONS  # noqa: E402
from minidl.backend.reference import ReferenceBackend  # noqa: E402

pytestmark = requires_cuda
REF = ReferenceBackend()
rng = np.random.default_rng(7)


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def same(name, *arguments, exact=False, rtol=1e-5, atol=1e-6):
    """Run primitive ``name`` on the reference and on CUDA; compare every output."""
    expected = getattr(REF, name)(*arguments)
    actual = down(getattr(backend(), name)(*up(arguments)))
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    assert len(actual) == len(expected), name
    for got, want in zip(actual, expected):
        if want is None:
            assert got is None, name
            continue
        want = np.asarray(want)
        assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, got.dtype,
                                                                     want.shape, want.dtype)
        if exact:
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


def test_numbas_small_grid_warning_is_silenced():
    # Every small tensor makes a small grid; numba-cuda warns about each launch with its own
    # warning class (not numba's), so the filter must match the message. The simulator never
    # warns, so the warning is raised here as a GPU launch raises it, in a fresh process: the
    # filter is installed when the backend is first imported, which pytest's per-test warning
    # capture would undo for later tests. On a GPU numba-cuda wraps the message in terminal
    # colour codes; the second warning is the message as it arrives there.
    code = (
        "import warnings\n"
        "from numba.cuda.core import errors\n"
        "import minidl.backend\n"
        "minidl.backend.get_backend('cuda')\n"
        "grid = 'Grid size 1 will likely result in GPU under-utilization due to low occupancy.'\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.warn(errors.NumbaPerformanceWarning(grid))\n"
        "    warnings.warn(errors.NumbaPerformanceWarning('\\x1b[1m' + grid + '\\x1b[0m'))\n"
        "    warnings.warn(errors.NumbaPerformanceWarning('another performance note'))\n"
        "print([str(w.message) for w in caught])\n")
    from minidl.backend.cuda.device import SIMULATED
    root = str(Path(__file__).resolve().parents[3])
    environment = dict(os.environ, NUMBA_ENABLE_CUDASIM="1" if SIMULATED else "0",
                       PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    shown = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout.strip())
    assert shown == "['another performance note']"


def test_the_backend_implements_every_primitive():
    cls = type(backend())
    from minidl.backend.primitives import Backend
    missing = [p for p in ALL_PRIMITIVES if getattr(cls, p) is getattr(Backend, p)]
    assert missing == []


@pytest.mark.parametrize("shapes", [((5, 7), (7, 9)), ((2, 1, 5, 5), (5, 6)), ((3, 1, 4, 6),
                                                                             (2, 6, 3)),
                                    ((1, 5), (5, 1)), ((3, 0), (0, 2))])
def test_batched_gemm_matches_numpy_across_edge_tiles_and_broadcast_batches(shapes):
    a, b = normal(*shapes[0]), normal(*shapes[1])
    same("matmul", a, b, rtol=1e-5, atol=1e-5)
    same("matmul", a.astype(np.float64), b.astype(np.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("transpose_a, transpose_b", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("shapes", [((5, 7), (7, 9)), ((2, 3, 5, 4), (4, 6)), ((3, 1, 4, 6),
                                                                             (2, 6, 3))])
def test_gemm_reads_transposed_operands_in_place(shapes, transpose_a, transpose_b):
    # The operands are stored transposed; the flags make the GEMM read them as their transposes
    # (BLAS's transa/transb) with no copy launched.
    from minidl.backend.cuda.device import transfers
    a, b = normal(*shapes[0]), normal(*shapes[1])
    stored_a = np.swapaxes(a, -1, -2).copy() if transpose_a else a
    stored_b = np.swapaxes(b, -1, -2).copy() if transpose_b else b
    on_device = up((stored_a, stored_b))
    product = backend().matmul(*on_device, transpose_a=transpose_a, transpose_b=transpose_b)
    np.testing.assert_allclose(down(product), np.matmul(a, b), rtol=1e-5, atol=1e-5)
    assert REF.matmul(stored_a, stored_b, transpose_a, transpose_b).shape == product.shape
    with pytest.raises(ValueError, match="do not align"):
        backend().matmul(*on_device, transpose_a=not transpose_a, transpose_b=transpose_b)


STRIDED_PRODUCTS = [
    # a convolution's three products (2 groups, 4 images of 7 pixels, tiles' edges crossed)
    ((2, 1, 3, 5), (2, 5, 4, 7), dict(b_axes=(0, 2, 1, 3), out_axes=(1, 0, 2, 3))),
    ((2, 5, 4, 7), (4, 2, 3, 7), dict(a_axes=(0, 2, 1, 3), b_axes=(1, 0, 3, 2), sum_axis=1,
                                      out_axes=(0, 2, 1))),
    ((2, 1, 3, 5), (4, 2, 3, 7), dict(transpose_a=True, b_axes=(1, 0, 2, 3),
                                      out_axes=(0, 2, 1, 3))),
    # results stored with the batch last (a copy after), operands whose last axis is a batch
    # axis (a copy before), four batch axes that do not merge (one grid per leading index)
    ((2, 3, 4, 5), (5, 1), dict(out_axes=(2, 3, 0, 1))),
    ((3, 2, 5), (3, 5, 2), dict(a_axes=(1, 0, 2), b_axes=(2, 0, 1), transpose_b=True)),
    ((2, 3, 2, 3, 1, 5), (5, 9), dict(a_axes=(0, 2, 1, 3, 4, 5))),
    ((3, 1, 4), (3, 1, 5), dict(sum_axis=0, transpose_a=True)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape, b_shape, keywords", STRIDED_PRODUCTS)
def test_strided_batched_gemm_matches_the_reference(a_shape, b_shape, keywords, dtype):
    a, b = normal(*a_shape, dtype=dtype), normal(*b_shape, dtype=dtype)
    expected = REF.matmul(a, b, **keywords)
    product = down(backend().matmul(*up((a, b)), **keywords))
    assert product.shape == expected.shape and product.dtype == dtype
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(product, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("blocking", ["LARGE", "SMALL"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False),
                                                      (False, True), (True, True)])
@pytest.mark.parametrize("m, k, n", [(17, 9, 33), (20, 12, 36), (1, 7, 1)])
def test_both_tile_sizes_agree_with_the_reference_for_every_flag_pair(
        monkeypatch, m, k, n, transpose_a, transpose_b, dtype, blocking):
    # Shapes past the edges of the tiles (on the simulator 16 x 16 and 8 x 8, with 4 threads;
    # on a GPU 128 x 128 and 64 x 64); (20, 12, 36) is fetched as aligned groups of 4, the odd
    # sizes element by element. A batch of 2 matrices against one shared A checks the strides.
    import minidl.backend.cuda.gemm_tiles as tiles
    import minidl.backend.cuda.matmul as gemm
    chosen = getattr(tiles, blocking)
    monkeypatch.setattr(gemm, "LARGE", chosen)
    monkeypatch.setattr(gemm, "SMALL", chosen)
    a, b = normal(m, k, dtype=dtype), normal(2, k, n, dtype=dtype)
    stored_a = a.T.copy() if transpose_a else a
    stored_b = np.swapaxes(b, 1, 2).copy() if transpose_b else b
    product = backend().matmul(*up((stored_a, stored_b)), transpose_a=transpose_a,
                               transpose_b=transpose_b)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(down(product), a @ b, rtol=tolerance, atol=tolerance)
    aligned = ((m if transpose_a else k) % 4 == 0, (k if transpose_b else n) % 4 == 0)
    if 1 not in (m, n):
        # A one-row A or one-column B is stored both row- and column-major, and which flag the
        # GEMM reads it with follows the stride its size-1 axis was given (numba-cuda's device
        # arrays and its simulator give different ones): only the other shapes pin the kernel.
        key = (chosen, np.dtype(dtype), transpose_a, transpose_b) + aligned + (True,)
        assert key in tiles._kernels


@pytest.mark.slow
def test_the_gpus_gemm_tiles_compute_the_product_on_the_simulator(monkeypatch):
    # The simulator normally runs tiles of 4 threads; here the GPU's 128 x 128 tiles of 8 x 8
    # patches and 64 x 64 tiles of 4 x 4 (256 threads each) run on it, edge tiles, aligned and
    # unaligned fetches and both load orders (a transposed operand) included.
    import minidl.backend.cuda.gemm_tiles as tiles
    import minidl.backend.cuda.matmul as gemm
    monkeypatch.setattr(tiles, "_kernels", {})
    monkeypatch.setattr(gemm, "_LARGE_TILES_FILL_THE_GPU", 1)
    for blocking in (tiles.Tiles(128, 128, 8, 8, 8), tiles.Tiles(64, 64, 16, 4, 4)):
        monkeypatch.setattr(gemm, "LARGE", blocking)
        monkeypatch.setattr(gemm, "SMALL", blocking)
        for m, k, n in ((130, 20, 129), (132, 24, 136)):
            a, b = normal(m, k), normal(k, n)
            for transpose_a, transpose_b in ((True, False), (False, True)):
                stored_a = a.T.copy() if transpose_a else a
                stored_b = b.T.copy() if transpose_b else b
                product = gemm.matmul(*up((stored_a, stored_b)), transpose_a, transpose_b)
                np.testing.assert_allclose(down(product), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, True), (1, False), (2, False),
                                            ((0, 2), True), ((1, 2), False)])
def test_tree_reductions_match_numpy(axis, keepdims):
    x = normal(2, 21, 3)  # axis 1 is longer than a serial row: the tree path
    for name in ("sum", "max"):
        same(name, x, axis, keepdims)
    same("sum", (x > 0), axis, keepdims, exact=True)  # bool counts as int64
    same("max", x.astype(np.int32), axis, keepdims, exact=True)


@pytest.mark.parametrize("shape_of, axis", [(lambda length: (length,), None),
                                             (lambda length: (3, length), 1),
                                             (lambda length: (2, 3, -(-length // 3)), (1, 2))])
def test_few_long_rows_are_reduced_in_two_levels(shape_of, axis):
    # Longer than two chunks, fewer rows than FEW_ROWS: a block per chunk, then per row. The
    # chunk is 32 elements on the simulator and 4,096 on a GPU, so the shapes follow it.
    from minidl.backend.cuda.reduction import CHUNK, FEW_ROWS
    shape = shape_of(2 * CHUNK + 37)
    x = normal(*shape)
    length = x.size if axis is None else math.prod(shape[1:]) if axis == (1, 2) else shape[axis]
    assert length > 2 * CHUNK and x.size // length < FEW_ROWS
    for name in ("sum", "max"):
        same(name, x, axis, False, rtol=1e-5, atol=1e-5)
    same("sum", np.ones(shape, np.int64), axis, False, exact=True)


def test_arg_reductions_take_the_first_of_ties_and_nan_wins():
    x = np.array([[1.0, 3.0, 3.0, -1.0] * 5, [2.0, np.nan, 5.0, np.nan] * 5], np.float32)
    same("argmax", x, 1, False, exact=True)
    same("argmax", x, None, False, exact=True)
    same("argmax", x.T.copy(), 0, True, exact=True)
    with pytest.raises(ValueError):
        backend().max(up(np.zeros((2, 0), np.float32)), 1)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # nan from negative ** fraction, as NumPy
@pytest.mark.parametrize("fn", ["add", "sub", "mul", "div", "power", "maximum", "minimum",
                                "floor_divide", "remainder", "equal", "less"])
def test_binary_math_broadcasts_and_follows_numpy_dtypes(fn):
    a, b = normal(3, 1, 4), normal(5, 1) + 0.5
    same(fn, a, b, rtol=1e-5, atol=1e-6)
    same(fn, a, 2.5)
    same(fn, 3, b)
    same(fn, np.arange(-6, 6).reshape(3, 4), np.array([3, 2, 5, 7]), exact=True)
    same(fn, a.astype(np.float64), np.float64(-1.5), rtol=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # x / 0 on the simulator's NumPy scalars
def test_floor_division_and_remainder_follow_pythons_signs_including_zero_divisors():
    a = np.array([7.0, -7.0, 7.0, -7.0, 0.0, 1.0, -1.0, 5.5, -5.5, 1e300, np.inf, np.nan, 5.0,
                  5.0, -5.0], np.float64)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 0.0, 0.5, 2.0, 3e-10, 2.0, 2.0, np.inf,
                  -np.inf, np.inf], np.float64)
    with np.errstate(all="ignore"):
        same("floor_divide", a, b, exact=True)
        same("remainder", a, b, exact=True)
        ints = (np.array([7, -7, 7, -7, 5]), np.array([2, 2, -2, -2, 0]))
        same("floor_divide", *ints, exact=True)
        same("remainder", *ints, exact=True)


@pytest.mark.parametrize("fn", ["sigmoid", "relu", "abs"])  # exp, log, sqrt: math_function
def test_unary_math_matches_numpy_including_domain_edges(fn):
    x = np.array([-800.0, -3.0, -0.5, 0.0, 0.5, 2.0, 800.0, np.inf, -np.inf, np.nan], np.float32)
    with np.errstate(all="ignore"):
        same(fn, x, rtol=1e-6, atol=1e-7)
        same(fn, x.astype(np.float64), rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("name", MATH_FUNCTIONS)
def test_math_functions_match_numpy_including_domain_edges_and_poles(name):
    x = np.array([-800.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 800.0, np.inf, -np.inf,
                  np.nan], np.float32)
    with np.errstate(all="ignore"):
        same("math_function", x, name, rtol=1e-6, atol=1e-7)
        same("math_function", x.astype(np.float64), name, rtol=1e-14, atol=1e-300)


def test_where_and_the_relu_gradient():
    x, y = normal(4, 3), normal(3)
    same("where", x > 0, x, y, exact=True)
    same("where", x > 0, x, 0.0, exact=True)
    same("maximum", x > 0, y > 0, exact=True)  # "or" of bools, as composed.logical_or uses it
    same("minimum", x > 0, True, exact=True)  # and "and"
    same("relu_backward", x, y, exact=True)


@pytest.mark.parametrize("index", [
    (1,), (slice(None, None, -2),), (Ellipsis, 1), (None, slice(1, 3), None, 0),
    (np.array([2, 0, 2]),), (slice(None), np.array([[0, 1], [2, -1]])),
    (np.array([0, 2]), slice(None), np.array([1, 3])),
    (np.array([[1], [0]]), 1, np.array([0, 2, 3])),
])
def test_indexing_reads_writes_and_scatter_adds_as_numpy(index):
    x = normal(3, 4, 5)
    same("getitem", x, index, exact=True)
    selection = x[index]
    same("index_add", x.shape, index, np.ones_like(selection), np.float32, exact=True)
    target = x.copy()
    REF.setitem_(target, index, -1.0)
    device = up(x)
    backend().setitem_(device, up(index), -1.0)
    np.testing.assert_array_equal(down(device), target)


def test_index_add_accumulates_repeated_indices():
    rows = np.array([1, 3, 1, 1, 0])
    values = normal(5, 4)
    same("index_add", (4, 4), (rows,), values, np.float32, rtol=1e-6)


def test_out_of_range_indices_raise_index_errors_naming_them():
    table = up(normal(4, 3))
    # take and one_hot check on the device: raised at the next synchronisation (the copy back)
    with pytest.raises(IndexError, match="index 4 is out of range for 4 rows"):
        down(backend().take(table, up(np.array([0, 4, 9]))))
    with pytest.raises(IndexError, match="index -1"):
        down(backend().take(table, up(np.array([-1]))))
    with pytest.raises(IndexError, match="index 7 is out of range for 5 classes"):
        down(backend().one_hot(up(np.array([1, 7])), 5, np.float32))
    with pytest.raises(IndexError):
        backend().getitem(table, (up(np.array([0, 5])),))
    with pytest.raises(ValueError, match="target 3 is out of range for 3 classes"):
        # checked on the device: raised at the next synchronisation (here: the copy back)
        down(backend().softmax_cross_entropy_forward(up(normal(2, 3)), up(np.array([0, 3])),
                                                     -100, 0.0))


def test_take_one_hot_nonzero_concatenate():
    table, rows = normal(6, 2, 3), np.array([[5, 0], [2, 2]])
    same("take", table, rows, exact=True)
    same("one_hot", np.array([[0, 4], [2, 1]]), 5, np.float32, exact=True)
    mask = normal(3, 700) > 0.5  # more than one scan chunk
    same("nonzero", mask, exact=True)
    same("nonzero", np.zeros((2, 2), bool), exact=True)
    parts = [normal(2, 3), normal(2, 1), normal(2, 2)]
    same("concatenate", parts, 1, exact=True)
    same("transpose", normal(2, 3, 4), (2, 0, 1), exact=True)
    same("broadcast_to", normal(3, 1), (2, 3, 4), exact=True)
    same("astype", normal(2, 3) * 10, np.int32, exact=True)


@pytest.mark.parametrize("geometry", [((3, 3), (1, 1), (1, 1), (1, 1)),
                                      ((2, 3), (2, 1), (0, 1), (2, 1)),
                                      ((3, 2), (2, 3), (1, 0), (1, 2))])
def test_im2col_and_its_adjoint_col2im(geometry):
    x = normal(2, 3, 7, 6)
    same("im2col", x, *geometry, exact=True)
    cols = REF.im2col(x, *geometry)
    same("col2im", normal(*cols.shape), x.shape, *geometry, rtol=1e-6)


@pytest.mark.parametrize("pool, disjoint", [(((2, 2), (2, 2), (0, 0), (1, 1), False), True),
                                            (((2, 3), (3, 5), (1, 1), (1, 2), True), True),
                                            (((3, 3), (3, 3), (1, 0), (1, 1), True), True),
                                            (((3, 3), (2, 2), (1, 1), (1, 1), True), False)])
def test_max_pool_backward_from_the_devices_own_argmax(pool, disjoint):
    # Windows that do not overlap (with padding, dilation gaps, ceil_mode's partial windows)
    # and windows that do take the gather path: every input cell sums the gradients of the
    # windows it won (one at most without overlap), or gets an exact 0.
    from minidl.backend.cuda.conv_pool import PoolArgmax
    x = normal(2, 2, 7, 8)
    x[0, 0, :2, :2] = 1.0  # ties inside a window
    if not disjoint:
        x[1, 1, 2, 2] = 9.0  # one cell winning several overlapping windows
    out, argmax = REF.max_pool2d_forward(x, *pool)
    grad = normal(*out.shape)
    _, device_argmax = backend().max_pool2d_forward(up(x), *pool)
    assert isinstance(device_argmax, PoolArgmax)
    assert device_argmax.geometry == sum(pool[:4], ())
    np.testing.assert_array_equal(down(device_argmax), argmax)
    got = down(backend().max_pool2d_backward(up(grad), device_argmax, x.shape))
    np.testing.assert_array_equal(got, REF.max_pool2d_backward(grad, argmax, x.shape))


@pytest.mark.parametrize("pool", [((2, 2), (2, 2), (0, 0), (1, 1), False),
                                  ((3, 3), (2, 2), (1, 1), (1, 1), True),
                                  ((3, 2), (1, 2), (1, 0), (2, 1), True)])
def test_max_and_average_pooling_forward_and_backward(pool):
    kernel, stride, padding, dilation, ceil_mode = pool
    x = normal(2, 2, 7, 8)
    x[0, 0, :2, :2] = 1.0  # ties inside a window
    same("max_pool2d_forward", x, *pool, exact=True)
    out, argmax = REF.max_pool2d_forward(x, *pool)
    same("max_pool2d_backward", normal(*out.shape), argmax, x.shape, exact=True)
    if dilation == (1, 1):
        for include in (False, True):
            same("avg_pool2d_forward", x, kernel, stride, padding, ceil_mode, include,
                 rtol=1e-6)
            grad = normal(*REF.avg_pool2d_forward(x, kernel, stride, padding, ceil_mode,
                                                   include).shape)
            same("avg_pool2d_backward", grad, x.shape, kernel, stride, padding, ceil_mode,
                 include, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_softmax_cross_entropy_reduces_like_the_reference(reduction):
    # More rows than the simulator's grid has blocks (4): each block sums several rows, and the
    # blocks' partial sums are summed again.
    x = normal(10, 4)
    targets = np.arange(10) % 4
    targets[::7] = -100
    grad = np.array(0.75, np.float32)
    for smoothing in (0.0, 0.1):
        same("softmax_cross_entropy_forward", x, targets, -100, smoothing, reduction,
             rtol=1e-5, atol=1e-5)
        same("softmax_cross_entropy_backward", grad, REF.log_softmax(x, 1), targets, -100,
             smoothing, reduction, rtol=1e-5, atol=1e-6)
    ignored = np.full(10, -100)  # no rows: the sum is 0, the mean nan; the gradient 0
    loss, log_probs = backend().softmax_cross_entropy_forward(up(x), up(ignored), -100, 0.0,
                                                              reduction)
    np.testing.assert_array_equal(down(loss), REF.softmax_cross_entropy_forward(
        x, ignored, -100, 0.0, reduction)[0])
    np.testing.assert_array_equal(down(backend().softmax_cross_entropy_backward(
        up(grad), log_probs, up(ignored), -100, 0.0, reduction)), np.zeros_like(x))
    same("softmax_cross_entropy_forward", normal(0, 4), np.zeros(0, np.int64), -100, 0.0,
         reduction, exact=True)


def test_softmax_cross_entropy_refuses_an_unknown_reduction():
    with pytest.raises(ValueError, match="reduction must be 'none', 'sum' or 'mean', got 'avg'"):
        backend().softmax_cross_entropy_forward(up(normal(2, 3)), up(np.array([0, 1])), -100,
                                                0.0, "avg")


def test_softmax_cross_entropy_gelu_and_layer_norm():
    x = normal(3, 40) * 4  # rows longer than a block
    for axis in (0, 1):
        same("softmax", x, axis, rtol=1e-5)
        same("log_softmax", x, axis, rtol=1e-5, atol=1e-5)
        same("softmax_backward", normal(3, 40), REF.softmax(x, axis), axis, rtol=1e-5, atol=1e-6)
    targets = np.array([3, -100, 39])
    for smoothing in (0.0, 0.1):
        same("softmax_cross_entropy_forward", x, targets, -100, smoothing, rtol=1e-5,
             atol=1e-5)
        log_probs = REF.log_softmax(x, 1)
        same("softmax_cross_entropy_backward", normal(3), log_probs, targets, -100, smoothing,
             rtol=1e-5, atol=1e-6)
    for approximate in ("none", "tanh"):
        same("gelu_forward", x, approximate, rtol=1e-5, atol=1e-6)
        same("gelu_backward", normal(3, 40), x, approximate, rtol=1e-5, atol=1e-6)
    weight, bias = normal(40), normal(40)
    same("layer_norm_forward", x, weight, bias, 1e-5, rtol=1e-5, atol=1e-5)
    same("layer_norm_forward", x, None, None, 1e-5, rtol=1e-5, atol=1e-5)
    _, mean, rstd = REF.layer_norm_forward(x, weight, bias, 1e-5)
    same("layer_norm_backward", normal(3, 40), x, mean, rstd, weight, rtol=1e-4, atol=1e-5)
    same("layer_norm_backward", normal(3, 40), x, mean, rstd, None, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_streams_equal_the_cpus(dtype):
    for counter in (0, 5, 2 ** 64 - 2):  # the last one wraps past 2**64
        same("random_uniform", (3, 5), dtype, (12345, 678), counter, exact=True)
        same("random_normal", (7,), dtype, (1, 2), counter, rtol=1e-12 if dtype == np.float64
             else 1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("options", [
    dict(momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False),
    dict(momentum=0.9, dampening=0.1, weight_decay=0.01, nesterov=False, maximize=True),
    dict(momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=True, maximize=False),
])
def test_sgd_update_equals_the_reference_bit_for_bit(dtype, options):
    param, grad, buffer = normal(5, 3, dtype=dtype), normal(5, 3, dtype=dtype), \
        normal(5, 3, dtype=dtype)
    device = up([param, grad, buffer])
    for first_step in (True, False):
        arguments = dict(lr=0.05, first_step=first_step, **options)
        REF.sgd_update(param, grad, buffer, **arguments)
        backend().sgd_update(*device, **arguments)
    np.testing.assert_array_equal(down(device[0]), param)
    np.testing.assert_array_equal(down(device[2]), buffer)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("options", [
    dict(weight_decay=0.0, decoupled_weight_decay=False, amsgrad=False, maximize=False),
    dict(weight_decay=0.01, decoupled_weight_decay=False, amsgrad=True, maximize=True),
    dict(weight_decay=0.01, decoupled_weight_decay=True, amsgrad=False, maximize=False),
])
def test_adam_update_equals_the_reference_bit_for_bit(dtype, options):
    state = [normal(4, 3, dtype=dtype) for _ in range(2)] + \
        [np.zeros((4, 3), dtype) for _ in range(3)]
    device = up(state)
    for step in (1, 2, 3):
        grad = normal(4, 3, dtype=dtype)
        arguments = dict(step=step, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, **options)
        REF.adam_update(state[0], grad, *state[2:], **arguments)
        backend().adam_update(device[0], up(grad), *device[2:], **arguments)
    for got, want in zip(device, state):
        np.testing.assert_array_equal(down(got), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch_scale", [1.0, 4 / 3])
def test_running_average_equals_the_reference_bit_for_bit(dtype, batch_scale):
    running, batch = normal(37, dtype=dtype), normal(37, dtype=dtype)
    device = up(running)
    for momentum in (0.1, 0.01):
        REF.running_average_(running, batch, momentum, batch_scale)
        backend().running_average_(device, up(batch), momentum, batch_scale)
    np.testing.assert_array_equal(down(device), running)
    with pytest.raises(ValueError, match="batch has shape"):
        backend().running_average_(device, up(normal(3)), 0.1, 1.0)


GROUP_SHAPES = [(3, 2), (0,), (5,), (1,)] + [(2,)] * 10  # empty, odd sizes, over one launch


@pytest.mark.parametrize("options", [
    dict(momentum=0.0, dampening=0.0, weight_decay=0.01, nesterov=False, maximize=False),
    dict(momentum=0.9, dampening=0.1, weight_decay=0.01, nesterov=False, maximize=True),
])
def test_multi_tensor_sgd_equals_the_reference_bit_for_bit(options):
    params = [normal(*shape) for shape in GROUP_SHAPES]
    buffers = [normal(*shape) for shape in GROUP_SHAPES]
    device_params, device_buffers = up(params), up(buffers)
    for first_step in (True, False):
        grads = [normal(*shape) for shape in GROUP_SHAPES]
        arguments = dict(lr=0.05, first_step=first_step, **options)
        for param, grad, buffer in zip(params, grads, buffers):
            REF.sgd_update(param, grad, buffer, **arguments)
        backend().sgd_update_group(device_params, up(grads), device_buffers, **arguments)
    for got, want in zip(down(device_params) + down(device_buffers), params + buffers):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtypes", [[np.float32], [np.float32, np.float64]])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_multi_tensor_adam_equals_the_reference_bit_for_bit(dtypes, amsgrad):
    kinds = [dtypes[i % len(dtypes)] for i in range(len(GROUP_SHAPES))]
    states = [[normal(*shape, dtype=kind)] + [np.zeros(shape, kind) for _ in range(3)]
              for shape, kind in zip(GROUP_SHAPES, kinds)]
    device = [up(state) for state in states]
    for step in (1, 2):
        grads = [normal(*shape, dtype=kind) for shape, kind in zip(GROUP_SHAPES, kinds)]
        arguments = dict(step=step, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8,
                         weight_decay=0.01, decoupled_weight_decay=True, amsgrad=amsgrad,
                         maximize=False)
        for state, grad in zip(states, grads):
            REF.adam_update(state[0], grad, *state[1:3], state[3] if amsgrad else None,
                            **arguments)
        backend().adam_update_group(
            [d[0] for d in device], up(grads), [d[1] for d in device], [d[2] for d in device],
            [d[3] if amsgrad else None for d in device], **arguments)
    for got, want in zip(device, states):
        for got_array, want_array in zip(down(got), want):
            np.testing.assert_array_equal(got_array, want_array)


def test_a_group_update_needs_one_entry_per_parameter():
    params = up([normal(2), normal(2)])
    with pytest.raises(ValueError, match="2 parameters and 1 entries"):
        backend().sgd_update_group(params, params[:1], [None, None], 0.1, 0.0, 0.0, 0.0, False,
                                   False, False)


@pytest.mark.parametrize("batch_stats", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_batch_norm_matches_the_reference(batch_stats, dtype):
    # 3 x 4 x 5: a channel's 15 values span several threads and cross the batch axis, so the
    # kernels' (n, c, s) addressing and block sums are both exercised; offset values make the
    # two-pass variance matter.
    x = normal(3, 4, 5, dtype=dtype) * 3 + 5
    weight, bias = normal(4, dtype=dtype), normal(4, dtype=dtype)
    given = (None, None) if batch_stats else (normal(4, dtype=dtype),
                                              np.abs(normal(4, dtype=dtype)) + 0.5)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12,
                                                                               atol=1e-12)
    same("batch_norm_forward", x, weight, bias, *given, 1e-5, **tolerance)
    same("batch_norm_forward", x, None, None, *given, 1e-5, **tolerance)
    _, mean, _, rstd = REF.batch_norm_forward(x, weight, bias, *given, 1e-5)
    grad = normal(3, 4, 5, dtype=dtype)
    same("batch_norm_backward", grad, x, mean, rstd, weight, batch_stats, **tolerance)
    same("batch_norm_backward", grad, x, mean, rstd, None, batch_stats, **tolerance)