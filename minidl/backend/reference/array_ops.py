"""Array primitives on NumPy: creation, elementwise math, reductions, movement and matmul.

These are shared by both CPU backends. NumPy's ufuncs are already vectorised C and its matmul is
BLAS, so a Numba rewrite would not be faster; the Numba backend inherits them unchanged. Each is a
named function with the contract's parameters (see :mod:`minidl.backend.primitives`), so a
signature check can compare it with the contract.
"""

import builtins
import math

import numpy as np

from ..batched_product import cached_product_layout
from ..primitives import check_math_function
from .. import threads
from . import product_threads
from .product_threads import (PARALLEL_MIN_WORK, compute_in_parts, compute_on_one_blas_thread,
                              make_native_parts, native_part_count, part_count,
                              with_blas_at_one_thread, worth_splitting)


# -- creation and transfer ---------------------------------------------------------------------

def from_numpy(array):
    """Bring a NumPy array onto this backend (on the CPU: the array itself)."""
    return np.asarray(array)


def to_numpy(array):
    """Return the array as a NumPy array (on the CPU: the array itself, no copy)."""
    return np.asarray(array)


def zeros(shape, dtype):
    return np.zeros(shape, dtype=dtype)


def full(shape, value, dtype):
    return np.full(shape, value, dtype=dtype)


def astype(array, dtype):
    return array.astype(dtype, copy=False)


def copy(array):
    return np.array(array, copy=True, order="C")


# -- in place and memory -----------------------------------------------------------------------

def assign_(target, source):
    np.copyto(target, source, casting="same_kind")


def setitem_(array, index, value):
    array[index] = value


def owns_memory(array) -> bool:
    # A view (reshape, transpose, slice, broadcast) has a base; np.broadcast_to is also
    # read-only. Either way the memory is shared with some other array.
    return array.base is None and array.flags.writeable


# -- elementwise math --------------------------------------------------------------------------

def add(a, b):
    return np.add(a, b)


def sub(a, b):
    return np.subtract(a, b)


def mul(a, b):
    return np.multiply(a, b)


def div(a, b):
    return np.true_divide(a, b)


def floor_divide(a, b):
    return np.floor_divide(a, b)


def remainder(a, b):
    return np.remainder(a, b)


def power(a, b):
    return np.power(a, b)


# math_function's names -> NumPy's ufunc of the same function.
_NUMPY_MATH = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
               "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
               "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
               "acosh": np.arccosh, "atanh": np.arctanh}
_erf = np.vectorize(math.erf, otypes=[np.float64])  # NumPy has no erf ufunc


# The hot three (softmax, losses, optimizers) are called as bare ufuncs, as they were when each
# was a primitive of its own: an errstate context costs more than exp of a small array.
_BARE_UFUNCS = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt}


def math_function(a, name):
    bare = _BARE_UFUNCS.get(name)
    if bare is not None:
        return bare(a)
    check_math_function(name)
    if name == "erf":
        # math.erf is exact to double precision; computing in float64 and rounding once keeps
        # a float32 result within float32's own rounding of the true value.
        return _erf(np.asarray(a, dtype=np.float64)).astype(a.dtype)
    with np.errstate(all="ignore"):  # outside the domain the answer is nan or inf, as in NumPy
        return _NUMPY_MATH[name](a)


def abs(a):  # noqa: A001 - the primitive is named after the math
    return np.abs(a)


def maximum(a, b):
    return np.maximum(a, b)


def minimum(a, b):
    return np.minimum(a, b)


def equal(a, b):
    return np.equal(a, b)


def less(a, b):
    return np.less(a, b)


def sigmoid(a):
    """1 / (1 + e^-a), evaluated without overflow.

    For a >= 0 use 1 / (1 + e^-a); for a < 0 the algebraically equal e^a / (1 + e^a), so the
    exponent is always of a non-positive number and can never overflow.
    """
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(a.dtype, copy=False)


# A zero of each dtype as a 0-d array: np.maximum(a, 0) with a Python int first decides what
# dtype the int should take beside a's (NumPy's promotion of weak scalars), which cost ~0.3 µs
# of a small ReLU's ~1.7; a zero of a's own dtype leaves nothing to decide, and the result
# keeps a's dtype without the astype that the int needed.
_ZERO_OF_DTYPE: dict = {}


def relu(a):
    zero = _ZERO_OF_DTYPE.get(a.dtype)
    if zero is None:
        zero = _ZERO_OF_DTYPE[a.dtype] = np.zeros((), a.dtype)
    return np.maximum(a, zero)


