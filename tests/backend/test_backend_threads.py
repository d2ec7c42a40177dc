"""One thread budget: ``md.set_num_threads`` governs NumPy's BLAS pool and Numba's kernels,
whichever thread calls them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

_IN_ANOTHER_THREAD = """
import threading
import numpy as np
import minidl as md
from minidl.backend import get_backend
from minidl.backend.numba_cpu import load_kernels
md.set_num_threads(1)
load_kernels()  # Numba loaded, and told, on the main thread (as after a first training step)
seen = []

def train_here():
    import numba
    backend = get_backend("cpu")
    x = np.ones(8, np.float32)
    backend.relu_backward(x, x)  # a Numba kernel, called from this thread
    seen.append(numba.get_num_threads())

worker = threading.Thread(target=train_here)
worker.start()
worker.join()
print(seen[0])
"""


def test_the_budget_reaches_kernels_called_from_another_thread():
    # Numba's thread count is per calling thread: a budget set on the main thread must still
    # hold in a thread that trains (a server's worker, a background fit), as BLAS's does.
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", _IN_ANOTHER_THREAD], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1"]


def test_the_budget_reaches_openblas_itself():
    import minidl as md
    from minidl.backend import threads
    libraries = threads._loaded_openblas()
    if not libraries:
        pytest.skip("NumPy here does not use OpenBLAS")
    before = md.get_num_threads()
    try:
        md.set_num_threads(1)
        assert threads._call_first(libraries[0], threads._OPENBLAS_GETTERS) == 1
    finally:
        md.set_num_threads(before)
