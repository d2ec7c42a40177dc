"""The plan's steps lowered onto preallocated NumPy buffers, for the Numba CPU backend.

A plan step that calls an op's ``forward`` allocates its result, and the backend primitives under
it allocate their temporaries: im2col's column matrix, the product, the product plus the bias,
the ReLU of that. At batch 1 a small CNN spends more time in those calls than in arithmetic. But
the plan knows every shape when it is built, so on the CPU the common steps can own their memory
and write into it:

* **Convolution** (groups 1) becomes two copies and one BLAS call into buffers made once. The
  input is copied into the interior of a zero-bordered buffer (the padding, written once). Then
  im2col needs no bounds tests: the column row of tap (c, i, j) is the padded images read from
  offset c·Hp·Wp + i·dh·Wp + j·dw with steps (C·Hp·Wp, sh·Wp, sw) over (image, row, column), a
  strided view, and all rows are one ``copyto`` of a 6-D view. With stride 1 each output row is computed over the whole padded
  width Wp instead of OW, so that a column row is *one* contiguous run of OH·Wp cells rather
  than OH runs of OW; the Wp - OW extra columns are garbage the next step never reads (it reads
  the output through a view that drops them). The bias rides in the product: the column matrix
  has a last row of ones and the weight matrix a last column of biases, so
  [W | b] @ [cols; 1] = W @ cols + b with no extra pass. A ReLU that follows is one in-place
  ``maximum``.
* **Max pooling** (and a ReLU after it) is one Numba call with no argmax, into its buffer
  (:mod:`minidl.backend.numba_cpu.eval_kernels`).
* **Linear** on a batch of vectors is one ``dot`` into its buffer and an in-place bias add.

Why here and not as ``out=`` forms of backend primitives: the contract would grow for every
backend (CUDA, the opaque test backend) to serve one caller, whereas the buffers are plain NumPy
arrays on this one backend. So the lowering lives next to the plan that uses it, and every other
backend runs the same plan through its primitives. A direct Numba convolution (no im2col) was
tried and measured 3-10x slower than this at batch 1: its inner loops over 14-28 output columns
are too short for its loop overhead, while BLAS does the arithmetic of both layers in ~8 µs.

A reshape of a buffer is a view made once at build time. Everything else runs through the op's
``forward`` as on any backend. Because buffers are reused, a call's results are copied out
before they are returned, and calls are serialised by a lock.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..ops.conv import Conv2dFunction
from ..ops.elementwise import ReluFunction
from ..ops.linalg import LinearFunction
from ..ops.pool import MaxPool2dFunction
from ..ops.shape import ReshapeFunction

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def lower_steps(steps, slots, specs, output_slots) -> dict:
    """For each step that can own its buffers, a runner ``run(slots)``: {step index: runner}.

    ``specs`` maps every slot to the (shape, dtype) it had in the traced run. A ReLU that is the
    only reader of a lowered step's result (not a model output, not through a reshape) is fused
    into that step, and a reshape of a buffer that stays a view is made once: such steps run
    nothing (their runner is None) and their slot is the producer's buffer or a view of it.
    """
    from ..backend.numba_cpu import eval_kernels, load_kernels  # Numba: when a plan is built
    load_kernels()  # the plan's other steps will call kernels too: load them all now

    readers = {}
    for step in steps:
        for slot in step.inputs:
            readers[slot] = readers.get(slot, 0) + 1
    runners, by_output = {}, {}
    for index, step in enumerate(steps):
        builder = _BUILDERS.get(step.op)
        lowered = builder(step, slots, specs, eval_kernels) if builder else None
        if lowered is not None:
            runners[index] = lowered
            step.note = "own buffer"
            by_output[step.output] = lowered
            continue
        source = by_output.get(step.inputs[0])
        if step.op is ReshapeFunction and source is not None:
            view = slots[step.inputs[0]].reshape(step.attrs["shape"])
            if np.shares_memory(view, slots[step.inputs[0]]):  # a view of a fixed buffer: fixed
                slots[step.output] = view
                by_output[step.output] = source
                runners[index] = None
                step.note = f"a view of %{step.inputs[0]}, made once"
            continue
        if step.op is ReluFunction and source is not None and slots[step.inputs[0]] is source.view \
                and readers[step.inputs[0]] == 1 and step.inputs[0] not in output_slots and \
                source.fuse_relu():
            slots[step.output] = slots[step.inputs[0]]
            by_output[step.output] = source
            runners[index] = None
            step.note = f"fused into the step writing %{step.inputs[0]}"
    # Hand-offs between neighbours, where the reader sees exactly the writer's array (not a
    # reshaped view of it).
    for runner in runners.values():
        source = by_output.get(getattr(runner, "read", None))
        if source is None or slots[runner.read] is not source.view:
            continue
        if isinstance(runner, _MaxPool) and isinstance(source, _Convolution):
            runner.read_rows_of(source)
        elif isinstance(runner, _Convolution) and isinstance(source, _MaxPool) and \
                readers[runner.read] == 1 and runner.read not in output_slots:
            source.write_into(runner)
    return runners


class _Lowered:
    """A step writing into its own buffer: ``slots[output]`` is that buffer (a view of it), set
    once at build time; ``run(slots)`` refreshes its values."""

    def fuse_relu(self) -> bool:
        return False


class _Convolution(_Lowered):
    def __init__(self, step, slots, specs):
        (n, channels, height, width), dtype = specs[step.inputs[0]]
        weight = slots[step.inputs[1]]
        out_channels, _, kh, kw = weight.shape
        (sh, sw), (ph, pw), (dh, dw) = (step.attrs[k] for k in ("stride", "padding", "dilation"))
        (_, _, out_h, out_w), _ = specs[step.output]
        hp, wp = height + 2 * ph, width + 2 * pw
        # Stride 1: each output row spans the padded width (one contiguous run per column row).
        row = wp if (sh, sw) == (1, 1) else out_w
        # Slack after the image: the last rows' unused columns read a little past its end.
        padded = np.zeros(n * channels * hp * wp + (kh * dh + 1) * wp + kw * dw, dtype)
        self.interior = padded[:n * channels * hp * wp].reshape(n, channels, hp, wp)[
            :, :, ph:ph + height, pw:pw + width]
        k = channels * kh * kw
        self.cols = np.empty((k + 1, n * out_h * row), dtype)
        self.cols[k] = 1  # the row of ones that carries the bias through the product
        item = padded.itemsize
        self.taps = as_strided(
            padded, shape=(channels, kh, kw, n, out_h, row),
            strides=(hp * wp * item, dh * wp * item, dw * item, channels * hp * wp * item,
                     sh * wp * item, sw * item), writeable=False)
        self.cols_taps = self.cols[:k].reshape(channels, kh, kw, n, out_h, row)
        bias = slots[step.inputs[2]] if len(step.inputs) == 3 else np.zeros(out_channels, dtype)
        self.matrix = np.concatenate([weight.reshape(out_channels, k), bias.reshape(-1, 1)], 1)
        self.out = np.empty((out_channels, n * out_h * row), dtype)
        # (O, N, OH, row) seen as (N, O, OH, OW): no copy, the unused columns dropped.
        self.view = slots[step.output] = self.out.reshape(out_channels, n, out_h, row).transpose(
            1, 0, 2, 3)[:, :, :, :out_w]
        # One image: the output with its unused columns is contiguous, (1, O, OH, row).
        self.rows = self.out.reshape(1, out_channels, out_h, row) if n == 1 else None
        self.read, self.relu, self.copy_input = step.inputs[0], False, True

    def fuse_relu(self) -> bool:
        self.relu = True
        return True

    def __call__(self, slots):
        if self.copy_input:
            np.copyto(self.interior, slots[self.read])
        np.copyto(self.cols_taps, self.taps)
        np.dot(self.matrix, self.cols, out=self.out)
        if self.relu:
            np.maximum(self.out, 0, out=self.out)


class _MaxPool(_Lowered):
    def __init__(self, step, slots, specs, kernels):
        shape, dtype = specs[step.output]
        kh, kw = step.attrs["kernel_size"]
        geometry = (kh, kw) + tuple(step.attrs["stride"]) + tuple(step.attrs["padding"]) + \
            tuple(step.attrs["dilation"])
        (_, _, height, width), _ = specs[step.inputs[0]]
        if geometry == (2, 2, 2, 2, 0, 0, 1, 1) and 2 * shape[2] <= height and \
                2 * shape[3] <= width:
            self.kernel, self.args = kernels.max_pool2x2_values_, ()
        else:
            self.kernel = kernels.max_pool2d_values_
            self.args = (np.empty(shape, np.int64), tuple(int(v) for v in geometry))
        self.out = self.view = slots[step.output] = np.empty(shape, dtype)
        self.read, self.relu, self.source = step.inputs[0], False, None

    def fuse_relu(self) -> bool:
        self.relu = True
        return True

    def read_rows_of(self, convolution) -> None:
        """Read a convolution's output rows whole, unused columns and all: the 2x2 kernel
        never reaches them (it reads columns < 2·OW <= OW_conv), and a contiguous input runs
        ~2.5x faster than the strided view that hides them."""
        if self.args == () and convolution.rows is not None:
            self.source = convolution.rows

    def write_into(self, convolution) -> None:
        """Write the maxima straight into the next convolution's padded input buffer, which
        then skips copying its input there."""
        self.out = convolution.interior
        convolution.copy_input = False

    def __call__(self, slots):
        source = slots[self.read] if self.source is None else self.source
        self.kernel(source, self.out, *self.args, self.relu)


class _Linear(_Lowered):
    def __init__(self, step, slots, specs):
        shape, dtype = specs[step.output]
        self.weight_t = np.ascontiguousarray(slots[step.inputs[1]].T)
        self.bias = slots[step.inputs[2]] if len(step.inputs) == 3 else None
        self.out = self.view = slots[step.output] = np.empty(shape, dtype)
        self.read, self.relu = step.inputs[0], False

    def fuse_relu(self) -> bool:
        self.relu = True
        return True

    def __call__(self, slots):
        np.dot(slots[self.read], self.weight_t, out=self.out)
        if self.bias is not None:
            np.add(self.out, self.bias, out=self.out)
        if self.relu:
            np.maximum(self.out, 0, out=self.out)


def _constant_floats(step, slots, specs) -> bool:
    """Every parameter is a constant and everything has one floating dtype (BLAS's)."""
    dtype = specs[step.inputs[0]][1]
    return dtype in _FLOATS and specs[step.output][1] == dtype and all(
        slots[i] is not None and slots[i].dtype == dtype for i in step.inputs[1:])


def _lower_conv(step, slots, specs, kernels):
    if step.attrs["groups"] != 1 or len(specs[step.inputs[0]][0]) != 4 or \
            not _constant_floats(step, slots, specs):
        return None
    return _Convolution(step, slots, specs)


def _lower_pool(step, slots, specs, kernels):
    shape, dtype = specs[step.inputs[0]]
    if dtype not in _FLOATS or len(shape) != 4:
        return None
    return _MaxPool(step, slots, specs, kernels)


def _lower_linear(step, slots, specs, kernels):
    if len(specs[step.inputs[0]][0]) != 2 or not _constant_floats(step, slots, specs):
        return None
    return _Linear(step, slots, specs)


_BUILDERS = {Conv2dFunction: _lower_conv, MaxPool2dFunction: _lower_pool,
             LinearFunction: _lower_linear}
