"""Numba loads at the first kernel a process needs; until then, small calls of four primitives
run NumPy stand-ins that give the kernels' values, so a small first forward never imports it."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidl.backend.numba_cpu import batch_norm, conv, load_kernels, loading, pool, random_kernels
from minidl.backend.reference import ReferenceBackend as Reference

load_kernels()
seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=30, deadline=None)
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 7), st.integers(1, 7)),
       kernel=st.integers(1, 3), stride=st.integers(1, 2), padding=st.integers(0, 1),
       dtype=st.sampled_from([np.float32, np.float64]), seed=seeds)
def test_im2col_and_max_pool_stand_ins_give_the_kernels_values(shape, kernel, stride, padding,
                                                               dtype, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    x = np.round(x * 2) / 2  # ties between taps
    x.reshape(-1)[seed % x.size] = np.nan
    args = ((kernel, kernel), (stride, stride), (padding, padding), (1, 1))
    if min(shape[2:]) + 2 * padding >= kernel:
        np.testing.assert_array_equal(Reference.im2col(x, *args), conv.im2col(x, *args))
    if padding <= kernel // 2 and min(shape[2:]) >= kernel:
        for ceil_mode in (False, True):
            want_out, want_argmax = pool.max_pool2d_forward(x, *args, ceil_mode)
            out, argmax = Reference.max_pool2d_forward(x, *args, ceil_mode)
            np.testing.assert_array_equal(out, want_out)
            np.testing.assert_array_equal(argmax, want_argmax)


@settings(max_examples=30, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 9)),
       affine=st.sampled_from(["both", "weight", "none"]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=seeds)
def test_evaluation_batch_norm_stand_in_gives_the_kernels_values(shape, affine, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    channels = shape[1]
    mean = rng.standard_normal(channels).astype(dtype)
    var = rng.uniform(0.1, 4, channels).astype(dtype)
    weight = rng.standard_normal(channels).astype(dtype) if affine != "none" else None
    bias = rng.standard_normal(channels).astype(dtype) if affine == "both" else None
    want = batch_norm.batch_norm_forward(x, weight, bias, mean, var, 1e-5)
    got = Reference.batch_norm_forward(x, weight, bias, mean, var, 1e-5)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_uniform_stand_in_gives_the_kernels_bits(dtype):
    for shape, counter in (((7,), 0), ((3, 5), 2**64 - 2), ((1000,), 12345)):
        want = random_kernels.random_uniform(shape, dtype, (11, 13), counter)
        got = Reference.random_uniform(shape, dtype, (11, 13), counter)
        assert got.tobytes() == want.tobytes()


_FIRST_FORWARD = """
import sys
import numpy as np
import minidl as md
from minidl import nn
from minidl.backend.numba_cpu import loading
md.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 5 * 5, 3)).eval()
x = md.tensor(np.linspace(-1, 1, 100, dtype=np.float32).reshape(1, 1, 10, 10))
if sys.argv[1] == "load":
    loading.load_kernels()
with md.no_grad():
    y = model(x).numpy()
print("numba" in sys.modules, loading.kernels_loaded(), y.tobytes().hex())
"""


def _run(mode, **env):
    out = subprocess.run([sys.executable, "-c", _FIRST_FORWARD, mode], capture_output=True,
                         text=True, env=dict(os.environ, **env), check=True)
    numba, loaded, values = out.stdout.split()
    return numba == "True", loaded == "True", values


def test_a_small_first_forward_never_imports_numba_and_gives_the_kernels_values():
    numba, loaded, values = _run("stand-ins")
    assert not numba and not loaded
    numba, loaded, kernel_values = _run("load")
    assert numba and loaded
    assert values == kernel_values
    numba, loaded, _ = _run("stand-ins", MINIDL_NUMPY_STAND_INS="0")
    assert numba and loaded  # switched off: the first kernel loads Numba


def test_stand_ins_serve_only_small_work_and_a_few_calls(monkeypatch):
    monkeypatch.setitem(loading._state, "loaded", False)
    monkeypatch.setitem(loading._state, "stand_in_calls", 0)
    assert loading._numpy_serves(loading.SMALL_WORK - 1)
    assert not loading._numpy_serves(loading.SMALL_WORK)
    for _ in range(loading.STAND_IN_CALLS - 1):
        assert loading._numpy_serves(10)
    assert not loading._numpy_serves(10)  # the process keeps computing: time for the kernels
    monkeypatch.setitem(loading._state, "stand_in_calls", 0)
    monkeypatch.setitem(loading._state, "loaded", True)
    assert not loading._numpy_serves(10)


def test_a_thread_count_set_before_numba_loads_reaches_it_when_it_loads():
    script = """
import sys
import minidl as md
from minidl.backend.numba_cpu import load_kernels
md.set_num_threads(1)
print("numba" in sys.modules)
load_kernels()
import numba
print(numba.get_num_threads())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "1"]


@pytest.mark.parametrize("module, half", [("conv", True), ("row_threads", False)])
def test_a_bound_kernel_is_one_wrapper_with_the_thread_check_and_the_half_rule(module, half):
    # The thread budget check and float16-through-float32 are decided once, when a primitive is
    # bound, into one wrapper: each layer of wrapping was one more Python call per kernel call,
    # and so was the thread check (follow_in_this_thread), now read inline.
    from python_calls import python_calls

    class Owner:  # binds like NumbaCpuBackend's primitives, whichever of them are Kernels
        col2im = loading.Kernel(module) if module == "conv" else None
        softmax = loading.Kernel(module) if module == "row_threads" else None

    primitive = "col2im" if module == "conv" else "softmax"
    arguments = {"col2im": lambda x: (x.reshape(4, 4), (1, 1, 3, 3), (2, 2), (1, 1), (0, 0),
                                      (1, 1)),
                 "softmax": lambda x: (x, -1)}[primitive]
    kernel = getattr(Owner, primitive)
    assert getattr(Owner, primitive) is kernel  # bound once, on the class
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    kernel(*arguments(x))
    calls = [c for c in python_calls(lambda: kernel(*arguments(x)))
             if c[0] != "test_kernel_loading.py"]
    assert calls[0][0] == "loading.py", calls
    assert calls[1][0] not in ("loading.py", "threads.py"), calls
    if half:  # float16 in, float16 out, computed in float32
        out = kernel(*arguments(x.astype(np.float16)))
        assert out.dtype == np.float16
        np.testing.assert_array_equal(out, kernel(*arguments(x)).astype(np.float16))


def test_a_kernel_asked_for_per_call_is_made_once():
    # Primitives that pick a kernel per call (relu_backward: serial or threaded) asked the
    # loader every time, which imported the module again and wrapped the kernel again.
    from python_calls import python_calls
    first = loading._kernel("nn_kernels", "relu_backward")
    assert loading._kernel("nn_kernels", "relu_backward") is first
    calls = python_calls(lambda: loading._kernel("nn_kernels", "relu_backward"))
    assert not [c for c in calls if "importlib" in c[0] or "bootstrap" in c[0]
                or c[0] == "functools.py"], calls
    grad, x = np.ones(4, np.float16), np.array([-1.0, 0.0, 0.5, 2.0], np.float16)
    np.testing.assert_array_equal(first(grad, x), [0.0, 0.0, 1.0, 1.0])
    assert first(grad, x).dtype == np.float16
