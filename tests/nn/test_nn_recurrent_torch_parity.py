"""RNN, LSTM and GRU against PyTorch with copied weights (outputs, final states, gradients of
the input, the initial states and every parameter), finite-difference checks of the recurrent
ops in float64, and the argument checks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.ops.recurrent import recurrence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autograd"))
from gradcheck_helpers import check_gradients  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
rng = np.random.default_rng(0)

CONFIGS = {
    "one_layer": {},
    "stacked_bidirectional_batch_first": {"num_layers": 2, "bidirectional": True,
                                          "batch_first": True},
    "three_layers_no_bias": {"num_layers": 3, "bias": False},
    "unbatched_with_states": {"unbatched": True, "states": True},
    "bidirectional_with_states": {"bidirectional": True, "states": True},
}


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("mode", ["RNN", "RNN_relu", "LSTM", "GRU"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_matches_pytorch(mode, config):
    torch = pytest.importorskip("torch")
    options = dict(CONFIGS[config])
    unbatched, with_states = options.pop("unbatched", False), options.pop("states", False)
    if mode == "RNN_relu":
        mode, options["nonlinearity"] = "RNN", "relu"
    theirs = getattr(torch.nn, mode)(3, 4, **options)
    ours = getattr(nn, mode)(3, 4, **options)
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    shape = (5, 3) if unbatched else (2, 5, 3) if options.get("batch_first") else (5, 2, 3)
    arrays = [normal(*shape)]
    if with_states:
        state_shape = (layers, 4) if unbatched else (layers, 2, 4)
        arrays += [normal(*state_shape) for _ in range(2 if mode == "LSTM" else 1)]
    ours_in = [md.tensor(a, requires_grad=True) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=True) for a in arrays]

    def run(module, inputs):
        states = None if len(inputs) == 1 else tuple(inputs[1:]) if mode == "LSTM" else inputs[1]
        out, final = module(inputs[0], states)
        finals = final if mode == "LSTM" else (final,)
        return [out, *finals]

    ours_out, theirs_out = run(ours, ours_in), run(theirs, theirs_in)
    for a, b in zip(ours_out, theirs_out):
        assert a.shape == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=RTOL, atol=ATOL)
    assert_same_gradients(torch, (ours, ours_in, ours_out), (theirs, theirs_in, theirs_out))


def assert_same_gradients(torch, ours, theirs):
    """Backpropagate the same random weighting of every output through both (module, inputs,
    outputs) triples and compare the inputs' and parameters' gradients."""
    (ours_module, ours_in, ours_out), (theirs_module, theirs_in, theirs_out) = ours, theirs
    weights = [normal(*o.shape) for o in ours_out]  # every output and final state has a say
    sum(((o * md.tensor(w)).sum() for o, w in zip(ours_out, weights)), md.tensor(0.0)).backward()
    sum((o * torch.tensor(w)).sum() for o, w in zip(theirs_out, weights)).backward()
    for a, b in zip(ours_in, theirs_in):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=RTOL, atol=ATOL)
    for (name, p), q in zip(ours_module.named_parameters(), theirs_module.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=name)


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("reverse", [False, True])
def test_recurrence_gradients_match_finite_differences(mode, reverse):
    gates = {"RNN": 1, "LSTM": 4, "GRU": 3}[mode] * 2
    states = 2 if mode == "LSTM" else 1
    arrays = [normal(3, 2, 3)] + [normal(2, 2) for _ in range(states)] + \
        [normal(gates, 3) * 0.5, normal(gates, 2) * 0.5, normal(gates), normal(gates)]

    def f(x, *rest):
        return recurrence(mode, x, rest[:states], *rest[states:], reverse=reverse)

    check_gradients(f, *arrays, rtol=1e-5, atol=1e-7)


def test_dropout_between_layers_only_in_training_and_from_the_global_generator():
    layer = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = md.tensor(normal(5, 2, 3))
    md.manual_seed(1)
    first = layer(x)[0].numpy()
    md.manual_seed(1)
    np.testing.assert_array_equal(layer(x)[0].numpy(), first)
    layer.eval()
    plain = layer(x)[0].numpy()
    assert not np.allclose(first, plain)
    np.testing.assert_array_equal(layer(x)[0].numpy(), plain)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="hidden_size"):
        nn.GRU(3, 0)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)  # must be smaller than hidden_size, as in PyTorch
    with pytest.raises(ValueError, match="input"):
        nn.LSTM(3, 4)(md.zeros(5, 2, 7))
    with pytest.raises(ValueError, match="h_0"):
        nn.GRU(3, 4)(md.zeros(5, 2, 3), md.zeros(2, 2, 4))


@pytest.mark.parametrize("mode", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("with_states", [False, True])
def test_cells_match_pytorch(mode, with_states):
    torch = pytest.importorskip("torch")
    theirs, ours = getattr(torch.nn, mode)(3, 4), getattr(nn, mode)(3, 4)
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    arrays = [normal(2, 3)] + ([normal(2, 4) for _ in range(2 if mode == "LSTMCell" else 1)]
                               if with_states else [])
    ours_in = [md.tensor(a, requires_grad=True) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=True) for a in arrays]

    def run(cell, inputs):
        states = None if len(inputs) == 1 else \
            tuple(inputs[1:]) if mode == "LSTMCell" else inputs[1]
        out = cell(inputs[0], states)
        return list(out) if isinstance(out, tuple) else [out]

    ours_out, theirs_out = run(ours, ours_in), run(theirs, theirs_in)
    for a, b in zip(ours_out, theirs_out):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=RTOL, atol=ATOL)
    assert_same_gradients(torch, (ours, ours_in, ours_out), (theirs, theirs_in, theirs_out))
    single = getattr(nn, mode)(3, 4)(md.tensor(normal(3)))  # one unbatched sample
    assert (single[0] if isinstance(single, tuple) else single).shape == (4,)
