"""The process-wide settings the Numba CPU backend makes on first use, and how a user opts out."""

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import json, os
import numpy as np
import minidl as md
from minidl.backend.numba_cpu import process_settings
before = os.environ.get("GOMP_SPINCOUNT")
(md.tensor(np.ones(3, np.float32)) * 2).sum()          # the first op loads the CPU backend
print(json.dumps([before, os.environ.get("GOMP_SPINCOUNT"), process_settings.applied]))
"""


_OPENMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def probe(**environment):
    env = {k: v for k, v in os.environ.items()
           if k not in _OPENMP_VARIABLES + ("MINIDL_CPU_TUNING", "MINIDL_CPU_BACKEND")}
    env.update(environment)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_settings_are_applied_on_the_first_op_not_at_import():
    from minidl.backend.numba_cpu.process_settings import SPIN_COUNT
    before, after, applied = probe()
    assert before is None
    assert after == str(SPIN_COUNT) and applied["GOMP_SPINCOUNT"] == str(SPIN_COUNT)
    assert applied["KMP_BLOCKTIME"] == "1"
    assert "keep_freed_memory" in applied


def test_one_switch_turns_every_setting_off():
    before, after, applied = probe(MINIDL_CPU_TUNING="0")
    assert after is None and applied == {}


@pytest.mark.parametrize("variable", _OPENMP_VARIABLES)
def test_the_users_own_openmp_choice_is_kept(variable):
    _, after, applied = probe(**{variable: "7"})
    assert after == ("7" if variable == "GOMP_SPINCOUNT" else None)
    assert not set(_OPENMP_VARIABLES) & set(applied)


def test_idle_openmp_threads_sleep_soon_after_a_parallel_kernel():
    # They spin only for a moment after each parallel region, for the next one: a process that
    # then waits (on data, on the user) leaves the cores alone. Spinning for good, the worker
    # would burn about the whole second as CPU time.
    script = """
import time
import numpy as np
import minidl as md
md.set_num_threads(2)
x = md.tensor(np.ones((2048, 1024), np.float32))
for _ in range(5):
    (x + x).relu().sum()   # large enough for Numba's threads
start = time.process_time()
time.sleep(1.0)
print(time.process_time() - start)
"""
    env = {k: v for k, v in os.environ.items()
           if k not in _OPENMP_VARIABLES + ("MINIDL_CPU_TUNING",)}
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert float(out) < 0.25


# Asks glibc itself where a large block comes from: with the setting, from the heap (and the
# heap keeps it after free); by default, a block of 48 MiB (above glibc's largest automatic mmap
# threshold, 32 MiB) is mapped on its own and given back to the kernel at free.
_MALLOC_PROBE = """
import ctypes, sys
from minidl.backend.numba_cpu import process_settings

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
applied = process_settings.keep_freed_memory() if sys.argv[1] == "apply" else None
size = 48 << 20
mapped_before = libc.mallinfo2().hblkhd
block = libc.malloc(size)
mapped_apart = libc.mallinfo2().hblkhd - mapped_before >= size
libc.free(block)
kept_in_heap = libc.mallinfo2().arena >= size
print(applied, mapped_apart, kept_in_heap)
"""


def malloc_probe(mode, **environment):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MINIDL_KEEP_FREED_MEMORY", "MALLOC_MMAP_THRESHOLD_",
                        "MALLOC_TRIM_THRESHOLD_")}
    env.update(environment)
    out = subprocess.run([sys.executable, "-c", _MALLOC_PROBE, mode], env=env, check=True,
                         capture_output=True, text=True).stdout
    return out.split()


def _has_mallinfo2():
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
        return hasattr(libc, "mallopt") and hasattr(libc, "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _has_mallinfo2(),
                    reason="glibc 2.33+ (mallopt, mallinfo2)")
def test_keep_freed_memory_makes_glibc_serve_and_keep_large_blocks_in_the_heap():
    assert malloc_probe("default") == ["None", "True", "False"]  # the behaviour it changes
    assert malloc_probe("apply") == ["True", "False", "True"]


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _has_mallinfo2(),
                    reason="glibc 2.33+ (mallopt, mallinfo2)")
@pytest.mark.parametrize("variable, value", [("MINIDL_KEEP_FREED_MEMORY", "0"),
                                             ("MALLOC_TRIM_THRESHOLD_", "131072"),
                                             ("MALLOC_MMAP_THRESHOLD_", "131072")])
def test_keep_freed_memory_leaves_the_users_choice(variable, value):
    # Not applied, and glibc behaves as the user's variable (or its default) says.
    assert malloc_probe("apply", **{variable: value}) == ["False", "True", "False"]


def test_openmp_threads_start_only_after_the_settings_even_if_numba_came_first():
    # OpenMP reads its wait settings once, when its threads start, and numba.set_num_threads
    # starts them: a count set while the user's code had already imported Numba must wait for
    # the backend's settings, or Numba's workers would spin for OpenMP's own default time.
    script = """
import json, os
import numba
import numpy as np
from numba.np.ufunc import parallel
import minidl as md
md.set_num_threads(1)
started_early = parallel._is_initialized
md.tensor(np.ones((512, 1024), np.float32)).relu().sum()  # loads the kernels
print(json.dumps([started_early, os.environ.get("GOMP_SPINCOUNT"), numba.get_num_threads()]))
"""
    env = {k: v for k, v in os.environ.items()
           if k not in _OPENMP_VARIABLES + ("MINIDL_CPU_TUNING",)}
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                         capture_output=True, text=True).stdout
    from minidl.backend.numba_cpu.process_settings import SPIN_COUNT
    assert json.loads(out) == [False, str(SPIN_COUNT), 1]
