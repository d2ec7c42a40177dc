"""Shared by the ops tests: array generators that keep finite differences meaningful, hypothesis
settings, and a switch between the Numba backend and the NumPy reference."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# The gradient checker lives with the autograd tests; make it importable from here too.
_AUTOGRAD_TESTS = str(Path(__file__).resolve().parents[1] / "autograd")
if _AUTOGRAD_TESTS not in sys.path:
    sys.path.insert(0, _AUTOGRAD_TESTS)

from gradcheck_helpers import check_gradients  # noqa: E402,F401

import minidl.backend  # noqa: E402

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(SETTINGS, max_examples=6)


def normal(seed, shape):
    return np.random.default_rng(seed).standard_normal(shape)


def positive(seed, shape, low=0.5, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape)


def distinct(seed, *shapes):
    """Arrays whose elements are all different from each other and from 0 by at least 0.05.

    Kinks (relu, abs, clamp) and ties (max, maximum) make the derivative undefined; keeping values
    a step of 0.1 apart puts every central difference (eps = 1e-6) on one smooth piece.
    """
    sizes = [int(np.prod(s)) for s in shapes]
    total = sum(sizes)
    pool = (np.random.default_rng(seed).permutation(2 * total + 2) - total - 1 + 0.5) * 0.1
    pool = pool[:total]
    out, start = [], 0
    for shape, size in zip(shapes, sizes):
        out.append(pool[start:start + size].reshape(shape))
        start += size
    return out if len(out) > 1 else out[0]


@pytest.fixture(params=["numba", "reference"])
def cpu_backend(request):
    """Run the test once on the default (Numba) CPU backend and once on the NumPy reference."""
    previous = minidl.backend.use_cpu_backend("numba" if request.param == "numba" else "numpy")
    yield minidl.backend.get_backend("cpu")
    minidl.backend.use_cpu_backend(previous)


def run_on(choice, f, arrays, dtype):
    """Output and input gradients of f on the CPU backend ``choice`` ("numba" or "numpy")."""
    import minidl as md
    previous = minidl.backend.use_cpu_backend(choice)
    try:
        tensors = [md.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
        out = f(*tensors)
        weights = np.random.default_rng(1).standard_normal(out.shape).astype(dtype)
        out.backward(grad=weights)
        grads = [None if t.grad is None else t.grad.numpy() for t in tensors]
    finally:
        minidl.backend.use_cpu_backend(previous)
    return out.numpy(), grads
