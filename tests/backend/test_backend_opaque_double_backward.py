"""The recorded backward passes (``create_graph=True``) compute through the primitive list too:
second derivatives of the opaque-backend op table equal the reference CPU backend's bit for bit,
with no access around the primitives."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from opaque_backend import NAME, OpaqueBackend, register
# The same ops, and the same autouse fixture: CPU tensors on the NumPy reference underneath.
from test_backend_opaque import OPS, reference_cpu  # noqa: F401

register()


def second_derivatives(name, device):
    f, arrays = OPS[name][:2]
    tensors = [md.tensor(a, device=device, requires_grad=True) for a in arrays]
    out = f(device, *tensors)
    weights = md.tensor(np.random.default_rng(1).standard_normal(out.shape).astype(np.float32),
                        device=device)
    grads = md.autograd.grad(out, tensors, weights, create_graph=True, allow_unused=True)
    total = sum((g * g).sum() for g in grads if g is not None and g.requires_grad)
    if not isinstance(total, md.Tensor):
        return []
    return [None if g is None else g.numpy() for g in
            md.autograd.grad(total, tensors, allow_unused=True)]


@pytest.mark.parametrize("name", sorted(OPS))
def test_second_derivatives_match_the_reference_on_opaque_arrays(name):
    expected = second_derivatives(name, "cpu")
    OpaqueBackend.reset()
    got = second_derivatives(name, NAME)
    assert OpaqueBackend.violations == []
    assert len(got) == len(expected)
    for ours, reference in zip(got, expected):
        if reference is None:
            assert ours is None
        else:
            np.testing.assert_array_equal(ours, reference)
