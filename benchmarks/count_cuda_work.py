"""What a CUDA training step costs, counted rather than timed: launches, copies, waits, kernels.

A GPU is fast only when the host keeps it busy: every kernel launch costs the host a few
microseconds, every layout copy a pass over memory, every device->host read a full stop (the
host waits for all queued work), every ``cudaMalloc`` a driver call. None of that needs a GPU to
count, so this script counts it on whatever runs the CUDA backend (numba's simulator included):

* per training step of a small CNN (Conv2d(3,8)+BN+ReLU+MaxPool, Conv2d(8,16)+ReLU+MaxPool,
  Linear; Adam over its 8 tensors; batch 4, 8x8 images) and of an MLP (32-64-64-10, Adam,
  batch 4): kernel launches (by kernel), layout copies (launches of the strided-copy kernel,
  which makes a view contiguous), blocking device->host reads, host<->device copies and driver
  allocations, after two warm-up steps;
* with ``--ptx``, per kernel, from the PTX that numba's real CUDA compiler (NVVM) produces
  without a GPU (compile-only mode of ``scripts/check_cuda_compile.py``): registers, static
  shared memory and local-memory spills as ``ptxas -v`` reports them (when NVIDIA's ``ptxas`` is
  on the PATH), the vector loads (``ld.*.v2``/``.v4``) and the integer divisions and
  remainders (``div``/``rem`` on integers: a GPU has no divider, each is a long instruction
  sequence) in the PTX; the GEMM once per variant (tile size, transpose flags, vector or scalar
  loads, offset width), each tile size compiled for every flag pair on aligned squares besides
  the variants the steps use.

Kernel launches are counted by wrapping numba's launch entry points (the simulator's
``FakeCUDAKernel.__call__``, the GPU dispatcher's ``call``), so nothing in minidl carries
counting code. The counts do not depend on the launch shapes, so the simulator's counts are the
GPU's (the GEMM's batch split at 65535 matrices aside, which these sizes never reach).

Run: ``NUMBA_ENABLE_CUDASIM=1 python benchmarks/count_cuda_work.py`` (step counts) or
``python benchmarks/count_cuda_work.py --ptx`` (needs numba-cuda's NVVM, no GPU).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LAYOUT_COPY = "_copy_strided"
"""The kernel that turns a strided view (transpose, broadcast, slice) into a contiguous array."""
PTX_CC = (9, 0)
"""The compute capability the PTX report compiles for (an H100's)."""
PTX_ARCH = f"sm_{PTX_CC[0]}{PTX_CC[1]}"

launches: collections.Counter = collections.Counter()
"""Kernel launches by kernel name, since the counters were installed."""


def install_launch_counter() -> None:
    """Count every kernel launch by name, on the simulator and on a GPU (or in compile-only
    mode)."""
    from numba import cuda
    if cuda.device_array.__module__.startswith("numba.cuda.simulator"):
        from numba.cuda.simulator import kernel as simulated
        run = simulated.FakeCUDAKernel.__call__

        def counted_run(self, *args):
            # (device functions and calls from inside a kernel are not launches)
            if not self._device and not simulated._kernel_context:
                launches[self.fn.__name__] += 1
            return run(self, *args)
        simulated.FakeCUDAKernel.__call__ = counted_run
    else:
        from numba.cuda import dispatcher
        call = dispatcher.CUDADispatcher.call

        def counted_call(self, args, launch_config):
            launches[self.py_func.__name__] += 1
            return call(self, args, launch_config)
        dispatcher.CUDADispatcher.call = counted_call


# -- per training step -----------------------------------------------------------------------------

@dataclass
class StepCounts:
    """What one training step did (the average over the counted steps)."""

    launches: int
    layout_copies: int
    device_to_host_reads: int
    host_to_device_copies: int
    driver_allocations: int
    by_kernel: dict = field(default_factory=dict)


def small_cnn(nn, channels=(8, 16), side=8):
    return nn.Sequential(
        nn.Conv2d(3, channels[0], 3, padding=1), nn.BatchNorm2d(channels[0]), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(channels[0], channels[1], 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(channels[1] * (side // 4) ** 2, 10))


def small_mlp(nn, width=64):
    return nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


MODELS = {"cnn": (small_cnn, (4, 3, 8, 8)), "mlp": (small_mlp, (4, 32))}
"""The models of the report: (builder, input shape)."""
TINY_MODELS = {"cnn": (lambda nn: small_cnn(nn, (2, 2), 4), (2, 3, 4, 4)),
               "mlp": (lambda nn: small_mlp(nn, 4), (2, 32))}
"""The same layers, far fewer numbers: the counts are the same (nothing counted depends on a
size), and the simulator runs them in seconds rather than minutes."""


def count_training_step(name: str, warm_up: int = 2, counted: int = 1,
                        tiny: bool = False) -> StepCounts:
    """Train model ``name`` ("cnn" or "mlp"; its :data:`TINY_MODELS` form when ``tiny``) on
    ``cuda:0`` for ``warm_up`` steps, then count what the next ``counted`` steps do (per step).
    The loss is never read: reading it is the user's own wait, not the step's."""
    import minidl as md
    from minidl import nn, optim
    from minidl.backend.cuda.device import transfers
    build, shape = (TINY_MODELS if tiny else MODELS)[name]
    rng = np.random.default_rng(0)
    md.manual_seed(0)
    model = build(nn).to("cuda")
    opt = optim.Adam(model.parameters(), lr=1e-3)
    x = md.tensor(rng.standard_normal(shape, dtype=np.float32)).to("cuda")
    y = md.tensor(rng.integers(0, 10, shape[0])).to("cuda")

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warm_up):
        step()
    launches.clear()
    transfers.clear()
    allocations = md.cuda.memory_stats()["num_device_alloc"]
    for _ in range(counted):
        step()
    allocations = md.cuda.memory_stats()["num_device_alloc"] - allocations
    reads = transfers["to_numpy"] + transfers["checks"]
    return StepCounts(launches=sum(launches.values()) // counted,
                      layout_copies=launches[LAYOUT_COPY] // counted,
                      device_to_host_reads=reads // counted,
                      host_to_device_copies=transfers["from_numpy"] // counted,
                      driver_allocations=allocations // counted,
                      by_kernel={k: v // counted for k, v in sorted(launches.items())})


def print_step_counts(name: str, counts: StepCounts) -> None:
    print(f"\n{name}: per training step")
    for label, value in (("kernel launches", counts.launches),
                         ("layout copies (strided-copy launches)", counts.layout_copies),
                         ("blocking device->host reads", counts.device_to_host_reads),
                         ("host->device copies", counts.host_to_device_copies),
                         ("driver allocations", counts.driver_allocations)):
        print(f"  {label:<40} {value:>5}")
    print("  launches by kernel: " + ", ".join(f"{k} {v}" for k, v in counts.by_kernel.items()))


# -- per kernel, from the PTX ----------------------------------------------------------------------

@dataclass
class KernelReport:
    """What the compiler made of one kernel (one of its specialisations)."""

    name: str
    registers: int | None
    shared_bytes: int | None
    spill_bytes: int | None
    vector_loads: int
    integer_divisions: int = 0


def vector_loads(ptx: str) -> int:
    """Vector load instructions (``ld.global.v4.f32`` ...) in ``ptx``."""
    return len(re.findall(r"\bld(?:\.\w+)*\.v[24]\b", ptx))


def integer_divisions(ptx: str) -> int:
    """Integer division and remainder instructions (``div.u32``, ``rem.s64`` ...) in ``ptx``."""
    return len(re.findall(r"\b(?:div|rem)\.[su]\d+\b", ptx))


def ptxas_usage(ptx: str, ptxas: str) -> tuple:
    """(registers, static shared bytes, spill bytes) of the kernel in ``ptx``, compiled by
    ``ptxas -v``."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run([ptxas, f"-arch={PTX_ARCH}", "-v", str(source), "-o",
                                 str(Path(folder) / "kernel.cubin")],
                                capture_output=True, text=True, check=True)
    return parse_ptxas_report(result.stderr + result.stdout)


def parse_ptxas_report(text: str) -> tuple:
    """(registers, static shared bytes, spill bytes: stores + loads) from ``ptxas -v``'s
    report of one kernel."""
    registers = sum(int(n) for n in re.findall(r"Used (\d+) registers", text))
    shared = sum(int(n) for n in re.findall(r"(\d+) bytes smem", text))
    spills = sum(int(a) + int(b) for a, b in
                 re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text))
    return registers, shared, spills


GEMM_SHAPES = {"large tiles": 1536, "small tiles": 40}
"""Square float32 products that select each of the GEMM's tile sizes, with every group of 4 along
a row aligned (the tiny models' products are small and odd-sized: small tiles, scalar loads)."""


def compile_gemm_variants() -> None:
    """Compile the GEMM for both tile sizes and every pair of transpose flags (compile-only
    mode: nothing runs, so the sizes cost nothing)."""
    from minidl.backend import get_backend
    backend = get_backend("cuda")
    for side in GEMM_SHAPES.values():
        square = backend.from_numpy(np.zeros((side, side), np.float32))
        for transpose_a in (False, True):
            for transpose_b in (False, True):
                backend.matmul(square, square, transpose_a, transpose_b)


def kernel_label(kernel) -> str:
    """A kernel's name; for the GEMM, which variant: tile size, transpose flags (N plain, T
    transposed), vector loads of A/B (v4) or scalar (s), 32-bit or 64-bit offsets."""
    name = kernel.py_func.__name__
    if name != "gemm":
        return name
    from minidl.backend.cuda import gemm_tiles
    for key, compiled in gemm_tiles._kernels.items():
        if compiled is kernel:
            tiles, _, transpose_a, transpose_b, vector_a, vector_b, narrow = key
            flags = "".join("T" if flag else "N" for flag in (transpose_a, transpose_b))
            loads = "/".join("v4" if flag else "s" for flag in (vector_a, vector_b))
            return (f"gemm {tiles.rows}x{tiles.columns} {flags} {loads} "
                    f"{32 if narrow else 64}-bit")
    return name


def compile_kernels_to_ptx() -> list:
    """Run both models' training steps with numba's CUDA target in compile-only mode (with the
    GPU's launch shapes and tile sizes) and report every kernel specialisation compiled."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import check_cuda_compile
    check_cuda_compile._Device.compute_capability = PTX_CC
    check_cuda_compile.install_compile_only_cuda()
    from numba.cuda import dispatcher
    ptx_by_kernel: dict = {}
    compile_one = dispatcher.CUDADispatcher.compile

    def compile_and_keep(self, sig):
        kernel = compile_one(self, sig)
        variants = ptx_by_kernel.setdefault(kernel_label(self), {})
        variants.setdefault((id(self), str(sig)), kernel.inspect_asm(PTX_CC))
        return kernel
    dispatcher.CUDADispatcher.compile = compile_and_keep
    for name in MODELS:
        try:
            count_training_step(name, warm_up=1, counted=1, tiny=True)
        except Exception as error:  # values are meaningless here; only compilation matters
            print(f"({name}: the compile-only run stopped early: {error})")
    compile_gemm_variants()
    ptxas = shutil.which("ptxas")
    reports = []
    for name, variants in sorted(ptx_by_kernel.items()):
        for ptx in variants.values():
            usage = ptxas_usage(ptx, ptxas) if ptxas else (None, None, None)
            reports.append(KernelReport(name, *usage, vector_loads(ptx),
                                        integer_divisions(ptx)))
    return reports


def print_kernel_reports(reports: list) -> None:
    print(f"\nKernels of both training steps, compiled for {PTX_ARCH} (one row per "
          f"specialisation)")
    print(f"  {'kernel':<32} {'registers':>9} {'smem B':>7} {'spill B':>7} {'vec loads':>9} "
          f"{'int div':>7}")

    def shown(value):
        return "-" if value is None else str(value)
    # Specialisations that compile alike (other dtypes of the same size) are shown once.
    rows = collections.Counter((r.name, r.registers, r.shared_bytes, r.spill_bytes,
                                r.vector_loads, r.integer_divisions) for r in reports)
    for (name, registers, shared, spills, vectors, divisions), times in rows.items():
        label = name if times == 1 else f"{name} (x{times})"
        print(f"  {label:<32} {shown(registers):>9} {shown(shared):>7} {shown(spills):>7} "
              f"{vectors:>9} {divisions:>7}")
    if reports and reports[0].registers is None:
        print("  (ptxas is not on the PATH: registers, shared memory and spills not reported)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        help="count the same models with a few numbers each (same counts, "
                             "quick on the simulator)")
    parser.add_argument("--ptx", action="store_true",
                        help="report each kernel's registers, shared memory, spills and vector "
                             "loads from the PTX instead (compile-only: needs NVVM, no GPU)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.ptx:
        print_kernel_reports(compile_kernels_to_ptx())
        return 0
    import minidl as md
    if not md.cuda.is_available():
        print("count_cuda_work: no CUDA device and no simulator (set NUMBA_ENABLE_CUDASIM=1)")
        return 0
    install_launch_counter()
    if args.tiny:
        print("(--tiny: the models' layers with a few numbers each; the counts are the same)")
    for name, title in (("cnn", "small CNN (batch 4, 3x8x8, Adam over 8 tensors)"),
                        ("mlp", "MLP 32-64-64-10 (batch 4, Adam over 6 tensors)")):
        print_step_counts(title, count_training_step(name, tiny=args.tiny))
    return 0


if __name__ == "__main__":
    sys.exit(main())
