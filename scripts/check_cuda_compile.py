"""Compile every CUDA kernel minidl launches with numba's real CUDA compiler, without a GPU.

numba's CUDA simulator runs the kernels as Python, so it proves what they compute but never
types or compiles them: a kernel that the simulator runs happily can still fail numba's CUDA
type inference, or NVVM, on its first launch on a GPU. This script closes that gap on any
machine. It runs the CUDA benchmark's smoke mode (every row: SGEMM, MLP, CNN with batch norm,
copies) and, with ``--tests``, the CUDA test files, with numba's CUDA target in a compile-only
mode: every launch types its kernel for the real argument types and compiles it to PTX for
compute capability 8.0 through NVVM, and is then skipped. Device memory is host memory and no
kernel runs (the one-line kernels that set error flags are emulated, so error checks pass), so
the values computed are meaningless and the tests' value checks fail by design: only
compilation errors are reported, and they make the exit status 1.

Needs numba-cuda and NVIDIA's compiler libraries, no driver: a CUDA toolkit's NVVM, or
``pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12`` (numba finds them in
site-packages; elsewhere, put their ``lib`` and ``nvvm/lib64`` folders on ``LD_LIBRARY_PATH``).
NVRTC is optional: without it the usual compute capabilities are assumed.
It patches numba-cuda's launch internals, so it follows numba-cuda's versions (written for 0.30).

Run: ``python scripts/check_cuda_compile.py [--tests]`` from the repository root.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SETTERS = {"_set", "_set_int64", "_zero_int"}  # flag kernels: flag[0] = value
compiled: set = set()
failures: dict = {}


class _Device:
    """What the compiler asks of a GPU: its compute capability (an A100's)."""

    compute_capability = (8, 0)
    id = 0


class _Context:
    device = _Device()


class _HostMemory:
    """Stands in for a device pointer: the bytes live on the host."""

    def __init__(self, host):
        self.host = host

    def view(self, start, stop=None):
        return _HostMemory(self.host[start:stop])


def _values(array):
    return np.frombuffer(array.gpu_data.host, array.dtype, count=array.size).reshape(array.shape)


def _work_without_nvrtc() -> None:
    """Let numba compile through NVVM alone when NVRTC is missing (a CUDA toolkit installed
    without it): numba asks NVRTC only for the list of architectures it supports and for its
    own path, neither of which compiling a Python kernel to PTX needs."""
    import numba.cuda.cuda_paths as paths
    from numba.cuda.cudadrv import nvrtc
    try:
        paths._get_nvrtc_path()
    except Exception:
        paths._get_nvrtc_path = lambda: ("<not installed>", None)
        nvrtc.get_supported_ccs = lambda: list(SUPPORTED_CCS)


SUPPORTED_CCS = ((7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (12, 0))
"""Compute capabilities assumed when NVRTC cannot be asked (those of CUDA 12.8 and later)."""


def install_compile_only_cuda() -> None:
    """Point numba's CUDA target at host memory and make launches compile without running."""
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    from numba import cuda
    _work_without_nvrtc()
    import numba.cuda.api as api
    import numba.cuda.dispatcher as dispatcher
    from numba.cuda.cudadrv import devicearray, devices

    def device_array(shape, dtype=np.float64, strides=None, order="C", stream=0):
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
        dtype = np.dtype(dtype)
        strides, step = [], dtype.itemsize
        for n in reversed(shape):  # C order
            strides.insert(0, step)
            step *= n
        host = np.zeros(max(math.prod(shape), 1) * dtype.itemsize, np.uint8)
        return devicearray.DeviceNDArray(shape, strides, dtype, gpu_data=_HostMemory(host))

    def to_device(values, stream=0, copy=True, to=None):
        values = np.ascontiguousarray(values)
        array = device_array(values.shape, values.dtype)
        array.copy_to_device(values)
        return array

    def copy_to_device(self, source, stream=0):
        source = _values(source) if isinstance(source, devicearray.DeviceNDArray) else source
        _values(self)[...] = np.asarray(source).reshape(self.shape)

    def copy_to_host(self, out=None, stream=0):
        if out is None:
            return _values(self).copy()
        out[...] = _values(self)
        return out

    def launch(self, args, griddim, blockdim, stream=0, sharedmem=0):
        if self.py_func.__name__ in SETTERS:
            self.py_func(*(_values(a) if isinstance(a, devicearray.DeviceNDArray) else a
                           for a in args))

    original_compile = dispatcher.CUDADispatcher.compile

    def compile_and_record(self, sig):
        name = self.py_func.__name__
        try:
            kernel = original_compile(self, sig)
        except Exception as error:
            failures.setdefault(name, "".join(traceback.format_exception_only(error)).strip())
            raise
        compiled.add(name)
        return kernel

    @contextlib.contextmanager
    def no_context():
        yield

    for module in (cuda, api, dispatcher):
        module.get_current_device = lambda: _Device()
    devices.get_context = lambda devnum=None: _Context()
    devices._runtime.ensure_context = no_context
    cuda.current_context = lambda devnum=None: _Context()
    cuda.device_array, cuda.to_device, cuda.synchronize = device_array, to_device, lambda: None
    devicearray.DeviceNDArray.copy_to_device = copy_to_device
    devicearray.DeviceNDArray.copy_to_host = copy_to_host
    dispatcher.CUDADispatcher.compile = compile_and_record
    dispatcher._Kernel.bind = lambda self: None  # the PTX exists; linking it needs a driver
    dispatcher._Kernel.launch = launch

    import minidl.backend.cuda_availability as availability
    availability.require_cuda = lambda: None
    availability.is_available = lambda: True
    availability.device_count = lambda: 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true",
                        help="also run the CUDA tests and the primitive contract's (value "
                             "checks fail by design)")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    os.environ["MINIDL_TEST_CUDA"] = "gpu"  # the tests' conftest must not start the simulator
    install_compile_only_cuda()
    import bench_cuda
    try:
        bench_cuda.main(["--smoke"])
    except Exception:  # a compile failure is reported below; anything else is shown here
        traceback.print_exc()
    if args.tests:
        import pytest
        pytest.main(["-q", "-p", "no:cacheprovider", "--no-header", "-p", "no:warnings",
                     "--tb=no", str(ROOT / "tests" / "backend" / "cuda"),
                     str(ROOT / "tests" / "backend" / "test_backend_primitive_list.py")])
    print(f"\ncompiled {len(compiled)} kernels for the GPU: {', '.join(sorted(compiled))}")
    for name, error in sorted(failures.items()):
        print(f"\nFAILED to compile {name}:\n{error}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
