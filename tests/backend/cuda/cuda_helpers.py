"""Shared by the CUDA tests: the skip marker and moving arrays between host and device.

The tests run on a real GPU when one is present and on numba's CUDA simulator otherwise (set up
in tests/conftest.py), unchanged: shapes are small so the simulator, which runs every GPU thread
as a Python thread, stays quick.
"""

from __future__ import annotations

import numpy as np
import pytest

import minidl.cuda

requires_cuda = pytest.mark.skipif(not minidl.cuda.is_available(),
                                   reason="no CUDA device and no numba CUDA simulator")


def backend():
    from minidl.backend import get_backend
    return get_backend("cuda")


def up(value):
    """Host values (arrays, tuples and lists of them) on the device; scalars unchanged."""
    if isinstance(value, np.ndarray):
        return backend().from_numpy(value)
    if isinstance(value, (tuple, list)):
        return type(value)(up(v) for v in value)
    return value


def down(value):
    """Device values (arrays, tuples of them) back on the host; None and scalars unchanged."""
    from minidl.backend.cuda.device import DeviceArray
    if isinstance(value, DeviceArray):
        return backend().to_numpy(value)
    if isinstance(value, (tuple, list)):
        return type(value)(down(v) for v in value)
    return value
