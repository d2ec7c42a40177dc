"""A first run says that kernels are compiling; a run that finds them in Numba's cache does not."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minidl.backend.numba_cpu import loading

ROOT = Path(__file__).resolve().parents[2]
NOTICE = "compiling kernels (first run only"


def test_a_module_counts_as_cached_once_numba_has_written_a_kernel_of_it(tmp_path, monkeypatch):
    (tmp_path / "tiny_kernels.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef double(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("tiny_kernels")
        assert loading.not_cached(module)
        module.double(1.0)  # compiles, and writes the cache
        assert not loading.not_cached(module)
    finally:
        sys.modules.pop("tiny_kernels", None)


@pytest.mark.parametrize("uncached", [True, False])
def test_the_notice_is_said_once_and_only_for_a_compile(monkeypatch, capsys, uncached):
    monkeypatch.setitem(loading._state, "cache_checked", set())
    monkeypatch.setitem(loading._state, "said_compiling", False)
    monkeypatch.setattr(loading, "not_cached", lambda module: uncached)
    loading._kernel("conv", "im2col")
    loading._kernel("conv", "im2col")
    loading._kernel("pool", "max_pool2d_forward")
    assert capsys.readouterr().err.count(NOTICE) == (1 if uncached else 0)


@pytest.mark.slow
def test_a_first_run_says_it_compiles_and_the_second_does_not(tmp_path):
    code = ("import numpy as np, minidl as md\nfrom minidl import nn\n"
            "nn.Conv2d(1, 4, 3)(md.tensor(np.ones((8, 1, 64, 64), np.float32)))\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    assert [NOTICE in run.stderr for run in runs] == [True, False]
