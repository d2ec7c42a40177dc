"""What a recurrent op asks of the backend, counted (never timed): the products over all time
steps are one matrix product each, and no product, sum or pass is computed to be thrown away."""

import numpy as np
import pytest

import minidl as md
from minidl.backend import get_backend
from minidl.ops.recurrent import recurrence

STEPS, BATCH, FEATURES, HIDDEN = 3, 2, 5, 4
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def counted_calls(monkeypatch, names):
    """Record (primitive name, shapes of its array arguments) for each call of ``names`` on the
    CPU backend (an instance attribute shadows the class's; monkeypatch removes it again)."""
    backend, calls = get_backend("cpu"), []
    for name in names:
        def counted(*args, _name=name, _primitive=getattr(backend, name), **kwargs):
            calls.append((_name, tuple(a.shape for a in args if hasattr(a, "shape"))))
            return _primitive(*args, **kwargs)
        monkeypatch.setattr(backend, name, counted, raising=False)
    return calls


def run(mode, monkeypatch):
    """(forward calls, backward calls) of one direction of a layer over STEPS steps."""
    rng = np.random.default_rng(0)
    gates = GATES[mode] * HIDDEN

    def parameter(*shape):
        return md.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    x = parameter(STEPS, BATCH, FEATURES)
    states = [parameter(BATCH, HIDDEN) for _ in range(2 if mode == "LSTM" else 1)]
    weights = [parameter(gates, FEATURES), parameter(gates, HIDDEN), parameter(gates),
               parameter(gates)]
    calls = counted_calls(monkeypatch, ["matmul", "add", "sum"])
    out = recurrence(mode, x, states, *weights)
    forward = list(calls)
    calls.clear()
    out.sum().backward()
    return forward, [c for c in calls if c[0] != "sum" or c[1] != (out.shape,)]


@pytest.mark.parametrize("mode", ["RNN", "GRU", "LSTM"])
def test_weight_gradients_are_one_product_over_all_steps(mode, monkeypatch):
    _, backward = run(mode, monkeypatch)
    products = [shapes for name, shapes in backward if name == "matmul"]
    rows = STEPS * BATCH
    # One product with W_hh per step (the gradient reaching h_{t-1}), then dX, dW_ih and dW_hh
    # each once over all T·N rows; nothing else (dW_hh's helper once also multiplied by W_hh).
    per_step = [s for s in products if s[0][0] == BATCH]
    over_all_steps = [s for s in products if s[0][0] == rows]
    assert len(per_step) == STEPS and len(over_all_steps) == 3, products
    assert len(products) == STEPS + 3, products
    gates = GATES[mode] * HIDDEN
    sums = [shapes for name, shapes in backward if name == "sum"]
    # A bias gradient is a sum over the rows; the LSTM and the RNN add both biases to the same
    # gates, so they share one sum. The GRU keeps b_hh inside its reset gate: two sums.
    assert sums == [((rows, gates),)] * (2 if mode == "GRU" else 1), sums


@pytest.mark.parametrize("mode", ["RNN", "LSTM"])
def test_biases_are_added_to_the_input_gates_in_one_pass(mode, monkeypatch):
    forward, _ = run(mode, monkeypatch)
    rows, gates = STEPS * BATCH, GATES[mode] * HIDDEN
    passes = [shapes for name, shapes in forward if name == "add" and shapes[0][0] == rows]
    assert passes == [((rows, gates), (gates,))], forward