def relu_backward(grad, x):
    """d relu(x)/dx is 1 where x > 0 and 0 elsewhere (0 at x == 0, as PyTorch)."""
    return np.where(x > 0, grad, 0).astype(grad.dtype, copy=False)


def where(condition, a, b):
    return np.where(condition, a, b)


# -- reductions --------------------------------------------------------------------------------

def sum(x, axis=None, keepdims=False):  # noqa: A001
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype if x.dtype.kind == "f" else None)


def max(x, axis=None, keepdims=False):  # noqa: A001
    return np.max(x, axis=axis, keepdims=keepdims)


def argmax(x, axis=None, keepdims=False):
    return np.argmax(x, axis=axis, keepdims=keepdims)


# -- movement ----------------------------------------------------------------------------------

# The array methods rather than np.reshape/np.transpose: the functions' dispatch wrappers cost
# about as much as the reshape itself, and small models make many.
def reshape(x, shape):
    return x.reshape(shape)


def transpose(x, axes):
    return x.transpose(axes)


def broadcast_to(x, shape):
    return np.broadcast_to(x, shape)


def getitem(x, index):
    return x[index]


def index_add(shape, index, values, dtype):
    """Zeros of ``shape`` with ``values`` scatter-added at ``index``: the adjoint of getitem.

    ``np.add.at`` accumulates repeated indices (x[[0, 0]] sends two gradients to x[0]), which
    plain ``out[index] += values`` would not.
    """
    out = np.zeros(shape, dtype=dtype)
    parts = index if isinstance(index, tuple) else (index,)
    if all(part is None or part is Ellipsis or isinstance(part, (int, np.integer, slice))
           for part in parts):
        # Basic indexing (slices, ints) selects each cell at most once, so a plain assignment
        # is the same sum, without add.at's slow per-element loop (an attention block's q/k/v
        # slices measured ~10% of its step that way).
        out[index] = values
    else:
        np.add.at(out, index, values)
    return out


def _check_rows(op: str, indices, rows: int) -> None:
    # One pass over the indices on the device that holds them; NumPy's own indexing would wrap
    # negative indices instead of rejecting them.
    if indices.size == 0:
        return
    bad = (indices < 0) | (indices >= rows)
    if bad.any():
        raise IndexError(f"{op}: index {int(indices[bad][0])} is out of range for {rows} rows")


def take(table, indices):
    _check_rows("take", indices, table.shape[0])
    return np.take(table, indices, axis=0)


def one_hot(indices, num_classes, dtype):
    _check_rows("one_hot", indices, num_classes)
    out = np.zeros(indices.shape + (num_classes,), dtype=dtype)
    np.put_along_axis(out, indices[..., None].astype(np.intp, copy=False), 1, axis=-1)
    return out


def nonzero(mask):
    return tuple(i.astype(np.int64, copy=False) for i in np.nonzero(mask))


def concatenate(arrays, axis):
    return np.concatenate(arrays, axis=axis)


# -- linear algebra ----------------------------------------------------------------------------

# Output columns per block from which a batch of blocks sharing one left matrix is multiplied
# block by block (each product written in place) rather than as one wide product plus a copy
# into the result's layout. Measured on convolutions (batch 64, one thread: LeNet's 28×28 maps
# 3x faster and 10×10 1.3x, CIFAR's 32×32 1.6x and 16×16 ~5%; 8×8 maps with 576-long columns
# ~5% slower block by block).
_PER_BLOCK_MIN_COLUMNS = 100


# Multiply-adds from which OpenBLAS threads a product itself (its SMP threshold, 65536 × 4).
_BLAS_THREADS_MIN_WORK = 1 << 18


