"""The recurrent ONNX operators — RNN, GRU, LSTM — unrolled over time with minidl ops.

Each step is a few matrix products and activations, so the unrolled graph differentiates like
any other (backpropagation through time). With H the previous hidden state and x the input:

* RNN:  H' = f(x·Wᵀ + H·Rᵀ + Wb + Rb)
* GRU:  z, r = f(…) gates; h̃ = g(x·Whᵀ + (r ⊙ H)·Rhᵀ + Rbh + Wbh) (or r ⊙ (H·Rhᵀ + Rbh) with
  ``linear_before_reset``); H' = (1 − z) ⊙ h̃ + z ⊙ H
* LSTM: i, o, f gates (with optional peepholes on the cell C), c̃ = g(…);
  C' = f ⊙ C + i ⊙ c̃; H' = o ⊙ h(C')

Gate blocks are stacked in ONNX's orders (GRU: z r h; LSTM: i o f c). ``direction`` runs the
sequence forwards, backwards or both (outputs stacked on a direction axis); ``sequence_lens``
freezes each sequence's state after its length and writes zeros there; ``layout`` 1 puts the
batch axis first; ``clip`` bounds the gates' inputs.
"""

from __future__ import annotations

import numpy as np

from ..ops import elementwise as ew, linalg, shape
from .registry import host_result, onnx_op, optional

# name -> (function of (x, alpha, beta), default alpha, default beta); None: not used.
_ACTIVATIONS = {
    "sigmoid": (lambda x, a, b: ew.sigmoid(x), None, None),
    "tanh": (lambda x, a, b: ew.tanh(x), None, None),
    "relu": (lambda x, a, b: ew.relu(x), None, None),
    "leakyrelu": (lambda x, a, b: ew.sub(ew.relu(x), ew.mul(ew.relu(ew.neg(x)), a)), 0.01,
                  None),
    "thresholdedrelu": (lambda x, a, b: shape.where(ew.gt(x, a), x, 0.0), 1.0, None),
    "scaledtanh": (lambda x, a, b: ew.mul(ew.tanh(ew.mul(x, b)), a), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: ew.clamp(ew.add(ew.mul(x, a), b), min=0.0, max=1.0), 0.2,
                    0.5),
    "elu": (lambda x, a, b: shape.where(ew.gt(x, 0.0), x,
                                        ew.mul(ew.sub(ew.exp(ew.minimum(x, 0.0)), 1.0), a)),
            1.0, None),
    "softsign": (lambda x, a, b: ew.div(x, ew.add(ew.abs(x), 1.0)), None, None),
    "softplus": (lambda x, a, b: ew.add(ew.relu(x),
                                        ew.log(ew.add(ew.exp(ew.neg(ew.abs(x))), 1.0))),
                 None, None),
    "affine": (lambda x, a, b: ew.add(ew.mul(x, a), b), 1.0, 0.0),
}


def _activations(attributes, defaults, directions):
    """One list of activation callables per direction, alpha/beta consumed in order."""
    names = attributes.get("activations") or defaults * directions
    alphas = list(attributes.get("activation_alpha", []))
    betas = list(attributes.get("activation_beta", []))
    chosen = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {name!r}")
        function, alpha, beta = _ACTIVATIONS[key]
        alpha = alphas.pop(0) if alpha is not None and alphas else alpha
        beta = betas.pop(0) if beta is not None and betas else beta
        chosen.append(lambda x, f=function, a=alpha, b=beta: f(x, a, b))
    per = len(defaults)
    return [chosen[d * per:(d + 1) * per] for d in range(directions)]


def _gate_blocks(tensor, count):
    """Split the last axis into ``count`` equal gate blocks."""
    size = tensor.shape[-1] // count
    return [tensor[..., i * size:(i + 1) * size] for i in range(count)]


def _clip(x, limit):
    return x if limit is None else ew.clamp(x, min=-limit, max=limit)


