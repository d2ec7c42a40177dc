"""Whether CUDA can be used here, and the error that says what to do when it cannot.

Kept apart from the kernels so that ``minidl.cuda.is_available()`` can ask without compiling
anything, and so the failure message is written once.
"""

from __future__ import annotations

import importlib

_INSTALL_HINT = ("install the CUDA extra with `pip install minidl[cuda]` (the numba-cuda "
                 "package) on a machine with an NVIDIA GPU and driver, or set "
                 "NUMBA_ENABLE_CUDASIM=1 before starting Python to run on numba's CUDA "
                 "simulator (slow; for tests)")


def _numba_cuda():
    """numba's CUDA module, or None when numba-cuda is not installed."""
    try:
        from numba import cuda
    except ImportError:
        return None
    return cuda


def is_available() -> bool:
    """Whether a CUDA device (or numba's simulator) can run minidl's CUDA kernels."""
    cuda = _numba_cuda()
    if cuda is None:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # a broken driver install: not available, as PyTorch reports it
        return False


def device_count() -> int:
    """How many CUDA devices there are (1 on the simulator, 0 without CUDA)."""
    if not is_available():
        return 0
    return len(_numba_cuda().gpus)


def require_cuda() -> None:
    """Raise ``RuntimeError`` saying what is missing and the way out, unless CUDA can be used
    (the backend registry adds which device was asked for)."""
    cuda = _numba_cuda()
    if cuda is None:
        raise RuntimeError(f"numba's CUDA support (the numba-cuda package) is not installed; "
                           f"{_INSTALL_HINT}")
    if not is_available():
        raise RuntimeError(f"no CUDA GPU was found (numba reports no usable driver or device); "
                           f"{_INSTALL_HINT}")
    if not cuda.device_array.__module__.startswith("numba.cuda.simulator"):
        check_numpy_supported()


def check_numpy_supported(import_module=importlib.import_module) -> None:
    """Raise ``RuntimeError`` naming the fix when numba-cuda cannot compile under this NumPy.

    numba-cuda registers a GPU version of ``np.row_stack`` when it first compiles a kernel,
    and NumPy 2.5 removed that function: every kernel's compilation then fails with an
    ``AttributeError`` deep inside numba. numba-cuda is in maintenance mode and keeps that
    registration, so the way out is NumPy below 2.5 (the ``cuda`` extra asks for it). Where
    NumPy still has ``row_stack`` nothing is imported; otherwise the module that registers it
    is imported now, so that a release which guards it passes."""
    import numpy as np
    if hasattr(np, "row_stack"):
        return
    try:
        import_module("numba.cuda.np.arrayobj")
    except AttributeError as error:
        if "row_stack" not in str(error):
            raise
        raise RuntimeError(
            f"the installed numba-cuda cannot compile kernels under NumPy {np.__version__}: it "
            f"registers np.row_stack, which NumPy 2.5 removed; install NumPy below 2.5 "
            f"(pip install 'numpy<2.5', as `pip install minidl[cuda]` does)") from error


def check_device_index(index: int) -> None:
    """``RuntimeError`` when there is no GPU number ``index``."""
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"device 'cuda:{index}' is not available: this machine has "
                           f"{count} CUDA device{'s' if count != 1 else ''} "
                           f"(cuda:0 to cuda:{count - 1})" if count else
                           f"device 'cuda:{index}' is not available; {_INSTALL_HINT}")