def matmul(a, b, transpose_a=False, transpose_b=False, *, a_axes=None, b_axes=None,
           out_axes=None, sum_axis=None):
    if threads.blas_keeps_its_pool and product_threads.native_parts is not None and \
            a.size * (builtins.max(b.shape[-2:]) if b_axes is not None or b.ndim < 2
                      else b.shape[-2] if transpose_b else b.shape[-1]) \
            >= _BLAS_THREADS_MIN_WORK and product_threads.blas_thread_count() > 1:
        # a.size · n bounds each BLAS call's multiply-adds, which OpenBLAS compares with the
        # same line to decide whether to thread it (with b_axes, n is taken as the larger of
        # b's last two axes). A single sample's Linear layer, (1, 784) @ (784, 10)ᵀ, is 7,840
        # of them and is left alone: no thread count asked for and set back.
        #
        # Numba's threads spin for a moment after each parallel region (numba_cpu's
        # process_settings), and OpenBLAS's own pool, still at NumPy's default count as long as
        # set_num_threads was never called, would spin against them on the same cores (an MLP
        # step took twice as long on two cores). So minidl's products hold OpenBLAS at one
        # thread then too (this call again, inside) and take their threads from the parts;
        # NumPy's own products outside minidl keep OpenBLAS's pool.
        whole = []
        with_blas_at_one_thread(lambda: whole.append(matmul(
            a, b, transpose_a, transpose_b, a_axes=a_axes, b_axes=b_axes, out_axes=out_axes,
            sum_axis=sum_axis)))
        return whole[0]
    if a_axes is None and b_axes is None and out_axes is None and sum_axis is None:
        # NumPy's transposes are views: BLAS reads them in place, as the flags ask. The array
        # method, one C call, where np.swapaxes passes through three Python-level wrappers
        # (a Linear layer's x @ Wᵀ pays them on every call).
        if transpose_a:
            a = a.swapaxes(-1, -2)
        if transpose_b:
            b = b.swapaxes(-1, -2)
        if a.ndim == 2 and b.ndim == 2:  # the commonest product, straight to its one case
            return _matrix_product(a, b)
        return _product(a, b)
    layout = cached_product_layout(a.shape, b.shape, transpose_a, transpose_b, a_axes, b_axes,
                                   out_axes, sum_axis)
    a, b = np.transpose(a, layout.a_axes), np.transpose(b, layout.b_axes)
    if layout.sum_axis is None and math.prod(layout.batch) == 1 \
            and layout.out_axes[-2:] == (len(layout.out_axes) - 2, len(layout.out_axes) - 1):
        # One matrix times one matrix (a single image's convolution): the batch axes are all
        # of size 1, so the product is one GEMM and no axis it moves changes the memory order.
        product = _product(a.reshape(layout.m, layout.k), b.reshape(layout.k, layout.n))
        return product.reshape(layout.shape)
    if a.shape[:-2] != layout.batch:
        a = np.broadcast_to(a, layout.batch + a.shape[-2:])
    if b.shape[:-2] != layout.batch:
        b = np.broadcast_to(b, layout.batch + b.shape[-2:])
    if layout.sum_axis is not None:
        product = _summed_over_batch_axis(a, b, layout.sum_axis)
    elif not layout.batch:
        product = _product(a, b)
    elif _blocks_of_one_wide_product(a, b):
        product = _as_one_wide_product(a, b)
    else:
        product = _block_by_block(a, b)
    return np.ascontiguousarray(np.transpose(product, layout.out_axes))


# False: the plain products (2-D and stacked, called without axes) are never cut here, each one
# BLAS call, as before; convolutions' products are cut either way. With
# ``threads.OPENBLAS_AT_ONE_THREAD = False`` beside it (OpenBLAS then threads them itself),
# that is the previous engine, for a benchmark comparing the two on one machine.
SPLIT_PLAIN_PRODUCTS = True

# Output rows per tile of a split 2-D product: every part starts on a multiple of it. OpenBLAS
# computes NumPy's row-major product as the column-major Cᵀ = Bᵀ Aᵀ, so our rows are its
# columns, which its driver packs and multiplies in chunks of three register tiles (3 × 8 on
# AVX-512 double precision): a part starting inside a chunk sums some elements in another
# order. Measured: cuts at multiples of 24 rows gave the whole product's bits in every float32
# and float64 case tried, cuts at multiples of 8, 16, 32 or 64 did not (float64). Cutting the
# columns changed float64 bits at any alignment tried, so a 2-D product is split by rows only.
_ROW_TILE = 24


def _product(a, b):
    if a.ndim > 2 and b.ndim == 2:
        # A stack of matrices times one matrix is one product of the stacked rows: NumPy does
        # the stacked form without BLAS (measured ~100x slower on (32, 64, 512) @ (512, 128),
        # a transformer's Linear), while (32·64, 512) @ (512, 128) is a single GEMM.
        rows = _matrix_product(a.reshape(math.prod(a.shape[:-1]), a.shape[-1]), b)
        return rows.reshape(a.shape[:-1] + (b.shape[1],))
    if a.ndim == 2 and b.ndim == 2:
        return _matrix_product(a, b)
    if a.ndim >= 2 and b.ndim >= 2:
        return _stacked_product(a, b)
    return np.matmul(a, b)  # a vector: a matrix-vector product, its work never worth a split


