"""RNN, LSTM and GRU layers (and their one-step cells) with PyTorch's arguments, parameter
names and shapes, and returns.

Parameters per layer k and direction (suffix ``_reverse`` for the backward one):
``weight_ih_l{k}`` (G·H, in), ``weight_hh_l{k}`` (G·H, H), ``bias_ih_l{k}``, ``bias_hh_l{k}``
(G·H,), with G = 1 (RNN), 3 (GRU: reset, update, new) or 4 (LSTM: input, forget, cell, output),
all initialised U(-1/√H, 1/√H) as in PyTorch. An LSTM with ``proj_size`` P > 0 also has
``weight_hr_l{k}`` (P, H): its state h is the cell's output projected to P features, so
``weight_hh`` is (4H, P) and the outputs and h_n have P features. Inputs are (T, N, in) --
(N, T, in) with ``batch_first`` -- or one unbatched sequence (T, in). ``dropout`` applies
between stacked layers in training. Each direction of each layer is one op (see
:mod:`minidl.ops.recurrent`); with a projection, one op per step and the projection.
"""

from __future__ import annotations

import math

import numpy as np

from ...autograd.tensor import Tensor
from ...ops.linalg import linear
from ...ops.nn_ops import dropout
from ...ops.recurrent import recurrence
from ...ops.shape import cat, stack
from .. import init
from ..module import Module
from ..parameter import Parameter
from ..registry import register_module

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _check_sizes(owner: str, nonlinearity: str, **sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}: {name} must be an int >= 1, got {value!r}")
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"{owner}: nonlinearity must be 'tanh' or 'relu', got "
                         f"{nonlinearity!r}")