def _run(kind, inputs, attributes, context):
    x, weight, recurrence = inputs[:3]
    bias, lengths = optional(inputs, 3), optional(inputs, 4)
    initial_h, initial_c = optional(inputs, 5), optional(inputs, 6)
    peepholes = optional(inputs, 7)
    batch_first = attributes.get("layout", 0) == 1
    if batch_first:
        x = shape.permute(x, (1, 0, 2))
        initial_h = None if initial_h is None else shape.permute(initial_h, (1, 0, 2))
        initial_c = None if initial_c is None else shape.permute(initial_c, (1, 0, 2))
    steps, batch = x.shape[:2]
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    hidden = recurrence.shape[-1]
    direction = attributes.get("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
    activations = _activations(attributes, defaults, directions)
    limit = attributes.get("clip")
    length = lengths.numpy().astype(np.int64) if lengths is not None else \
        np.full(batch, steps, np.int64)
    outputs, finals, cells = [], [], []
    for d in range(directions):
        backwards = direction == "reverse" or d == 1
        w, r = weight[d], recurrence[d]
        if bias is not None:
            w_bias, r_bias = bias[d][:gates * hidden], bias[d][gates * hidden:]
        else:
            w_bias = r_bias = host_result(np.zeros(gates * hidden, x.dtype), x)
        # Every step's input projection at once: (S, B, G·H).
        projected = ew.add(linalg.matmul(x, shape.transpose(w, 0, 1)), w_bias)
        h = initial_h[d] if initial_h is not None else \
            host_result(np.zeros((batch, hidden), x.dtype), x)
        c = initial_c[d] if initial_c is not None else \
            host_result(np.zeros((batch, hidden), x.dtype), x)
        p = _gate_blocks(peepholes[d], 3) if peepholes is not None else None
        f = activations[d]
        ys = [None] * steps
        for t in (range(steps - 1, -1, -1) if backwards else range(steps)):
            inside = host_result((t < length).reshape(batch, 1), x)  # still in the sequence
            if kind == "GRU":
                new_h = _gru_step(projected[t], h, r, r_bias, f, limit, hidden,
                                  attributes.get("linear_before_reset", 0))
            elif kind == "LSTM":
                new_h, new_c = _lstm_step(projected[t], h, c, r, r_bias, p, f, limit,
                                          attributes.get("input_forget", 0))
                c = shape.where(inside, new_c, c)
            else:
                recurrent = ew.add(linalg.matmul(h, shape.transpose(r, 0, 1)), r_bias)
                new_h = f[0](_clip(ew.add(projected[t], recurrent), limit))
            h = shape.where(inside, new_h, h)
            ys[t] = shape.where(inside, h, 0.0)
        outputs.append(shape.stack(ys))   # (S, B, H)
        finals.append(h)
        cells.append(c)
    y = shape.stack(outputs, axis=1)      # (S, D, B, H)
    y_h, y_c = shape.stack(finals), shape.stack(cells)
    if batch_first:
        y = shape.permute(y, (2, 0, 1, 3))
        y_h, y_c = shape.permute(y_h, (1, 0, 2)), shape.permute(y_c, (1, 0, 2))
    results = (y, y_h, y_c) if kind == "LSTM" else (y, y_h)
    return results[:context.outputs] if context.outputs > 1 else y


def _gru_step(projected, h, r, r_bias, f, limit, hidden, linear_before_reset):
    xz, xr, xh = _gate_blocks(projected, 3)
    rz, rr, rh = r[:hidden], r[hidden:2 * hidden], r[2 * hidden:]   # R stacks gates on rows
    bz, br, bh = _gate_blocks(r_bias, 3)
    z = f[0](_clip(ew.add(xz, ew.add(linalg.matmul(h, shape.transpose(rz, 0, 1)), bz)), limit))
    reset = f[0](_clip(ew.add(xr, ew.add(linalg.matmul(h, shape.transpose(rr, 0, 1)), br)),
                       limit))
    if linear_before_reset:
        recurrent = ew.mul(reset, ew.add(linalg.matmul(h, shape.transpose(rh, 0, 1)), bh))
    else:
        recurrent = ew.add(linalg.matmul(ew.mul(reset, h), shape.transpose(rh, 0, 1)), bh)
    candidate = f[1](_clip(ew.add(xh, recurrent), limit))
    return ew.add(ew.mul(ew.sub(1.0, z), candidate), ew.mul(z, h))


def _lstm_step(projected, h, c, r, r_bias, peepholes, f, limit, input_forget):
    total = ew.add(projected, ew.add(linalg.matmul(h, shape.transpose(r, 0, 1)), r_bias))
    i, o, forget, candidate = _gate_blocks(total, 4)
    if peepholes is not None:
        i = ew.add(i, ew.mul(peepholes[0], c))
        forget = ew.add(forget, ew.mul(peepholes[2], c))
    i = f[0](_clip(i, limit))
    forget = ew.sub(1.0, i) if input_forget else f[0](_clip(forget, limit))
    new_c = ew.add(ew.mul(forget, c), ew.mul(i, f[1](_clip(candidate, limit))))
    if peepholes is not None:
        o = ew.add(o, ew.mul(peepholes[1], new_c))
    o = f[0](_clip(o, limit))
    return ew.mul(o, f[2](new_c)), new_c


@onnx_op("RNN")
def _rnn(inputs, attributes, context):
    return _run("RNN", inputs, attributes, context)


@onnx_op("GRU")
def _gru(inputs, attributes, context):
    return _run("GRU", inputs, attributes, context)


@onnx_op("LSTM")
def _lstm(inputs, attributes, context):
    return _run("LSTM", inputs, attributes, context)
