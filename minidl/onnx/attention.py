"""The transformer operators of opset 23: Attention, RMSNormalization and RotaryEmbedding.

PyTorch's dynamo exporter writes a whole scaled dot-product attention as one ``Attention`` node
from opset 23 on. It is computed here from minidl ops, as the definition spells it out:

    Y = softmax(Q·Kᵀ · scale + bias) · V

with Q, K, V split into heads (3-D inputs carry heads × head size in their last axis), K and V
appended to the cache (``past_key``/``past_value``, returned as ``present_*``), key/value heads
repeated for grouped-query attention, and a ``bias`` that adds the mask (bool: −∞ where False;
float: added as is), the causal triangle (aligned to the bottom right when a cache precedes the
queries), a sliding window and padding. A row whose keys are all masked gives 0, not NaN.
``softcap`` squashes the scores to c·tanh(s/c) before the bias.
"""

from __future__ import annotations

import math

import numpy as np

from ..ops import elementwise as ew, linalg, nn_ops, reduction, shape
from .ops_shape import pad_constant
from .registry import computed_in_float32, host_result, onnx_op, optional


def _split_heads(x, heads):
    """(B, S, H·D) → (B, H, S, D)."""
    batch, length, hidden = x.shape
    return shape.permute(shape.reshape(x, (batch, length, heads, hidden // heads)), (0, 2, 1, 3))


def _repeat_heads(x, times):
    """(B, H, S, D) → (B, H·times, S, D), each head repeated ``times`` times in a row."""
    if times == 1:
        return x
    batch, heads, length, size = x.shape
    spread = shape.expand(shape.reshape(x, (batch, heads, 1, length, size)),
                          (batch, heads, times, length, size))
    return shape.reshape(spread, (batch, heads * times, length, size))


def _position_bias(attributes, q_length, kv_length, past, nonpad, dtype):
    """The causal triangle, sliding window and padding as an additive bias (0 or −∞)."""
    rows = np.arange(q_length).reshape(-1, 1)
    columns = np.arange(kv_length).reshape(1, -1)
    if nonpad is not None and past == 0:
        offset = (nonpad.reshape(-1) - q_length).reshape(-1, 1, 1, 1)  # per batch
    else:
        offset = past
    # Query i sits at absolute position i + offset; difference to key j.
    difference = rows + offset - columns
    allowed = np.ones(np.shape(difference), np.bool_)
    if attributes.get("is_causal", 0):
        allowed &= difference >= 0
    left, right = attributes.get("left_window_size", -1), attributes.get("right_window_size", -1)
    if left >= 0:
        allowed &= difference <= left
    if right >= 0:
        allowed &= -difference <= right
    if nonpad is not None:
        allowed = allowed & (columns < nonpad.reshape(-1, 1, 1, 1))
    return np.where(allowed, 0.0, -np.inf).astype(dtype)


def _mask_bias(mask, kv_length, like):
    """The attention mask as an additive bias, padded to the key length (bool: 0 / −∞)."""
    missing = kv_length - mask.shape[-1]
    if mask.dtype == np.bool_:
        values = mask.numpy()
        if missing > 0:
            values = np.pad(values, [(0, 0)] * (values.ndim - 1) + [(0, missing)])
        return host_result(np.where(values, 0.0, -np.inf).astype(like.dtype), like)
    if missing > 0:
        mask = pad_constant(mask, [0] * mask.ndim, [0] * (mask.ndim - 1) + [missing], -np.inf)
    return mask


@onnx_op("Attention")
@computed_in_float32
def _attention(inputs, attributes, context):
    q, k, v = inputs[:3]
    mask, past_key, past_value = optional(inputs, 3), optional(inputs, 4), optional(inputs, 5)
    nonpad = optional(inputs, 6)
    three_d = q.ndim == 3
    if three_d:
        q = _split_heads(q, attributes["q_num_heads"])
        k = _split_heads(k, attributes["kv_num_heads"])
        v = _split_heads(v, attributes["kv_num_heads"])
    scale = attributes.get("scale", 1.0 / math.sqrt(q.shape[3]))
    present_key = k if past_key is None else shape.cat([past_key, k], axis=2)
    present_value = v if past_value is None else shape.cat([past_value, v], axis=2)
    q_length, kv_length = q.shape[2], present_key.shape[2]
    past = 0 if past_key is None else past_key.shape[2]
    bias = host_result(_position_bias(attributes, q_length, kv_length, past,
                                      None if nonpad is None else nonpad.numpy(), q.dtype), q)
    if mask is not None:
        bias = ew.add(bias, _mask_bias(mask, kv_length, q))
    keys = _repeat_heads(present_key, q.shape[1] // present_key.shape[1])
    values = _repeat_heads(present_value, q.shape[1] // present_value.shape[1])
    scores = linalg.matmul(ew.mul(q, scale), shape.transpose(keys, -2, -1))
    softcap = attributes.get("softcap", 0.0)
    if softcap > 0:
        scores = ew.mul(ew.tanh(ew.div(scores, softcap)), softcap)
    with_bias = ew.add(scores, bias)
    # A row with every key masked: the definition gives 0 there, a plain softmax NaN.
    dead = np.isneginf(np.max(bias.numpy(), axis=-1, keepdims=True))
    if dead.any():
        dead = host_result(np.broadcast_to(dead, with_bias.shape), q)
        weights = shape.where(dead, 0.0, nn_ops.softmax(shape.where(dead, 0.0, with_bias), -1))
    else:
        weights = nn_ops.softmax(with_bias, -1)
    y = linalg.matmul(weights, values)
    if three_d:
        batch, heads, length, size = y.shape
        y = shape.reshape(shape.permute(y, (0, 2, 1, 3)), (batch, length, heads * size))
    if context.outputs == 1:
        return y
    mode = attributes.get("qk_matmul_output_mode", 0)
    qk = {2: with_bias, 3: weights}.get(mode, scores)
    return y, present_key, present_value, qk


@onnx_op("RMSNormalization")
def _rms_norm(inputs, attributes, context):
    """x / √(mean(x²) + eps) · scale, the mean over the axes from ``axis`` on."""
    x, scale = inputs
    axis = attributes.get("axis", -1) % x.ndim
    mean_square = reduction.mean(ew.mul(x, x), axis=tuple(range(axis, x.ndim)), keepdims=True)
    rms = ew.sqrt(ew.add(mean_square, attributes.get("epsilon", 1e-5)))
    return ew.mul(ew.div(x, rms), scale)


@onnx_op("RotaryEmbedding")
def _rotary_embedding(inputs, attributes, context):
    """Rotate pairs (x₁, x₂) of each head's first ``rotary_embedding_dim`` features by the
    angle whose cosine and sine the caches hold for each position:
    (x₁ cos − x₂ sin, x₁ sin + x₂ cos). Pairs are halves of the features, or neighbours
    (``interleaved``)."""
    x, cos, sin = inputs[:3]
    positions = optional(inputs, 3)
    four_d = x.ndim == 4
    original = x.shape
    if four_d:                                     # (B, H, S, D) → (B, S, H, D)
        x = shape.permute(x, (0, 2, 1, 3))
    else:                                          # (B, S, H·D) → (B, S, H, D)
        heads = attributes["num_heads"]
        x = shape.reshape(x, (x.shape[0], x.shape[1], heads, x.shape[2] // heads))
    size = x.shape[3]
    rotated = attributes.get("rotary_embedding_dim", 0) or size
    if positions is not None:
        index = positions.numpy().astype(np.int64)
        cos, sin = shape.getitem(cos, (index,)), shape.getitem(sin, (index,))
    cos, sin = shape.unsqueeze(cos, 2), shape.unsqueeze(sin, 2)   # one angle for all heads
    part, rest = x[:, :, :, :rotated], x[:, :, :, rotated:]
    interleaved = attributes.get("interleaved", 0)
    if interleaved:
        first, second = part[:, :, :, 0::2], part[:, :, :, 1::2]
    else:
        first, second = part[:, :, :, :rotated // 2], part[:, :, :, rotated // 2:]
    real = ew.sub(ew.mul(cos, first), ew.mul(sin, second))
    imaginary = ew.add(ew.mul(sin, first), ew.mul(cos, second))
    if interleaved:
        part = shape.reshape(shape.stack([real, imaginary], axis=-1), part.shape)
    else:
        part = shape.cat([real, imaginary], axis=-1)
    out = shape.cat([part, rest], axis=-1) if rest.shape[3] else part
    return shape.permute(out, (0, 2, 1, 3)) if four_d else shape.reshape(out, original)