class _RecurrentLayer(Module):
    mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, nonlinearity: str = "tanh", dtype=np.float32,
                 proj_size: int = 0):
        super().__init__()
        _check_sizes(self.mode, nonlinearity, input_size=input_size, hidden_size=hidden_size,
                     num_layers=num_layers)
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{self.mode}: dropout must be in [0, 1], got {dropout!r}")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or \
                not 0 <= proj_size < hidden_size:
            raise ValueError(f"{self.mode}: proj_size must be an int in [0, hidden_size="
                             f"{hidden_size}), got {proj_size!r}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bool(bias), bool(batch_first), float(dropout)
        self.bidirectional, self.nonlinearity = bool(bidirectional), nonlinearity
        self.proj_size = proj_size
        state_size = proj_size or hidden_size  # the features of h, of the outputs, of h_n
        gates = _GATES[self.mode] * hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        for layer in range(num_layers):
            width = input_size if layer == 0 else state_size * self.directions
            for suffix in self._suffixes():
                shapes = {f"weight_ih_l{layer}{suffix}": (gates, width),
                          f"weight_hh_l{layer}{suffix}": (gates, state_size)}
                if bias:
                    shapes[f"bias_ih_l{layer}{suffix}"] = (gates,)
                    shapes[f"bias_hh_l{layer}{suffix}"] = (gates,)
                if proj_size:
                    shapes[f"weight_hr_l{layer}{suffix}"] = (proj_size, hidden_size)
                for name, shape in shapes.items():
                    parameter = Parameter(np.empty(shape, dtype))
                    init.uniform_(parameter, -bound, bound)
                    self.register_parameter(name, parameter)

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self):
        return ("", "_reverse") if self.bidirectional else ("",)

    def _state_size(self, name: str) -> int:
        return self.proj_size if name == "h_0" and self.proj_size else self.hidden_size

    def _zeros(self, like: Tensor, batch: int, name: str) -> Tensor:
        shape = (self.num_layers * self.directions, batch, self._state_size(name))
        return Tensor._wrap(like.backend.zeros(shape, like.dtype), like.device)

    def _check_state(self, name: str, state: Tensor, batch: int, batched: bool) -> Tensor:
        expected = (self.num_layers * self.directions, batch, self._state_size(name))
        if not batched:
            if state.shape != expected[::2]:
                raise ValueError(f"{self.mode}: {name} must have shape {expected[::2]} for an "
                                 f"unbatched input, got {state.shape}")
            return state.unsqueeze(1)
        if state.shape != expected:
            raise ValueError(f"{self.mode}: {name} must have shape {expected}, got "
                             f"{state.shape}")
        return state

    def forward(self, input, hx=None):
        batched = input.ndim == 3
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ValueError(f"{self.mode}: expected input (T, N, {self.input_size}) or "
                             f"(T, {self.input_size}), got shape {input.shape}")
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        steps, batch = x.shape[:2]
        names = ("h_0", "c_0") if self.mode == "LSTM" else ("h_0",)
        if hx is None:
            states = [self._zeros(x, batch, name) for name in names]
        else:
            given = hx if self.mode == "LSTM" else (hx,)
            if len(given) != len(names):
                expected = "(h_0, c_0)" if len(names) == 2 else "h_0"
                raise ValueError(f"{self.mode}: hx must be {expected}")
            states = [self._check_state(n, s, batch, batched) for n, s in zip(names, given)]
        finals = [[] for _ in names]
        for layer in range(self.num_layers):
            outputs = []
            for direction, suffix in enumerate(self._suffixes()):
                index = layer * self.directions + direction
                weights = [getattr(self, f"{kind}_l{layer}{suffix}") for kind in
                           ("weight_ih", "weight_hh", "bias_ih", "bias_hh")[:4 if self.bias else 2]]
                if self.proj_size:
                    out, last_c = _projected_lstm(
                        x, [s[index] for s in states], weights,
                        getattr(self, f"weight_hr_l{layer}{suffix}"), reverse=direction == 1)
                    finals[1].append(last_c)
                else:
                    out = recurrence(self.mode, x, [s[index] for s in states], *weights,
                                     reverse=direction == 1, nonlinearity=self.nonlinearity)
                if self.mode == "LSTM" and not self.proj_size:
                    out, last_c = out[:steps], out[steps]
                    finals[1].append(last_c)
                # The backward direction ends at t = 0.
                finals[0].append(out[steps - 1] if direction == 0 else out[0])
                outputs.append(out)
            x = outputs[0] if len(outputs) == 1 else cat(outputs, axis=2)
            if self.training and self.dropout > 0.0 and layer < self.num_layers - 1:
                x = dropout(x, self.dropout, True)
        finals = [stack(f, 0) for f in finals]
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        if not batched:
            x, finals = x.squeeze(1), [f.squeeze(1) for f in finals]
        return (x, tuple(finals)) if self.mode == "LSTM" else (x, finals[0])

    def get_config(self):
        config = {"input_size": self.input_size, "hidden_size": self.hidden_size,
                  "num_layers": self.num_layers, "bias": self.bias,
                  "batch_first": self.batch_first, "dropout": self.dropout,
                  "bidirectional": self.bidirectional,
                  "dtype": str(self.weight_ih_l0.dtype)}
        if self.mode == "RNN":
            config["nonlinearity"] = self.nonlinearity
        if self.mode == "LSTM":
            config["proj_size"] = self.proj_size
        return config


def _projected_lstm(x: Tensor, states, weights, w_hr: Tensor, reverse: bool):
    """One direction of an LSTM layer whose state h is projected: h_t = (o ⊙ tanh c_t)·W_hrᵀ.
    The projected h feeds the next step, so each step is the fused one-step LSTM op (its
    W_hh already takes P features) followed by the projection; gradients come from those ops.
    Returns the (T, N, P) outputs and the last cell state."""
    h, c = states
    steps = x.shape[0]
    outputs = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        cell = recurrence("LSTM", x[t:t + 1], [h, c], *weights)  # (2, N, H): h and c
        c = cell[1]
        h = linear(cell[0], w_hr)
        outputs[t] = h
    return stack(outputs, 0), c


