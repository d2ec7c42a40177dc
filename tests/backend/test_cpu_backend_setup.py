"""The process-wide settings the Numba CPU backend makes on first use, and how a user opts out."""

import json
import os
import subprocess
import sys

import pytest

from minidl.backend.numba_cpu import process_settings

_PROBE = """
import json, os
import numpy as np
import minidl as md
from minidl.backend.numba_cpu import process_settings
before = os.environ.get("OMP_WAIT_POLICY")
(md.tensor(np.ones(3, np.float32)) * 2).sum()          # the first op loads the CPU backend
print(json.dumps([before, os.environ.get("OMP_WAIT_POLICY"), process_settings.applied]))
"""


def probe(**environment):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "MINIDL_CPU_TUNING", "MINIDL_CPU_BACKEND")}
    env.update(environment)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_settings_are_applied_on_the_first_op_not_at_import():
    before, after, applied = probe()
    assert before is None
    assert after == "PASSIVE" and applied["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "keep_freed_memory" in applied


def test_one_switch_turns_every_setting_off():
    before, after, applied = probe(MINIDL_CPU_TUNING="0")
    assert after is None and applied == {}


def test_the_users_own_openmp_choice_is_kept():
    _, after, applied = probe(OMP_WAIT_POLICY="ACTIVE")
    assert after == "ACTIVE" and "OMP_WAIT_POLICY" not in applied


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
    assert process_settings.keep_freed_memory() is True


@pytest.mark.parametrize("variable, value", [("MINIDL_KEEP_FREED_MEMORY", "0"),
                                             ("MALLOC_TRIM_THRESHOLD_", "131072"),
                                             ("MALLOC_MMAP_THRESHOLD_", "131072")])
def test_keep_freed_memory_leaves_the_users_choice(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    assert process_settings.keep_freed_memory() is False
