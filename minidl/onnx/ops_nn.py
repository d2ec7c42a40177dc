"""Convolution, pooling, normalisation and dropout, in 1-D, 2-D and 3-D, as ONNX defines them.

minidl's kernels are 2-D (``conv2d``, ``max_pool2d``, ``avg_pool2d``) with symmetric padding.
ONNX asks for more, and each extra is reduced to what the kernels do:

* padding that is asymmetric, given by ``auto_pad`` (SAME_UPPER/SAME_LOWER) or larger than half
  the kernel is applied explicitly first (:func:`.ops_shape.pad_constant`), then the op runs
  unpadded;
* 1-D is 2-D with a height of 1; 3-D convolution is a sum over the kernel's depth of 2-D
  convolutions of depth slices (each output depth folded into the batch);
* pooling beyond the fast kernels' reach (dilations, 1-D/3-D, large pads, MaxPool's indices)
  gathers each kernel offset's strided slice of the padded input and reduces over them;
* ConvTranspose is the adjoint of convolution: spread the input out with stride−1 zeros
  between elements, pad it by the kernel's reach, and convolve with the flipped kernel whose
  in/out channels are swapped.

Everything is built from differentiable minidl ops, so these nodes train.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..autograd.tensor import Tensor
from ..ops import conv, elementwise as ew, nn_ops, pool, reduction, shape
from ..random import resolve
from .ops_shape import pad_constant
from .registry import ONNX_OPS, host_result, onnx_op, optional, scalar_of

# -- geometry --------------------------------------------------------------------------------------


def _reach(kernel: int, dilation: int) -> int:
    """How many input positions one window spans."""
    return (kernel - 1) * dilation + 1


def _pads(attributes, sizes, kernel, strides, dilations):
    """(begins, ends) of the padding, from ``pads`` or computed as ``auto_pad`` asks.

    SAME_* pads so that out = ceil(in / stride); an odd total puts the extra element at the
    end (UPPER) or the beginning (LOWER).
    """
    spatial = len(sizes)
    auto_pad = attributes.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for n, k, s, d in zip(sizes, kernel, strides, dilations):
            out = math.ceil(n / s)
            total = max((out - 1) * s + _reach(k, d) - n, 0)
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        return begins, ends
    if auto_pad == "VALID":
        return [0] * spatial, [0] * spatial
    pads = list(attributes.get("pads", [0] * (2 * spatial)))
    return pads[:spatial], pads[spatial:]


def _geometry(x, attributes, kernel):
    spatial = x.ndim - 2
    strides = list(attributes.get("strides", [1] * spatial))
    dilations = list(attributes.get("dilations", [1] * spatial))
    begins, ends = _pads(attributes, x.shape[2:], kernel, strides, dilations)
    return strides, dilations, begins, ends


# -- convolution -----------------------------------------------------------------------------------

def _convolve(x, weight, bias, strides, dilations, begins, ends, groups):
    """N-D convolution (1-D, 2-D or 3-D) with explicit, possibly asymmetric, padding."""
    spatial = x.ndim - 2
    if spatial == 2 and begins == ends:
        return conv.conv2d(x, weight, bias, stride=tuple(strides), padding=tuple(begins),
                           dilation=tuple(dilations), groups=groups)
    x = pad_constant(x, [0, 0] + list(begins), [0, 0] + list(ends))
    if spatial == 1:
        y = conv.conv2d(shape.unsqueeze(x, 2), shape.unsqueeze(weight, 2), bias,
                        stride=(1, strides[0]), dilation=(1, dilations[0]), groups=groups)
        return shape.squeeze(y, 2)
    if spatial == 2:
        return conv.conv2d(x, weight, bias, stride=tuple(strides), dilation=tuple(dilations),
                           groups=groups)
    if spatial != 3:
        raise ValueError(f"Conv: {spatial}-D convolution is not supported (1-D to 3-D are)")
    n, channels, depth = x.shape[:3]
    out_depth = (depth - _reach(weight.shape[2], dilations[0])) // strides[0] + 1
    total = None
    for k in range(weight.shape[2]):
        # Input depths k·d, k·d + s, … meet kernel depth k; fold them into the batch.
        start = k * dilations[0]
        part = shape.getitem(x, (slice(None), slice(None),
                                 slice(start, start + strides[0] * (out_depth - 1) + 1,
                                       strides[0])))
        part = shape.reshape(shape.permute(part, (0, 2, 1, 3, 4)), (n * out_depth, channels)
                             + x.shape[3:])
        term = conv.conv2d(part, weight[:, :, k], None, stride=tuple(strides[1:]),
                           dilation=tuple(dilations[1:]), groups=groups)
        total = term if total is None else ew.add(total, term)
    total = shape.reshape(total, (n, out_depth) + total.shape[1:])
    total = shape.permute(total, (0, 2, 1, 3, 4))
    if bias is not None:
        total = ew.add(total, shape.reshape(bias, (1, -1, 1, 1, 1)))
    return total


@onnx_op("Conv")
def _conv(inputs, attributes, context):
    x, weight, bias = inputs[0], inputs[1], optional(inputs, 2)
    kernel = list(attributes.get("kernel_shape", weight.shape[2:]))
    strides, dilations, begins, ends = _geometry(x, attributes, kernel)
    return _convolve(x, weight, bias, strides, dilations, begins, ends, attributes.get("group", 1))


def _spread(x, axis: int, stride: int):
    """stride−1 zeros between consecutive elements along ``axis`` (the transpose of striding)."""
    if stride == 1:
        return x
    n = x.shape[axis]
    column = shape.unsqueeze(x, axis + 1)
    zeros = list(column.shape)
    zeros[axis + 1] = stride - 1
    spread = shape.cat([column, host_result(np.zeros(zeros, x.dtype), x)], axis=axis + 1)
    merged = list(x.shape)
    merged[axis] = n * stride
    spread = shape.reshape(spread, tuple(merged))
    return shape.getitem(spread, (slice(None),) * axis + (slice(0, (n - 1) * stride + 1),))


@onnx_op("ConvTranspose")
def _conv_transpose(inputs, attributes, context):
    x, weight, bias = inputs[0], inputs[1], optional(inputs, 2)
    spatial, groups = x.ndim - 2, attributes.get("group", 1)
    kernel = list(attributes.get("kernel_shape", weight.shape[2:]))
    strides = list(attributes.get("strides", [1] * spatial))
    dilations = list(attributes.get("dilations", [1] * spatial))
    extra = list(attributes.get("output_padding", [0] * spatial))
    sizes = x.shape[2:]
    full = [s * (n - 1) + e + _reach(k, d)
            for n, s, e, k, d in zip(sizes, strides, extra, kernel, dilations)]
    auto_pad = attributes.get("auto_pad", "NOTSET")
    wanted = attributes.get("output_shape")
    if wanted is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = [n * s for n, s in zip(sizes, strides)]
    if wanted is not None:
        wanted = list(wanted)[-spatial:]
        totals = [f - w for f, w in zip(full, wanted)]
        upper = auto_pad == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
        ends = [t - b for t, b in zip(totals, begins)]
    else:
        pads = list(attributes.get("pads", [0] * (2 * spatial)))
        begins, ends = pads[:spatial], pads[spatial:]
    for axis, stride in enumerate(strides):
        x = _spread(x, axis + 2, stride)
    reach = [_reach(k, d) - 1 for k, d in zip(kernel, dilations)]
    x = pad_constant(x, [0, 0] + [r - b for r, b in zip(reach, begins)],
                     [0, 0] + [r - e + o for r, e, o in zip(reach, ends, extra)])
    # weight (C, O/g, k…) → per group (O/g, C/g, k…), flipped in space: the adjoint's kernel.
    channels, out_per_group = weight.shape[:2]
    flipped = shape.getitem(weight, (slice(None), slice(None))
                            + (slice(None, None, -1),) * spatial)
    grouped = shape.reshape(flipped, (groups, channels // groups, out_per_group) + weight.shape[2:])
    swapped = shape.permute(grouped, (0, 2, 1) + tuple(range(3, 3 + spatial)))
    kernel_t = shape.reshape(swapped, (groups * out_per_group, channels // groups)
                             + weight.shape[2:])
    zeros = [0] * spatial
    return _convolve(x, kernel_t, bias, [1] * spatial, dilations, zeros, zeros, groups)


# -- pooling ---------------------------------------------------------------------------------------

def _pool_sizes(sizes, kernel, strides, dilations, begins, ends, ceil_mode):
    """Output sizes; with ceil_mode the last window may overhang, but must start inside."""
    out = []
    for n, k, s, d, b, e in zip(sizes, kernel, strides, dilations, begins, ends):
        span = n + b + e - _reach(k, d)
        count = (math.ceil(span / s) if ceil_mode else span // s) + 1
        if ceil_mode and (count - 1) * s >= n + b:
            count -= 1
        out.append(count)
    return out


def _windows(x, kernel, strides, dilations, out_sizes):
    """One strided slice of the (padded) input per kernel offset, each of the output's shape."""
    for offset in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(o * d, o * d + s * (m - 1) + 1, s)
                      for o, d, s, m in zip(offset, dilations, strides, out_sizes))
        yield offset, (slice(None), slice(None)) + index


