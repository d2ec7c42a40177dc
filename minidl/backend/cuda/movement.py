"""Creation, copies, views and indexing on the device.

Nearly everything here is one kernel, :func:`_copy_strided`: it walks a shape and copies element
by element from one strided view to another, converting the dtype on the way (with 32-bit
offsets and no integer division, as the elementwise kernels walk broadcasts:
:mod:`.broadcast_index`). A transpose is a
copy with permuted source strides, a broadcast one with zero strides, a slice one with an offset
and scaled strides, a concatenation one copy per input into its slab of the output, a cast a
copy between dtypes.

Indexing with integer arrays (NumPy's "advanced indexing") adds one indirection: the index
arrays are broadcast together and stacked into a (K, I) table on the device, and the kernels
look up each output element's position in that table before computing its source offset.
Reading, writing and scatter-adding through an index share :func:`index_plan` and one device
function, so getitem, setitem\\_ and index_add agree on what an index means.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, uint32, uint64

from .allocator import allocate
from .broadcast_index import broadcast_walk, walk_offset
from .deferred_checks import take_slot
from .device import (
    DeviceArray, contiguous_strides, empty, launch, padded, read_flag, strided_offset,
    broadcast_strides,
)


@cuda.jit
def _copy_strided(count, sizes, magics, shifts, dst, dst_offset, dst_strides, src, src_offset,
                  src_strides):
    # Both views walked with 32-bit offsets and no division (see .broadcast_index).
    i = uint32(cuda.grid(1))
    while i < count:
        dst[dst_offset + walk_offset(i, sizes, magics, shifts, dst_strides)] = \
            src[src_offset + walk_offset(i, sizes, magics, shifts, src_strides)]
        i = uint32(i + cuda.gridsize(1))


@cuda.jit
def _copy_strided_64(count, shape, dst, dst_offset, dst_strides, src, src_offset, src_strides):
    # Views of 2**31 elements or more: 64-bit offsets, a division per axis.
    for i in range(cuda.grid(1), count, cuda.gridsize(1)):
        dst[strided_offset(i, shape, dst_strides, dst_offset)] = \
            src[strided_offset(i, shape, src_strides, src_offset)]


@cuda.jit
def _fill(out, count, value):
    i, end = uint64(cuda.grid(1)), uint64(count)
    while i < end:
        out[i] = value
        i += uint64(cuda.gridsize(1))


def copy_view(dst, dst_offset, dst_strides, src, src_offset, src_strides, shape) -> None:
    """Copy the ``shape``-d view of ``src`` into the view of ``dst`` (buffers and strides)."""
    count = math.prod(shape)
    if not count:
        return
    blocks, threads = launch(count)
    walk = broadcast_walk(shape, dst_strides, src_strides, offsets=(dst_offset, src_offset))
    if walk is None:
        _copy_strided_64[blocks, threads](count, padded(shape, 1), dst, dst_offset,
                                          padded(dst_strides, 0), src, src_offset,
                                          padded(src_strides, 0))
        return
    _copy_strided[blocks, threads](np.uint32(count), *walk[:3], dst, np.uint32(dst_offset),
                                   walk[3], src, np.uint32(src_offset), walk[4])


def _contiguous_copy(src: DeviceArray, shape, src_offset, src_strides, dtype=None) -> DeviceArray:
    out = empty(shape, dtype or src.dtype)
    copy_view(out.buffer, 0, contiguous_strides(shape), src.buffer, src_offset, src_strides,
              shape)
    return out


# -- creation ------------------------------------------------------------------------------------

def full(shape, value, dtype):
    """A new array of ``shape`` filled with ``value`` (a kernel argument, not a copy)."""
    out = empty(shape, dtype)
    fill_(out, value)
    return out


def zeros(shape, dtype):
    return full(shape, 0, dtype)


def astype(array, dtype):
    dtype = np.dtype(dtype)
    if array.dtype == dtype:
        return array
    return _contiguous_copy(array, array.shape, 0, contiguous_strides(array.shape), dtype)


def copy(array):
    out = empty(array.shape, array.dtype)
    out.buffer.copy_to_device(array.buffer)  # device to device
    return out


# -- in place and memory ---------------------------------------------------------------------------

def fill_(array, value):
    if array.size:
        blocks, threads = launch(array.size)
        _fill[blocks, threads](array.buffer, array.size, array.dtype.type(value))


def assign_(target, source):
    if not isinstance(source, DeviceArray):
        if not np.can_cast(np.min_scalar_type(source) if not isinstance(source, float)
                           else np.dtype(float), target.dtype, casting="same_kind"):
            raise ValueError(f"assign_: cannot cast {type(source).__name__} {source!r} into a "
                             f"{target.dtype} array")
        fill_(target, source)
        return
    if not np.can_cast(source.dtype, target.dtype, casting="same_kind"):
        raise ValueError(f"assign_: cannot cast {source.dtype} into {target.dtype} "
                         f"(same-kind casting)")
    strides = broadcast_strides(source.shape, target.shape)
    copy_view(target.buffer, 0, contiguous_strides(target.shape), source.buffer, 0, strides,
              target.shape)


def owns_memory(array) -> bool:
    return array.owner


# -- movement --------------------------------------------------------------------------------------

def reshape(x, shape):
    shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        if shape.count(-1) > 1 or known == 0 or x.size % known:
            raise ValueError(f"cannot reshape array of size {x.size} into shape {shape}")
        shape = tuple(x.size // known if n == -1 else n for n in shape)
    if math.prod(shape) != x.size:
        raise ValueError(f"cannot reshape array of size {x.size} into shape {shape}")
    return DeviceArray(x.buffer, shape, x.dtype, owner=False)


def transpose(x, axes):
    axes = tuple(int(a) % max(x.ndim, 1) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of {x.ndim} axes")
    if axes == tuple(range(x.ndim)):
        return x
    strides = contiguous_strides(x.shape)
    return _contiguous_copy(x, tuple(x.shape[a] for a in axes), 0,
                            tuple(strides[a] for a in axes))


def broadcast_to(x, shape):
    shape = tuple(int(n) for n in shape)
    if shape == x.shape:
        return DeviceArray(x.buffer, shape, x.dtype, owner=False)
    out = _contiguous_copy(x, shape, 0, broadcast_strides(x.shape, shape))
    # Materialised, but a broadcast all the same: the contract treats it as read-only, so
    # autograd copies it before handing it out as a gradient.
    out.owner = False
    return out


def concatenate(arrays, axis):
    arrays = list(arrays)
    first = arrays[0]
    axis = int(axis) % first.ndim
    for a in arrays[1:]:
        if a.ndim != first.ndim or any(n != m for i, (n, m) in enumerate(zip(a.shape, first.shape))
                                       if i != axis):
            raise ValueError(f"concatenate: shapes {first.shape} and {a.shape} differ off axis "
                             f"{axis}")
    dtype = np.result_type(*(a.dtype for a in arrays))
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = empty(shape, dtype)
    out_strides = contiguous_strides(shape)
    start = 0
    for a in arrays:
        copy_view(out.buffer, start * out_strides[axis], out_strides, a.buffer, 0,
                  contiguous_strides(a.shape), a.shape)
        start += a.shape[axis]
    return out


# -- indexing --------------------------------------------------------------------------------------

class IndexPlan:
    """Where ``x[index]`` reads from, for a C-ordered ``x``: output ``shape``; per output axis
    the source stride (0 on axes that come from index arrays) and the stride of the output
    coordinate within the index table (0 on the other axes); the base ``offset``; and the
    ``table`` (K, I) of index arrays with the ``sizes`` and ``strides`` of the K axes they
    select."""

    def __init__(self, shape, basic_strides, table_strides, offset, table, sizes, strides):
        self.shape, self.offset = tuple(shape), offset
        self.basic_strides, self.table_strides = tuple(basic_strides), tuple(table_strides)
        self.table, self.sizes, self.strides = table, tuple(sizes), tuple(strides)

    def kernel_arguments(self):
        table = self.table.buffer if self.table is not None else _NO_TABLE()
        width = self.table.shape[1] if self.table is not None else 0
        return (padded(self.shape, 1), padded(self.basic_strides, 0),
                padded(self.table_strides, 0), self.offset, table, width, len(self.sizes),
                padded(self.sizes, 1), padded(self.strides, 0))


_no_table_buffer = []


def _NO_TABLE():
    if not _no_table_buffer:
        _no_table_buffer.append(cuda.device_array(1, np.int64))
    return _no_table_buffer[0]


def index_plan(x_shape, index) -> IndexPlan:
    """Resolve ``index`` (ints, slices, None, Ellipsis, integer device arrays) against an array
    of ``x_shape`` by NumPy's rules."""
    if not isinstance(index, tuple):
        index = (index,)
    consuming = sum(1 for item in index if item is not None and item is not Ellipsis)
    if consuming > len(x_shape):
        raise IndexError(f"too many indices for an array of {len(x_shape)} dimensions")
    if sum(1 for item in index if item is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    expanded = []
    for item in index:
        if item is Ellipsis:
            expanded.extend([slice(None)] * (len(x_shape) - consuming))
        else:
            expanded.append(item)
    if Ellipsis not in index:
        expanded.extend([slice(None)] * (len(x_shape) - consuming))

    strides = contiguous_strides(x_shape)
    offset, axis = 0, 0
    dims = []  # (size, source stride) or "advanced"
    advanced, advanced_positions = [], []
    has_arrays = any(isinstance(item, DeviceArray) for item in expanded)
    for position, item in enumerate(expanded):
        if item is None:
            dims.append((1, 0))
            continue
        size, stride = x_shape[axis], strides[axis]
        if isinstance(item, DeviceArray):
            if item.dtype.kind not in "iu":
                raise IndexError(f"index arrays must be integers, got {item.dtype}")
            advanced.append((item, size, stride))
            advanced_positions.append(position)
            dims.append("advanced")
        elif isinstance(item, slice):
            start, stop, step = item.indices(size)
            dims.append((len(range(start, stop, step)), step * stride))
            offset += start * stride
        else:
            value = int(item)
            if not -size <= value < size:
                raise IndexError(f"index {value} is out of bounds for axis {axis} with size "
                                 f"{size}")
            offset += (value % size) * stride
            if has_arrays:
                advanced_positions.append(position)
        axis += 1

    if not advanced:
        shape = [d[0] for d in dims]
        return IndexPlan(shape, [d[1] for d in dims], [0] * len(dims), offset, None, (), ())
    try:
        table_shape = np.broadcast_shapes(*(a.shape for a, _, _ in advanced))
    except ValueError:
        raise IndexError("shape mismatch: index arrays could not be broadcast together with "
                         f"shapes {' '.join(str(a.shape) for a, _, _ in advanced)}") from None
    # NumPy puts the broadcast index axes where the index arrays were if they were adjacent,
    # else in front of all other axes.
    adjacent = advanced_positions == list(range(advanced_positions[0],
                                                advanced_positions[-1] + 1))
    basic = [d for d in dims if d != "advanced"]
    at = dims.index("advanced") if adjacent else 0
    if adjacent:
        before = [d for d in dims[:at] if d != "advanced"]
        basic_before, basic_after = before, basic[len(before):]
    else:
        basic_before, basic_after = [], basic
    table_strides_within = contiguous_strides(table_shape)
    shape = [d[0] for d in basic_before] + list(table_shape) + [d[0] for d in basic_after]
    basic_strides = [d[1] for d in basic_before] + [0] * len(table_shape) + \
        [d[1] for d in basic_after]
    table_strides = [0] * len(basic_before) + list(table_strides_within) + \
        [0] * len(basic_after)
    columns = [reshape(broadcast_to(astype(a, np.int64), table_shape), (1, math.prod(table_shape)))
               for a, _, _ in advanced]
    table = concatenate(columns, 0)
    return IndexPlan(shape, basic_strides, table_strides, offset, table,
                     [size for _, size, _ in advanced], [stride for _, _, stride in advanced])


@cuda.jit(device=True)
def _indexed_offset(flat, shape, basic_strides, table_strides, offset, table, width, k,
                    sizes, strides):
    """Source offset of output element ``flat`` under an :class:`IndexPlan`; -1 - axis when an
    index array holds an out-of-range value for that axis."""
    column = 0
    for axis in range(len(shape) - 1, -1, -1):
        coordinate = flat % shape[axis]
        flat //= shape[axis]
        offset += coordinate * basic_strides[axis]
        column += coordinate * table_strides[axis]
    for j in range(k):
        value = table[j * width + column]
        size = sizes[len(sizes) - k + j]
        if value < -size or value >= size:
            return -1
        if value < 0:
            value += size
        offset += value * strides[len(strides) - k + j]
    return offset


@cuda.jit
def _gather(count, out, src, shape, basic_strides, table_strides, offset, table, width, k,
            sizes, strides, bad, slot):
    for i in range(cuda.grid(1), count, cuda.gridsize(1)):
        source = _indexed_offset(i, shape, basic_strides, table_strides, offset, table, width, k,
                                 sizes, strides)
        if source < 0:
            bad[slot] = 1
        else:
            out[i] = src[source]


@cuda.jit
def _scatter_store(count, dst, values, value_strides, shape, basic_strides, table_strides,
                   offset, table, width, k, sizes, strides, bad, slot):
    for i in range(cuda.grid(1), count, cuda.gridsize(1)):
        target = _indexed_offset(i, shape, basic_strides, table_strides, offset, table, width, k,
                                 sizes, strides)
        if target < 0:
            bad[slot] = 1
        else:
            dst[target] = values[strided_offset(i, shape, value_strides, 0)]


@cuda.jit
def _scatter_add(count, dst, values, value_strides, shape, basic_strides, table_strides, offset,
                 table, width, k, sizes, strides, bad, slot):
    for i in range(cuda.grid(1), count, cuda.gridsize(1)):
        target = _indexed_offset(i, shape, basic_strides, table_strides, offset, table, width, k,
                                 sizes, strides)
        if target < 0:
            bad[slot] = 1
        else:
            # Repeated indices add up; atomics make concurrent adds to one cell safe (in an
            # unspecified order, as PyTorch's index_add_ on CUDA).
            cuda.atomic.add(dst, target, values[strided_offset(i, shape, value_strides, 0)])


@cuda.jit
def _zero_int(flag):
    flag[0] = 0


def error_flag():
    """A one-int device flag set to 0 (by a kernel: no host copy); kernels set it on bad input."""
    flag = allocate(1, np.int32)
    _zero_int[1, 1](flag)
    return flag


def _bad_index(position=None) -> IndexError:
    return IndexError("index out of range: an index array holds a value outside its axis")


def _check_flag(flag) -> None:
    if read_flag(flag):
        raise _bad_index()


def getitem(x, index):
    plan = index_plan(x.shape, index)
    count = math.prod(plan.shape)
    if plan.table is None:
        return _contiguous_copy(x, plan.shape, plan.offset, plan.basic_strides)
    out = empty(plan.shape, x.dtype)
    if count:
        bad = error_flag()
        blocks, threads = launch(count)
        _gather[blocks, threads](count, out.buffer, x.buffer, *plan.kernel_arguments(), bad, 0)
        _check_flag(bad)
    return out


def _scatter_into(target, index, values, accumulate):
    plan = index_plan(target.shape, index)
    count = math.prod(plan.shape)
    if not isinstance(values, DeviceArray):
        values = full((), values, target.dtype)
    values = astype(values, target.dtype)
    try:
        value_strides = broadcast_strides(values.shape, plan.shape)
    except ValueError:
        raise ValueError(f"could not broadcast values of shape {values.shape} into the "
                         f"selection of shape {tuple(plan.shape)}") from None
    if count:
        # An accumulation makes a new array (index_add: an embedding's gradient), so its range
        # check can wait for the next synchronisation (deferred_checks) with nothing of the
        # user's half-written; setitem_ writes the user's array in place and checks at once.
        deferred = accumulate and plan.table is not None
        bad, slot = take_slot(_bad_index) if deferred else (error_flag(), 0)
        blocks, threads = launch(count)
        kernel = _scatter_add if accumulate else _scatter_store
        kernel[blocks, threads](count, target.buffer, values.buffer, padded(value_strides, 0),
                                *plan.kernel_arguments(), bad, slot)
        if plan.table is not None and not deferred:
            _check_flag(bad)


def setitem_(array, index, value):
    _scatter_into(array, index, value, False)


def index_add(shape, index, values, dtype):
    out = zeros(shape, dtype)
    _scatter_into(out, index, values, True)
    return out
