"""Session set-up shared by every test: where CUDA tests run.

The CUDA backend's tests run on a real GPU when there is one, and otherwise on numba's CUDA
simulator, so CI without a GPU still runs every kernel. The simulator is chosen when numba's
CUDA module is first imported, so it is decided here, before any test module is collected:
``NUMBA_ENABLE_CUDASIM`` is set only for that import and removed again, so subprocesses that
tests start see the environment they were given. ``MINIDL_TEST_CUDA`` overrides the choice:
``gpu`` (never simulate), ``sim`` (always), ``off`` (no simulator: CUDA tests skip without a GPU).

On the simulator the interpreter hands the GIL between threads more often (see
``SIMULATOR_SWITCH_INTERVAL``): it changes how fast the simulated kernels run, never what they
compute.
"""

from __future__ import annotations

import ctypes.util
import os
import sys

SIMULATOR_SWITCH_INTERVAL = 2e-4
"""Seconds a thread may hold the GIL while another waits for it, when CUDA is simulated.

The simulator runs each block's GPU threads as Python threads while the launching thread polls
them in a loop that never blocks. A simulated thread that is ready to run (started, or released
from ``syncthreads``) must wait until the poller is made to drop the GIL, which Python does
after its switch interval, 5 ms by default: a block costs about 5 ms per thread per barrier,
spent waiting. At 0.2 ms the CUDA tests run about four times as fast; shorter intervals gained
nothing more where this was measured.
"""


def _choose_cuda_mode() -> str:
    wanted = os.environ.get("MINIDL_TEST_CUDA", "auto").lower()
    if wanted in ("gpu", "off", "sim"):
        return wanted
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "sim"
    # A machine with an NVIDIA driver has libcuda; only then is a real device worth looking for.
    return "gpu" if ctypes.util.find_library("cuda") else "sim"


def _start_simulator() -> None:
    if "numba.cuda" in sys.modules:
        return  # already decided by whoever imported it first
    try:
        import numba
    except ImportError:
        return
    previous = os.environ.get("NUMBA_ENABLE_CUDASIM")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    numba.config.reload_config()
    try:
        from numba import cuda  # noqa: F401  (fixes the simulator for this process)
    except ImportError:
        pass  # numba-cuda is not installed: the CUDA tests skip
    finally:
        if previous is None:
            del os.environ["NUMBA_ENABLE_CUDASIM"]
        else:
            os.environ["NUMBA_ENABLE_CUDASIM"] = previous
        numba.config.reload_config()


def _simulating() -> bool:
    cuda = sys.modules.get("numba.cuda")
    return cuda is not None and cuda.device_array.__module__.startswith("numba.cuda.simulator")


if _choose_cuda_mode() == "sim":
    _start_simulator()
if _simulating():
    sys.setswitchinterval(SIMULATOR_SWITCH_INTERVAL)
