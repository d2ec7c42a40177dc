"""im2col / col2im as Numba kernels (same names and meaning as :mod:`minidl.backend.reference.conv`).

NumPy can only build im2col out of kh*kw strided copies, each a pass over the whole batch. Here a
single compiled pass fills the column matrix (C*kh*kw, N*OH*OW): one task per (n, c) input plane
(spread over threads when the batch is big enough), and for every kernel tap (i, j) it writes
whole output rows contiguously into image n's stretch of that tap's row. col2im is the same walk with the
copy reversed into an add; since a task owns one input plane, no two threads ever add to the same
cell and no atomics are needed.

Kernels compile on their first call (``cache=True`` stores the machine code on disk for later
runs); importing this module compiles nothing.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from ..conv_arithmetic import conv_output_size

__all__ = ["im2col", "col2im"]


@njit(cache=True, inline="always")
def _valid_output_range(out_size, stride, offset, size):
    """Outputs o with 0 <= o*stride + offset < size form one interval [lo, hi); return it.

    Knowing the interval lets the inner loops run without a bounds test per element. Inlined
    (it takes no arrays, so inlining adds no reference counting) and, for a stride of 1, free
    of divisions: the kernels ask once per tap of every plane, and a 64-bit division takes tens
    of cycles, longer than copying one of LeNet's 10-wide rows.
    """
    # o*stride + offset >= 0  <=>  o >= ceil(-offset / stride)
    # o*stride + offset <= size - 1  <=>  o <= floor((size - 1 - offset) / stride)
    last = size - 1 - offset
    if stride == 1:
        lo = max(0, -offset)
        hi = max(0, last + 1)
    else:
        lo = 0 if offset >= 0 else (-offset + stride - 1) // stride
        hi = 0 if last < 0 else last // stride + 1
    lo = min(lo, out_size)
    hi = max(min(hi, out_size), lo)
    return lo, hi


@njit(cache=True)
def _im2col_band_plane(x, cols, b, ch, kh, kw, ph, pw, dh, dw, out_h, out_w):
    """Fill the kh*kw column rows that come from input plane (b, ch), for stride 1 with output
    rows as wide as the image ('same' padding).

    Both arrays are read through flat 1-D views with offsets computed here, rather than by
    indexing the 4-D and 2-D arrays or slicing a row view per image row: a Numba view costs a
    struct build, which for LeNet's 10-wide output rows cost more than the copy (this flat form
    measured ~2x faster). The inner copy stays a plain contiguous loop that LLVM vectorises.
    """
    channels, height, width = x.shape[1], x.shape[2], x.shape[3]
    columns = cols.shape[1]
    image = x.reshape(-1)
    table = cols.reshape(-1)
    plane_start = (b * channels + ch) * height * width
    # Consecutive output rows read consecutive image rows at one fixed offset, so a tap's whole
    # valid band is one long copy.
    for i in range(kh):
        for j in range(kw):
            row_start = ((ch * kh + i) * kw + j) * columns  # column rows in (c, i, j) order
            col_offset = j * dw - pw
            lo, hi = _valid_output_range(out_w, 1, col_offset, width)
            # Output (oh, ow) reads image (oh + row_offset, ow + col_offset): the output
            # rows [first, last) whose image row exists form one band, read by one
            # contiguous copy shifted by a constant. The copy also carries wrapped
            # neighbours into the columns outside [lo, hi) (the left or right padding);
            # those, and the rows above and below the image, are then set to zero.
            # Written out here rather than as a helper taking the arrays: Numba counts a
            # reference to each array passed to a helper, even an inlined one, an atomic
            # add and subtract per array per tap. They cost LeNet's first layer 35% on
            # one thread (64x1x28x28, 5x5 taps: 0.30 -> 0.21 ms). Numba hands a threaded
            # loop's tasks the arrays without a count, so there they were calls that
            # return at once, still 14% of CIFAR's 8x8 maps (64x64x8x8: 0.97 -> 0.84 ms).
            row_offset = i * dh - ph
            first = min(max(0, -row_offset), out_h)
            last = max(min(out_h, height - row_offset), first)
            base = row_start + b * out_h * out_w
            for t in range(np.uint64(base), np.uint64(base + first * out_w)):
                table[t] = 0
            for t in range(np.uint64(base + last * out_w), np.uint64(base + out_h * out_w)):
                table[t] = 0
            # The band minus its first `lo` and last `out_w - hi` cells: those are
            # padding columns, and reading them could step outside the image array.
            start = first * out_w + lo
            stop = last * out_w - (out_w - hi)
            if stop > start:
                target = np.uint64(base + start)
                source = np.uint64(plane_start + (first + row_offset) * out_w + lo + col_offset)
                for t in range(np.uint64(stop - start)):
                    table[target + t] = image[source + t]
            for oh in range(first, last):
                row = base + oh * out_w
                for ow in range(lo):
                    table[row + ow] = 0
                for ow in range(hi, out_w):
                    table[row + ow] = 0


@njit(cache=True)
def _im2col_rows_plane(x, cols, b, ch, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    """Fill the kh*kw column rows that come from input plane (b, ch), one output row at a time
    (any geometry; flat views as in :func:`_im2col_band_plane`)."""
    channels, height, width = x.shape[1], x.shape[2], x.shape[3]
    columns = cols.shape[1]
    image = x.reshape(-1)
    table = cols.reshape(-1)
    plane_start = (b * channels + ch) * height * width
    # Rows narrower than the image (strided or unpadded layers): one copy per output row and
    # tap, only out_w entries long (10 in LeNet's second layer: 64x6x14x14, 5x5 taps). At that
    # length the bookkeeping around a copy costs more than the copy, so none of it is per row:
    # the output rows whose image row exists form one interval [first, last), found once per
    # tap row i, the rows outside it are zeroed as one stretch, and the copies inside walk
    # source and target by fixed steps. Testing each row instead (ih < 0 or ih >= height) and
    # zeroing the padding columns of each row inside the copy loop took 0.47 ms for that layer,
    # this form 0.32 ms; the padding columns are now a separate pass, skipped when there are none.
    for i in range(kh):
        row_offset = i * dh - ph
        first, last = _valid_output_range(out_h, sh, row_offset, height)
        for j in range(kw):
            row_start = ((ch * kh + i) * kw + j) * columns  # column rows in (c, i, j) order
            col_offset = j * dw - pw
            lo, hi = _valid_output_range(out_w, sw, col_offset, width)
            base = row_start + b * out_h * out_w  # columns in (n, oh, ow) order
            for t in range(np.uint64(base), np.uint64(base + first * out_w)):
                table[t] = 0
            for t in range(np.uint64(base + last * out_w), np.uint64(base + out_h * out_w)):
                table[t] = 0
            # Unsigned offsets: Numba must handle a negative signed index by counting from
            # the end, a per-element test that stops LLVM from vectorising the copy.
            source = np.uint64(plane_start + (first * sh + row_offset) * width + lo * sw
                               + col_offset)
            target = np.uint64(base + first * out_w + lo)
            count = np.uint64(hi - lo)
            if sw == 1:
                for oh in range(first, last):
                    for t in range(count):
                        table[target + t] = image[source + t]
                    source += np.uint64(sh * width)
                    target += np.uint64(out_w)
            else:
                step = np.uint64(sw)
                for oh in range(first, last):
                    for t in range(count):
                        table[target + t] = image[source + t * step]
                    source += np.uint64(sh * width)
                    target += np.uint64(out_w)
            if lo > 0 or hi < out_w:
                for oh in range(first, last):
                    row = base + oh * out_w
                    for ow in range(lo):
                        table[row + ow] = 0
                    for ow in range(hi, out_w):
                        table[row + ow] = 0


@njit(cache=True)
def _col2im_plane(cols, dx, b, ch, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    """Sum into input plane (b, ch) every column entry that was read from it (flat views, as in
    :func:`_im2col_band_plane`)."""
    channels, height, width = dx.shape[1], dx.shape[2], dx.shape[3]
    columns = cols.shape[1]
    image = dx.reshape(-1)
    table = cols.reshape(-1)
    plane_start = (b * channels + ch) * height * width
    for k in range(plane_start, plane_start + height * width):
        image[k] = 0
    # The loops of _im2col_rows_plane (tap, then the interval of output rows that fall in the
    # image), with the copy reversed into an add. Each image cell receives at most one entry
    # per tap, in tap order (i, j): the order of the sums, hence their bits, does not depend on
    # how the rows of one tap are walked.
    for i in range(kh):
        row_offset = i * dh - ph
        first, last = _valid_output_range(out_h, sh, row_offset, height)
        for j in range(kw):
            col_offset = j * dw - pw
            lo, hi = _valid_output_range(out_w, sw, col_offset, width)
            row_start = ((ch * kh + i) * kw + j) * columns
            target = np.uint64(plane_start + (first * sh + row_offset) * width + lo * sw
                               + col_offset)
            source = np.uint64(row_start + (b * out_h + first) * out_w + lo)
            count = np.uint64(hi - lo)
            if sw == 1:
                for oh in range(first, last):
                    for t in range(count):
                        image[target + t] += table[source + t]
                    target += np.uint64(sh * width)
                    source += np.uint64(out_w)
            else:
                step = np.uint64(sw)
                for oh in range(first, last):
                    for t in range(count):
                        image[target + t * step] += table[source + t]
                    target += np.uint64(sh * width)
                    source += np.uint64(out_w)


# Each kernel comes as a serial and a parallel loop over the (n, c) planes. Starting threads
# costs tens of microseconds (far more when the cores are busy with other work), so small
# problems run on the calling thread; see COLUMNS_PARALLEL_MIN_WORK. Planes go channel by channel
# (all images of channel 0, then channel 1, ...): consecutive planes then fill consecutive
# stretches of the same kh*kw column rows, where image-major order scattered short writes over
# every row of the table (~1.5x slower for CIFAR-sized layers). im2col picks its plane walk once
# per call: the band copy and the row-by-row copy are separate functions because compiled as two
# branches of one, the band copy ran 2-4% slower (CIFAR's 64x64x8x8 and 64x32x16x16 maps, LeNet's
# first layer) than it does alone.


@njit(cache=True)
def _im2col_serial(x, cols, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    band = sh == 1 and sw == 1 and out_w == x.shape[3]
    for plane in range(x.shape[0] * x.shape[1]):
        ch, b = plane // x.shape[0], plane % x.shape[0]
        if band:
            _im2col_band_plane(x, cols, b, ch, kh, kw, ph, pw, dh, dw, out_h, out_w)
        else:
            _im2col_rows_plane(x, cols, b, ch, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w)


@njit(cache=True, parallel=True)
def _im2col_parallel(x, cols, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    band = sh == 1 and sw == 1 and out_w == x.shape[3]
    for plane in prange(x.shape[0] * x.shape[1]):
        ch, b = plane // x.shape[0], plane % x.shape[0]
        if band:
            _im2col_band_plane(x, cols, b, ch, kh, kw, ph, pw, dh, dw, out_h, out_w)
        else:
            _im2col_rows_plane(x, cols, b, ch, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w)


@njit(cache=True)
def _col2im_serial(cols, dx, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    for plane in range(dx.shape[0] * dx.shape[1]):
        ch, b = plane // dx.shape[0], plane % dx.shape[0]
        _col2im_plane(cols, dx, b, ch, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w)


@njit(cache=True, parallel=True)
def _col2im_parallel(cols, dx, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    # A task owns one input plane, so no two threads ever add to the same cell.
    for plane in prange(dx.shape[0] * dx.shape[1]):
        ch, b = plane // dx.shape[0], plane % dx.shape[0]
        _col2im_plane(cols, dx, b, ch, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w)


# Elements a kernel must touch before spreading it over threads pays for starting them.
PARALLEL_MIN_WORK = 1 << 18

# Elements of the column table from which im2col and col2im spread over threads. The table is
# read next by the convolution's product (im2col) or was just written by it (col2im), which
# runs on one core unless it is big enough to be split (product_threads.NATIVE_SPLIT_MIN_WORK
# and SPLIT_MIN_WORK): a
# table written by two cores and read by one comes half from the other core's cache. With
# threads that slept between regions this cost LeNet's products more than the threaded copies
# gained (4.79 against 3.83 ms a step), and the line lay at 1.5M elements, above LeNet's tables
# (1.0M and 1.25M). With threads that spin for a moment (numba_cpu/process_settings.py) LeNet
# gained from threading them too: measured with the other passes, see
# elementwise.PARALLEL_MIN_WORK.
COLUMNS_PARALLEL_MIN_WORK = 1 << 18


def _geometry(x_shape, kernel_size, stride, padding, dilation):
    """All integer parameters of a convolution as plain ints, plus the output size.

    A layer asks with the same arguments on every call, so the answer is remembered: one
    lookup (~0.2 us) where the arithmetic took ~0.7 us, a visible share of a single image's
    convolution. Geometry given as lists (unhashable) is computed each time; a bad geometry
    raises each time (errors are not remembered)."""
    try:
        return _remembered_geometry(x_shape, kernel_size, stride, padding, dilation)
    except TypeError:
        return _geometry_of(x_shape, kernel_size, stride, padding, dilation)


def _geometry_of(x_shape, kernel_size, stride, padding, dilation):
    # Unpacked and converted one by one: generator expressions cost microseconds.
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    kh, kw, sh, sw, ph, pw, dh, dw = int(kh), int(kw), int(sh), int(sw), int(ph), int(pw), \
        int(dh), int(dw)
    out_h = conv_output_size(x_shape[2], kh, sh, ph, dh)
    out_w = conv_output_size(x_shape[3], kw, sw, pw, dw)
    return kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w


# Keyed by the whole input shape (batch sizes vary less than the layers of a model).
_remembered_geometry = functools.lru_cache(maxsize=256)(_geometry_of)


def im2col(x: np.ndarray, kernel_size, stride, padding, dilation) -> np.ndarray:
    """Unfold every kernel window of ``x`` (N, C, H, W) into a column: (C*kh*kw, N*OH*OW).

    Rows are ordered (c, i, j), columns (n, oh, ow); cells outside the image read as zero.
    """
    x = np.ascontiguousarray(x)
    params = _geometry(x.shape, kernel_size, stride, padding, dilation)
    kh, kw, out_h, out_w = params[0], params[1], params[8], params[9]
    n, c = x.shape[:2]
    cols = np.empty((c * kh * kw, n * out_h * out_w), dtype=x.dtype)
    if cols.size:
        kernel = _im2col_parallel if cols.size >= COLUMNS_PARALLEL_MIN_WORK else _im2col_serial
        kernel(x, cols, *params)
    return cols


def col2im(cols: np.ndarray, x_shape, kernel_size, stride, padding, dilation) -> np.ndarray:
    """Adjoint of :func:`im2col`: sum every column entry back into the image cell it came from."""
    x_shape = tuple(int(s) for s in x_shape)
    params = _geometry(x_shape, kernel_size, stride, padding, dilation)
    kh, kw, out_h, out_w = params[0], params[1], params[8], params[9]
    n, c = x_shape[:2]
    cols = np.ascontiguousarray(cols).reshape(c * kh * kw, n * out_h * out_w)
    dx = np.empty(x_shape, dtype=cols.dtype)
    if dx.size:
        kernel = _col2im_parallel if cols.size >= COLUMNS_PARALLEL_MIN_WORK else _col2im_serial
        kernel(cols, dx, *params)
    return dx