@register_module
class RNN(_RecurrentLayer):
    """Elman RNN: h_t = tanh(x_t·W_ihᵀ + b_ih + h_{t-1}·W_hhᵀ + b_hh) (or relu).
    Returns ``(output, h_n)``."""

    mode = "RNN"


@register_module
class LSTM(_RecurrentLayer):
    """Long short-term memory. Returns ``(output, (h_n, c_n))``; ``hx`` is ``(h_0, c_0)``."""

    mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, dtype=np.float32):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype=dtype, proj_size=proj_size)


@register_module
class GRU(_RecurrentLayer):
    """Gated recurrent unit. Returns ``(output, h_n)``."""

    mode = "GRU"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, dtype=np.float32):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype=dtype)


class _Cell(Module):
    """One time step of a recurrent layer, with PyTorch's cell parameters ``weight_ih``,
    ``weight_hh``, ``bias_ih``, ``bias_hh``; it runs the layer's op on a sequence of length 1,
    so the same fused cell kernels compute it."""

    mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", dtype=np.float32):
        super().__init__()
        _check_sizes(type(self).__name__, nonlinearity, input_size=input_size,
                     hidden_size=hidden_size)
        self.input_size, self.hidden_size, self.nonlinearity = input_size, hidden_size, nonlinearity
        gates = _GATES[self.mode] * hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        shapes = {"weight_ih": (gates, input_size), "weight_hh": (gates, hidden_size)}
        if bias:
            shapes.update(bias_ih=(gates,), bias_hh=(gates,))
        for name, shape in shapes.items():
            parameter = Parameter(np.empty(shape, dtype))
            init.uniform_(parameter, -bound, bound)
            self.register_parameter(name, parameter)
        self.bias = bool(bias)

    def forward(self, input, hx=None):
        batched = input.ndim == 2
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: expected input (N, {self.input_size}) or "
                             f"({self.input_size},), got shape {input.shape}")
        x = input if batched else input.unsqueeze(0)
        count = 2 if self.mode == "LSTM" else 1
        if hx is None:
            zeros = Tensor._wrap(x.backend.zeros((x.shape[0], self.hidden_size), x.dtype),
                                 x.device)
            states = [zeros] * count
        else:
            states = list(hx) if self.mode == "LSTM" else [hx]
            states = [s if batched else s.unsqueeze(0) for s in states]
            expected = (x.shape[0], self.hidden_size)
            if len(states) != count or any(s.shape != expected for s in states):
                raise ValueError(f"{type(self).__name__}: hx must be {count} state(s) of shape "
                                 f"{expected}")
        weights = [self.weight_ih, self.weight_hh] + \
            ([self.bias_ih, self.bias_hh] if self.bias else [])
        out = recurrence(self.mode, x.unsqueeze(0), states, *weights,
                         nonlinearity=self.nonlinearity)
        finals = [out[0], out[1]] if self.mode == "LSTM" else [out[0]]
        if not batched:
            finals = [f.squeeze(0) for f in finals]
        return tuple(finals) if self.mode == "LSTM" else finals[0]

    def get_config(self):
        config = {"input_size": self.input_size, "hidden_size": self.hidden_size,
                  "bias": self.bias, "dtype": str(self.weight_ih.dtype)}
        if self.mode == "RNN":
            config["nonlinearity"] = self.nonlinearity
        return config


@register_module
class RNNCell(_Cell):
    """h' = tanh(x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh) (or relu) for one step."""

    mode = "RNN"


@register_module
class LSTMCell(_Cell):
    """One LSTM step: returns ``(h', c')``; ``hx`` is ``(h, c)``."""

    mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype=np.float32):
        super().__init__(input_size, hidden_size, bias, dtype=dtype)


@register_module
class GRUCell(_Cell):
    """One GRU step: returns h'."""

    mode = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype=np.float32):
        super().__init__(input_size, hidden_size, bias, dtype=dtype)