def _matrix_product(a, b):
    """a (m, k) @ b (k, n); threads share it by output rows, each part one BLAS call on its
    rows of a and the whole of b (never a range of k: every element keeps its sum)."""
    (m, k), n = a.shape, b.shape[1]
    work = m * k * n
    # A product too small to split (any single sample's) asks one question, not the two of
    # part_count, which begins with this one; below twice the parallel minimum (worth_splitting's
    # first test, inline) it asks none: a Python call is a fair part of a small product's time.
    if work < 2 * PARALLEL_MIN_WORK or not SPLIT_PLAIN_PRODUCTS:
        return np.matmul(a, b)
    parts = native_part_count(m // _ROW_TILE, work)
    if parts > 1:
        out = np.empty((m, n), dtype=np.result_type(a, b))
        bounds = [round(m * part / parts / _ROW_TILE) * _ROW_TILE for part in range(parts)]
        if _made_natively(a, b, out, parts, row_bounds=bounds + [m]):
            return out
    if not worth_splitting(work):
        return np.matmul(a, b)
    parts = part_count(m // _ROW_TILE, work)
    if parts == 1:
        return np.matmul(a, b)
    if _is_gram_product(a, b):
        whole = []
        compute_on_one_blas_thread(lambda: whole.append(np.matmul(a, b)))
        return whole[0]
    out = np.empty((m, n), dtype=np.result_type(a, b))

    def rows(start, stop):
        # Each cut moved to the nearest tile boundary; neighbours move their shared cut alike.
        first = round(start / _ROW_TILE) * _ROW_TILE
        last = m if stop == m else round(stop / _ROW_TILE) * _ROW_TILE
        np.matmul(a[first:last], b, out=out[first:last])
    compute_in_parts(rows, m, parts, work=work)
    return out


def _is_gram_product(a, b) -> bool:
    """Whether a @ b is x @ xᵀ on one buffer, which NumPy hands to BLAS's syrk (it computes one
    triangle and mirrors it): its parts would be GEMMs, which sum in another order, and
    OpenBLAS's threaded syrk gives other bits than its one-thread syrk."""
    return (a.shape == b.shape[::-1] and a.strides == b.strides[::-1]
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _stacked_product(a, b):
    """A batch of products (batch axes broadcast); threads share it by whole entries of the
    last batch axis, each entry the same BLAS call as on one thread."""
    if not SPLIT_PLAIN_PRODUCTS:
        return np.matmul(a, b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return _block_by_block(np.broadcast_to(a, batch + a.shape[-2:]),
                           np.broadcast_to(b, batch + b.shape[-2:]))


# The chunks of images a product summed over its images is cut into (fixed, whatever the thread
# count: the chunks' sums are added in chunk order, so the chunk count sets the bits). Two
# threads then each read their own images of both operands, where parts by rows of a each read
# all of b: a convolution's weight gradient at two threads (CIFAR's, batch 64, float32) took
# 4.3 -> 1.9 ms (27×32 from 64×1024-long sums), 3.8 -> 3.3 ms and 1.8 -> 1.7 ms, the same
# time at one thread. Four chunks cost 3-4% at one thread and gained less at two; more threads
# than chunks idle here. (Measured as a whole: CIFAR's step at two threads 5.5% faster.)
_MOST_SUM_CHUNKS = 2


def _summed_over_batch_axis(a, b, axis):
    """Σ_s a[s] @ b[s] over batch ``axis`` (a convolution's weight gradient, summed over its
    images) in chunks of s fixed by the shape: each chunk one product over a longer k, a's k
    blocks side by side (m, S·k) times b's stacked (S·k, n), and the chunks' sums added in
    chunk order. b's copy, when one is needed, is laid out k-last, so BLAS reads it transposed,
    as it reads a convolution's output gradient. Threads share the chunks (never a chunk's k,
    which would change its sums' order)."""
    a = np.moveaxis(a, axis, -2)                                    # (..., m, S, k)
    b = np.moveaxis(np.swapaxes(b, -1, -2), axis, -2)               # (..., n, S, k)
    (m, images, k), n = a.shape[-3:], b.shape[-3]
    if m * n <= _IMAGE_BY_IMAGE_MOST_OUTPUT and images > 1 and \
            np.result_type(a, b) in _BLAS_FLOATS:
        return _summed_image_by_image(a, b)
    work = math.prod(a.shape[:-3]) * m * images * k * n
    # A product too small to split stays one product (chunks cost a little on one thread).
    chunks = builtins.min(images, _MOST_SUM_CHUNKS) if worth_splitting(work) else 1
    bounds = [images * chunk // chunks for chunk in range(chunks + 1)]
    sums = [None] * chunks

    def chunk_sums(first, last):
        for chunk in range(first, last):
            start, stop = bounds[chunk], bounds[chunk + 1]
            a_chunk = a[..., start:stop, :].reshape(a.shape[:-2] + ((stop - start) * k,))
            b_chunk = b[..., start:stop, :].reshape(b.shape[:-2] + ((stop - start) * k,))
            sums[chunk] = np.matmul(a_chunk, np.swapaxes(b_chunk, -1, -2))
    parts = part_count(chunks, work)
    if parts == 1:
        chunk_sums(0, chunks)
    else:
        compute_in_parts(chunk_sums, chunks, parts, work)
    total = sums[0]
    for chunk_sum in sums[1:]:
        total += chunk_sum
    return total


# The output elements (m·n) up to which a product summed over its images is one BLAS call per
# image and the images' products are added after. OpenBLAS computes a tiny output from a long k
# at a small fraction of its speed: each block of k it packs both operands again for a few
# register tiles' work. A convolution's weight gradient is such a product when its filters are
# few and small: LeNet's first, 6×25 from 64 images of 784 positions (k = 50,176), took 994 µs
# as one product and 256 µs image by image; CIFAR's first, 32×27 from 64 images of 1024,
# 3,293 µs and 1,265 µs. Measured on one thread (float32, 64 images, 64 to 1024 positions):
# outputs of 72-1,728 elements took 1.1-4.3x less time image by image; of 2,304-4,608 the two
# were within ±12%, but image by image the images share the threads where a long product under
# SPLIT_MIN_WORK stays whole (LeNet's second, 16×150 from 64×100: 508 -> 374 µs at two
# threads); from 9,216 (CIFAR's last, 64×576: 2.6 against 3.5 ms) the long product was faster.
_IMAGE_BY_IMAGE_MOST_OUTPUT = 4096

# The dtypes summed image by image. float16 is not: NumPy's half-precision product sums a long k
# in float32 and rounds once, where adding per-image products would round at every image.
_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _summed_image_by_image(a, b):
    """Σ_s a[s] @ b[s] for a (…, m, S, k) and b (…, n, S, k), as one product per image s
    (threads share the images, each the same BLAS call on any thread) and their sum over s in
    image order, so the result is bitwise the same at any thread count."""
    a_images = np.swapaxes(a, -2, -3)                                # (..., S, m, k)
    b_images = np.swapaxes(np.swapaxes(b, -2, -3), -1, -2)           # (..., S, k, n)
    return np.add.reduce(_block_by_block(a_images, b_images), axis=-3)


def _blocks_of_one_wide_product(a, b) -> bool:
    """Whether a (…, N, m, k) @ b (…, N, k, n) is better done as one wide product: when a is
    one matrix for the whole last batch axis, unless the blocks are wide and the only batch,
    and b's blocks already lie side by side in one matrix (its batch stride is a block's
    width), where writing each block's product in place saves the copy after."""
    if (a.strides[-3] != 0 and a.shape[-3] != 1) or a.size == 0:
        return False
    per_block = (math.prod(b.shape[:-3]) == 1 and b.shape[-3] > 1
                 and b.shape[-1] >= _PER_BLOCK_MIN_COLUMNS
                 and b.strides[-3] == b.shape[-1] * b.strides[-1])
    return not per_block


# The most blocks of images a wide product is cut into (fixed, whatever the thread count).
# Their count is a power of two, so that 2, 4, 8 or 16 threads share them evenly: LeNet's
# second input gradient (15.4M multiply-adds) in 7 blocks took 409-428 µs at two threads, in 4
# blocks 353-371 µs (and less at one thread too: each block is a BLAS call with its own set-up).
_MOST_IMAGE_BLOCKS = 16


def _as_one_wide_product(a, b):
    """a (…, N, m, k), one matrix along N, times b (…, N, k, n) as a (…, m, k) @ (…, k, N·n),
    viewed back as (…, N, m, n).

    A large one is cut into blocks of whole images, each block its own BLAS call on its images
    of b copied side by side, and the threads share the blocks (Numba's, where its BLAS calls
    can be made there, else the Python workers'). The blocks depend on the shape
    alone, never on the thread count: OpenBLAS sums the elements near a call's column edge in
    another order (measured in both precisions, for most cut positions), so the same columns
    computed in one call or in two need not agree, and only a fixed cut keeps the bits the
    same at any thread count."""
    n_blocks, (m, k), n = b.shape[-3], a.shape[-2:], b.shape[-1]
    left = a[..., 0, :, :]
    work = m * k * n_blocks * n  # the multiply-adds of one BLAS call of the stack
    # Each block keeps a part's worth of work, above OpenBLAS's small-matrix kernels. (This
    # module's max and min are the backend's reductions, hence the builtin.)
    blocks = builtins.min(n_blocks, _MOST_IMAGE_BLOCKS, work // PARALLEL_MIN_WORK)
    blocks = 1 << (blocks.bit_length() - 1) if blocks > 1 else blocks
    if blocks <= 1:
        product = _product(left, _side_by_side(b, 0, n_blocks))            # (..., m, N·n)
    else:
        product = np.empty(b.shape[:-3] + (m, n_blocks * n), dtype=np.result_type(a, b))
        bounds = [n_blocks * block // blocks for block in range(blocks + 1)]
        native = native_part_count(blocks, work)
        if native > 1 and _native_image_blocks(left, b, product, bounds, native):
            return np.swapaxes(product.reshape(product.shape[:-1] + (n_blocks, n)), -2, -3)

        def image_blocks(first, last):
            for start, stop in zip(bounds[first:last], bounds[first + 1:last + 1]):
                np.matmul(left, _side_by_side(b, start, stop),
                          out=product[..., start * n:stop * n])
        parts = part_count(blocks, work)
        if parts == 1:
            image_blocks(0, blocks)
        else:
            compute_in_parts(image_blocks, blocks, parts, work)
    return np.swapaxes(product.reshape(product.shape[:-1] + (n_blocks, n)), -2, -3)


def _native_image_blocks(left, b, product, bounds, parts: int) -> bool:
    """Write ``left @ b``'s image blocks (``bounds``) into ``product`` as BLAS calls made on
    Numba's threads, b's images copied side by side first (on this thread; a view where they
    lie so already); False, with nothing written, where they are not such calls."""
    n = b.shape[-1]
    wide = _side_by_side(b, 0, b.shape[-3])  # held here: the calls read it by address
    return _made_natively(left, wide, product, parts,
                          column_bounds=[bound * n for bound in bounds])


def _made_natively(a, b, out, parts: int, **cuts) -> bool:
    """Write ``a @ b`` into ``out`` as the BLAS calls NumPy would make, in ``parts`` runs on
    Numba's threads (``cuts``: :func:`~..numba_cpu.product_parts.gemm_call_table`'s row or
    column bounds); False, with nothing written, where they are not such calls."""
    calls = product_threads.native_parts.gemm_call_table(a, b, out, **cuts)
    if calls is None:
        return False
    make_native_parts(calls, parts, out.dtype)
    return True


def _side_by_side(b, start, stop):
    """Blocks start..stop of b (…, N, k, n) copied side by side: (…, k, (stop - start)·n)."""
    wide = np.swapaxes(b[..., start:stop, :, :], -3, -2)                # (..., k, blocks, n)
    return wide.reshape(wide.shape[:-2] + ((stop - start) * b.shape[-1],))


def _block_by_block(a, b):
    """a (…, m, k) @ b (…, k, n), each block's product written in place; threads share it by
    ranges of the longest batch axis (a convolution's images, attention's batch rather than its
    few heads), every block the same BLAS call whichever thread makes it."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    axis = builtins.max(range(a.ndim - 2), key=lambda batch_axis: a.shape[batch_axis])
    # Every part makes the same per-block BLAS calls as the whole, so all of the work counts.
    work = math.prod(a.shape[:-2]) * m * k * n
    native = native_part_count(a.shape[axis], work, call_work=m * k * n)
    if native > 1:
        out = np.empty(a.shape[:-1] + (n,), dtype=np.result_type(a, b))
        if _made_natively(a, b, out, native):
            return out
    parts = part_count(a.shape[axis], work, call_work=m * k * n)
    if parts == 1:
        return np.matmul(a, b)
    out = np.empty(a.shape[:-1] + (n,), dtype=np.result_type(a, b))
    before = (slice(None),) * axis

    def blocks(start, stop):
        cut = before + (slice(start, stop),)
        np.matmul(a[cut], b[cut], out=out[cut])
    compute_in_parts(blocks, a.shape[axis], parts, work, call_work=m * k * n)
    return out