def _padded_for_pooling(x, begins, ends, out_sizes, kernel, strides, dilations, value):
    """x padded by the pads and, where ceil_mode's last window overhangs, by the overhang."""
    overhang = [max((m - 1) * s + _reach(k, d) - (n + b + e), 0)
                for m, s, k, d, n, b, e in zip(out_sizes, strides, kernel, dilations,
                                               x.shape[2:], begins, ends)]
    return pad_constant(x, [0, 0] + list(begins),
                        [0, 0] + [e + o for e, o in zip(ends, overhang)], value), overhang


def _pool_attributes(x, attributes):
    kernel = list(attributes["kernel_shape"])
    strides, dilations, begins, ends = _geometry(x, attributes, kernel)
    ceil_mode = bool(attributes.get("ceil_mode", 0))
    out_sizes = _pool_sizes(x.shape[2:], kernel, strides, dilations, begins, ends, ceil_mode)
    return kernel, strides, dilations, begins, ends, ceil_mode, out_sizes


def _fits_2d_kernel(x, kernel, begins, ends, dilations, average):
    return (x.ndim == 4 and begins == ends and all(b <= k // 2 for b, k in zip(begins, kernel))
            and (not average or dilations == [1, 1]) and x.dtype.kind == "f")


@onnx_op("MaxPool")
def _max_pool(inputs, attributes, context):
    x = inputs[0]
    kernel, strides, dilations, begins, ends, ceil_mode, out_sizes = _pool_attributes(x, attributes)
    if context.outputs == 1 and _fits_2d_kernel(x, kernel, begins, ends, dilations, False):
        return pool.max_pool2d(x, tuple(kernel), stride=tuple(strides), padding=tuple(begins),
                               dilation=tuple(dilations), ceil_mode=ceil_mode)
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded, _ = _padded_for_pooling(x, begins, ends, out_sizes, kernel, strides, dilations,
                                    lowest)
    windows = list(_windows(x, kernel, strides, dilations, out_sizes))
    values = reduction.amax(shape.stack([padded[index] for _, index in windows]), axis=0)
    if context.outputs == 1:
        return values
    return values, host_result(_max_pool_indices(x, padded, windows, begins, dilations, strides,
                                                 attributes.get("storage_order", 0)), x)


def _max_pool_indices(x, padded, windows, begins, dilations, strides, storage_order):
    """MaxPool's second output: where each maximum came from, as an index into the flattened
    input (spatial axes in row-major order, or column-major for storage_order=1)."""
    stacked = np.stack([padded.numpy()[index] for _, index in windows])
    winner = np.argmax(stacked, axis=0)                      # first of tied maxima, as ONNX
    offsets = np.array([offset for offset, _ in windows])[winner]   # (..., spatial)
    n, channels = x.shape[:2]
    sizes = x.shape[2:]
    grids = np.indices(winner.shape)
    coordinates = [grids[2 + i] * strides[i] + offsets[..., i] * dilations[i] - begins[i]
                   for i in range(len(sizes))]
    if storage_order:
        coordinates, sizes = coordinates[::-1], sizes[::-1]
    flat = grids[0] * channels + grids[1]
    for coordinate, size in zip(coordinates, sizes):
        flat = flat * size + coordinate
    return flat.astype(np.int64)


@onnx_op("AveragePool")
def _average_pool(inputs, attributes, context):
    x = inputs[0]
    kernel, strides, dilations, begins, ends, ceil_mode, out_sizes = _pool_attributes(x, attributes)
    include_pad = bool(attributes.get("count_include_pad", 0))
    if _fits_2d_kernel(x, kernel, begins, ends, dilations, True):
        return pool.avg_pool2d(x, tuple(kernel), stride=tuple(strides), padding=tuple(begins),
                               ceil_mode=ceil_mode, count_include_pad=include_pad)
    padded, overhang = _padded_for_pooling(x, begins, ends, out_sizes, kernel, strides,
                                           dilations, 0.0)
    windows = list(_windows(x, kernel, strides, dilations, out_sizes))
    total = reduction.sum(shape.stack([padded[index] for _, index in windows]), axis=0)
    # Each window divides by the elements it counts: the input's own (count_include_pad=0) or
    # those and the explicit pads (=1); ceil_mode's overhang is never counted.
    counted = np.ones(x.shape[2:], np.float64)
    if include_pad:
        counted = np.pad(counted, [(b, e) for b, e in zip(begins, ends)], constant_values=1)
        counted = np.pad(counted, [(0, o) for o in overhang])
    else:
        counted = np.pad(counted, [(b, e + o) for b, e, o in zip(begins, ends, overhang)])
    counts = sum(counted[index[2:]] for _, index in windows)
    return ew.div(total, host_result(np.maximum(counts, 1).astype(x.dtype), x))


@onnx_op("LpPool")
def _lp_pool(inputs, attributes, context):
    """(Σ |x|ᵖ)^(1/p) over each window (pads count as zeros)."""
    x = inputs[0]
    p = attributes.get("p", 2)
    kernel, strides, dilations, begins, ends, ceil_mode, out_sizes = _pool_attributes(x, attributes)
    powered = ew.pow(ew.abs(x), float(p))
    padded, _ = _padded_for_pooling(powered, begins, ends, out_sizes, kernel, strides, dilations,
                                    0.0)
    windows = [padded[index] for _, index in _windows(x, kernel, strides, dilations, out_sizes)]
    return ew.pow(reduction.sum(shape.stack(windows), axis=0), 1.0 / p)


@onnx_op("GlobalLpPool")
def _global_lp_pool(inputs, attributes, context):
    x, p = inputs[0], attributes.get("p", 2)
    total = reduction.sum(ew.pow(ew.abs(x), float(p)), axis=tuple(range(2, x.ndim)),
                          keepdims=True)
    return ew.pow(total, 1.0 / p)


@onnx_op("GlobalAveragePool")
def _global_average_pool(inputs, attributes, context):
    x = inputs[0]
    return reduction.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@onnx_op("GlobalMaxPool")
def _global_max_pool(inputs, attributes, context):
    x = inputs[0]
    return reduction.amax(x, axis=tuple(range(2, x.ndim)), keepdims=True)


# -- normalisation ---------------------------------------------------------------------------------

def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def _normalize(x, axes, eps):
    """(x − mean)/√(var + eps) over ``axes`` (biased variance), with the mean and 1/√(var+eps)."""
    mean = reduction.mean(x, axis=axes, keepdims=True)
    centered = ew.sub(x, mean)
    variance = reduction.mean(ew.mul(centered, centered), axis=axes, keepdims=True)
    inverse_std = ew.div(1.0, ew.sqrt(ew.add(variance, eps)))
    return ew.mul(centered, inverse_std), mean, variance, inverse_std


@onnx_op("BatchNormalization")
def _batch_norm(inputs, attributes, context):
    x, scale, bias, mean, var = inputs[:5]
    eps, momentum = attributes.get("epsilon", 1e-5), attributes.get("momentum", 0.9)
    if attributes.get("training_mode", 0):
        # The file asks for training-mode outputs: batch statistics normalise, and the
        # running statistics come out as new values (ONNX's momentum weighs the old ones).
        axes = (0,) + tuple(range(2, x.ndim))
        normalized, batch_mean, batch_var, _ = _normalize(x, axes, eps)
        y = ew.add(ew.mul(normalized, shape.reshape(scale, _channel_shape(x))),
                   shape.reshape(bias, _channel_shape(x)))
        new_mean = ew.add(ew.mul(mean, momentum),
                          ew.mul(shape.reshape(batch_mean, (-1,)), 1.0 - momentum))
        new_var = ew.add(ew.mul(var, momentum),
                         ew.mul(shape.reshape(batch_var, (-1,)), 1.0 - momentum))
        return y, new_mean, new_var
    # An inference graph imported for training: batch statistics while the module trains, the
    # running ones (updated in place, PyTorch's momentum = 1 − ONNX's) in evaluation.
    return nn_ops.batch_norm(x, mean, var, scale, bias, training=context.training,
                             momentum=1.0 - momentum, eps=eps)


@onnx_op("InstanceNormalization")
def _instance_norm(inputs, attributes, context):
    x, scale, bias = inputs
    normalized, *_ = _normalize(x, tuple(range(2, x.ndim)), attributes.get("epsilon", 1e-5))
    return ew.add(ew.mul(normalized, shape.reshape(scale, _channel_shape(x))),
                  shape.reshape(bias, _channel_shape(x)))


@onnx_op("LayerNormalization")
def _layer_norm(inputs, attributes, context):
    x, scale, bias = inputs[0], inputs[1], optional(inputs, 2)
    axis = attributes.get("axis", -1) % x.ndim
    eps = attributes.get("epsilon", 1e-5)
    normalized = x.shape[axis:]
    if context.outputs == 1 and scale.shape == normalized and \
            (bias is None or bias.shape == normalized):
        bias = bias if bias is not None else Tensor(np.zeros(scale.shape, scale.dtype),
                                                    device=x.device)
        return nn_ops.layer_norm(x, normalized, scale, bias, eps=eps)
    # Scale and bias broadcast against the normalised axes; Mean and InvStdDev are outputs too.
    y, mean, _, inverse_std = _normalize(x, tuple(range(axis, x.ndim)), eps)
    y = ew.mul(y, scale)
    if bias is not None:
        y = ew.add(y, bias)
    return (y, mean, inverse_std)[:context.outputs]


@onnx_op("GroupNormalization")
def _group_norm(inputs, attributes, context):
    """Normalise each of ``num_groups`` groups of channels over its channels and positions;
    scale and bias per channel (opset 21) or per group (opset 18)."""
    x, scale, bias = inputs
    groups = attributes["num_groups"]
    n, channels = x.shape[:2]
    grouped = shape.reshape(x, (n, groups, -1))
    normalized, *_ = _normalize(grouped, (2,), attributes.get("epsilon", 1e-5))
    if scale.shape[0] == groups and groups != channels:  # opset 18: one value per group
        normalized = ew.add(ew.mul(normalized, shape.reshape(scale, (1, groups, 1))),
                            shape.reshape(bias, (1, groups, 1)))
        return shape.reshape(normalized, x.shape)
    normalized = shape.reshape(normalized, x.shape)
    return ew.add(ew.mul(normalized, shape.reshape(scale, _channel_shape(x))),
                  shape.reshape(bias, _channel_shape(x)))


@onnx_op("MeanVarianceNormalization")
def _mean_variance_norm(inputs, attributes, context):
    x = inputs[0]
    axes = tuple(a % x.ndim for a in attributes.get("axes", [0, 2, 3]))
    normalized, *_ = _normalize(x, axes, 1e-9)
    return normalized


@onnx_op("LpNormalization")
def _lp_norm(inputs, attributes, context):
    x = inputs[0]
    axis, p = attributes.get("axis", -1) % x.ndim, attributes.get("p", 2)
    if p == 1:
        norm = reduction.sum(ew.abs(x), axis=axis, keepdims=True)
    else:
        norm = ew.sqrt(reduction.sum(ew.mul(x, x), axis=axis, keepdims=True))
    # A zero vector stays zero (its norm is 0): divide by 1 there instead.
    zero = host_result(norm.numpy() == 0, x)
    return ew.div(x, shape.where(zero, 1.0, norm))


@onnx_op("LRN")
def _local_response_norm(inputs, attributes, context):
    """x / (bias + α/size · Σ x²)^β, the sum over ``size`` neighbouring channels."""
    x = inputs[0]
    size = attributes["size"]
    alpha, beta = attributes.get("alpha", 1e-4), attributes.get("beta", 0.75)
    bias = attributes.get("bias", 1.0)
    squares = ew.mul(x, x)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = pad_constant(squares, [0, before] + [0] * (x.ndim - 2),
                          [0, after] + [0] * (x.ndim - 2))
    channels = x.shape[1]
    total = None
    for shift in range(size):
        part = padded[:, shift:shift + channels]
        total = part if total is None else ew.add(total, part)
    return ew.mul(x, ew.pow(ew.add(ew.mul(total, alpha / size), bias), -beta))


# -- dropout ---------------------------------------------------------------------------------------

@onnx_op("Dropout")
def _dropout(inputs, attributes, context):
    """Identity in evaluation; in training (the module's mode, or the node's training_mode
    input) each element is zeroed with probability ``ratio`` and the rest scaled by
    1/(1 − ratio). The second output is the mask of kept elements."""
    x = inputs[0]
    given_ratio, given_mode = optional(inputs, 1), optional(inputs, 2)
    ratio = float(scalar_of(given_ratio)) if given_ratio is not None else \
        attributes.get("ratio", 0.5)
    training = context.training or (given_mode is not None and bool(scalar_of(given_mode)))
    if not 0.0 <= ratio < 1.0 and training:
        raise ValueError(f"Dropout: ratio must be in [0, 1), got {ratio}")
    if not training or ratio == 0.0:
        if context.outputs == 1:
            return x
        return x, host_result(np.ones(x.shape, np.bool_), x)
    # The global generator draws the mask on x's device, so a checkpoint that saves the
    # generator resumes exactly; kept elements are scaled by 1/(1 − ratio).
    be = x.backend
    keep = resolve(None).bernoulli(1.0 - ratio, x.shape, device=x.device)
    scale = be.where(keep, be.full((), 1.0 / (1.0 - ratio), x.dtype), be.zeros((), x.dtype))
    y = ew.mul(x, Tensor._wrap(scale, x.device))
    return y if context.outputs == 1 else (y, Tensor._wrap(keep, x.device))


ONNX_OPS["Dropout"] = _dropout
