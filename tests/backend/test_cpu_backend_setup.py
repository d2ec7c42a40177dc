"""The process settings the Numba CPU backend makes when it loads, and how a user opts out."""

import sys

import pytest

from minidl.backend import numba_cpu


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_applies_on_glibc(monkeypatch):
    monkeypatch.delenv("MINIDL_KEEP_FREED_MEMORY", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        pytest.skip("not glibc")
    assert numba_cpu.keep_freed_memory() is True


@pytest.mark.parametrize("variable, value", [("MINIDL_KEEP_FREED_MEMORY", "0"),
                                             ("MALLOC_TRIM_THRESHOLD_", "131072"),
                                             ("MALLOC_MMAP_THRESHOLD_", "131072")])
def test_keep_freed_memory_leaves_the_users_choice(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    assert numba_cpu.keep_freed_memory() is False
