"""``benchmarks/count_cuda_work.py``: what a CUDA training step costs, counted on the simulator.

The counts (launches, layout copies, device->host reads, copies, driver allocations) need no GPU
and do not depend on sizes, so the tests count the report's models with a few numbers each and
hold the backend to its targets: a training step never waits for the device, copies nothing
between host and device and asks the driver for no memory once warm.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_helpers import requires_cuda  # noqa: E402

import minidl as md  # noqa: E402

pytestmark = requires_cuda
ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "count_cuda_work.py"


@pytest.fixture(scope="module")
def counter():
    spec = importlib.util.spec_from_file_location("count_cuda_work", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    module.install_launch_counter()
    return module


def test_the_launch_counter_counts_each_kernel_launch_by_name(counter):
    from minidl.backend import get_backend
    be = get_backend("cuda")
    x = be.full((3,), 1.0, "float32")
    counter.launches.clear()
    be.math_function(be.math_function(x, "exp"), "exp")
    assert sum(counter.launches.values()) == 2 and len(counter.launches) == 1, counter.launches


def test_products_read_transposed_operands_without_layout_copies(counter):
    # A linear layer's forward (x Wᵀ) and backward (dY W, dYᵀ x) and a matmul's backward
    # (dC Bᵀ, Aᵀ dC) hand the transposes to the GEMM as flags.
    from minidl import nn
    x = md.ones(3, 4).to("cuda:0").requires_grad_()
    layer = nn.Linear(4, 5, bias=False).to("cuda:0")
    b = md.ones(5, 2).to("cuda:0").requires_grad_()
    upstream = md.ones(3, 2).to("cuda:0")
    counter.launches.clear()
    (layer(x) @ b).backward(upstream)
    assert counter.launches["gemm"] == 6, counter.launches
    assert counter.launches[counter.LAYOUT_COPY] == 0, counter.launches


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("groups", [1, 2])
def test_convolutions_feed_the_gemm_their_im2col_layout_without_layout_copies(counter, groups,
                                                                             transposed):
    # Forward, input gradient and weight gradient: three products reading the im2col columns
    # (K, N·L) as a batch of images in place and writing (N, O, L) straight out; the weight
    # gradient sums over the images inside the product. No (N, O, L) <-> (O, N, L) copies.
    import numpy as np
    from minidl.nn import functional as F
    from minidl.ops.conv_transpose import conv_transpose2d
    values = np.random.default_rng(0).standard_normal((3, 4, 5, 5)).astype(np.float32)
    x = md.tensor(values).to("cuda:0").requires_grad_()
    w = md.ones(4, 4 // groups, 3, 3).to("cuda:0").requires_grad_()
    counter.launches.clear()
    y = conv_transpose2d(x, w, groups=groups) if transposed else \
        F.conv2d(x, w, padding=1, groups=groups)
    y.backward(md.ones(*y.shape).to("cuda:0"))
    assert counter.launches["gemm"] == 3, counter.launches
    assert counter.launches[counter.LAYOUT_COPY] == 0, counter.launches


@pytest.mark.parametrize("axes", [(0,), (0, 2, 3), (1, 3)])
def test_sums_over_leading_or_middle_axes_read_the_array_in_place(counter, axes):
    # A bias gradient sums over the batch (and pixel) axes: one launch, no transposed copy.
    import numpy as np
    from minidl.backend import get_backend
    be = get_backend("cuda")
    values = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) % 7
    x = be.from_numpy(values)
    counter.launches.clear()
    total = be.sum(x, axis=axes)
    assert sum(counter.launches.values()) == 1, counter.launches
    np.testing.assert_array_equal(be.to_numpy(total), values.sum(axis=axes))


@pytest.mark.parametrize("stride, gather", [(2, "_max_pool_backward_disjoint"),
                                            (1, "_max_pool_backward_gather")])
def test_max_pool_backward_is_one_gather_whether_windows_overlap_or_not(counter, stride, gather):
    # (Overlapping windows were a zero-fill, float64 atomic adds and a cast: three launches.)
    from minidl.backend import get_backend
    be = get_backend("cuda")
    x = be.from_numpy(np.arange(2 * 6 * 6, dtype=np.float32).reshape(1, 2, 6, 6) % 5)
    out, argmax = be.max_pool2d_forward(x, (2, 2), (stride, stride), (0, 0), (1, 1), False)
    counter.launches.clear()
    be.max_pool2d_backward(be.full(out.shape, 1.0, np.float32), argmax, x.shape)
    assert counter.launches == {"_fill": 1, gather: 1}, counter.launches


@pytest.mark.parametrize("reduction, backward_launches", [("mean", 2), ("sum", 1)])
def test_cross_entropy_reduces_inside_its_own_kernels(counter, reduction, backward_launches):
    # log-softmax and the rows' losses with each block's partial sum, then the sum of those
    # partials; back: (a mean's count of targets not ignored, then) the gradient.
    logits = md.ones(20, 3).to("cuda:0").requires_grad_()
    targets = md.tensor(np.arange(20) % 3).to("cuda:0")
    counter.launches.clear()
    loss = md.nn.functional.cross_entropy(logits, targets, reduction=reduction)
    assert sum(counter.launches.values()) == 2, counter.launches
    counter.launches.clear()
    loss.backward()
    assert sum(counter.launches.values()) == backward_launches + 1, counter.launches  # (+ seed)


@pytest.mark.parametrize("axis, first_level", [(None, "kernel"), (0, "strided_kernel")])
def test_a_sum_of_few_long_rows_spreads_over_many_blocks_in_two_launches(counter, axis,
                                                                         first_level):
    # A full sum, and a sum over the leading axis for two columns (a bias gradient's shape):
    # blocks fold chunks of each row, read in place or through strides, then their results.
    from minidl.backend import get_backend
    from minidl.backend.cuda.reduction import CHUNK
    be = get_backend("cuda")
    values = np.arange(5 * CHUNK * 2, dtype=np.float64).reshape(5 * CHUNK, 2)
    counter.launches.clear()
    total = be.sum(be.from_numpy(values), axis=axis)
    expected = collections.Counter({first_level: 1})
    expected["kernel"] += 1  # the second level reads the chunks' results in place
    assert counter.launches == expected, counter.launches
    np.testing.assert_array_equal(be.to_numpy(total), values.sum(axis=axis))


# Launches per warm training step, at most (the target was 40 for the CNN; it made 81). No layout
# copy feeds a GEMM: the convolutions' products read their im2col columns through strides, and
# the one copy left is batch norm's batch counter.
LAUNCH_CEILINGS = {"cnn": 37, "mlp": 24}


@pytest.mark.parametrize("model", ["cnn", "mlp"])
def test_a_warm_training_step_never_waits_copies_or_allocates(counter, model, capsys):
    counts = counter.count_training_step(model, warm_up=2, tiny=True)
    assert counts.launches <= LAUNCH_CEILINGS[model], counts
    # Cross-entropy's mean is taken inside its own kernels: nothing copies, fills or casts.
    assert counts.by_kernel.get(counter.LAYOUT_COPY, 0) <= (1 if model == "cnn" else 0), counts
    assert counts.by_kernel.get("_fill", 0) <= 1, counts  # backward()'s seed gradient
    assert counts.device_to_host_reads == 0, counts
    assert counts.host_to_device_copies == 0, counts
    assert counts.driver_allocations == 0, counts
    assert counts.launches == sum(counts.by_kernel.values()) > 0, counts
    assert counts.layout_copies == counts.by_kernel.get(counter.LAYOUT_COPY, 0), counts
    # Adam updates the whole parameter group in one multi-tensor launch.
    assert counts.by_kernel.get("adam_group") == 1 and "adam" not in counts.by_kernel, counts
    # MaxPool2d(2)'s windows do not overlap: its backward is one gather, no float64 atomics.
    assert "_max_pool_backward" not in counts.by_kernel, counts
    counter.print_step_counts(model, counts)
    output = capsys.readouterr().out
    for label in ("kernel launches", "layout copies", "blocking device->host reads",
                  "host->device copies", "driver allocations", "launches by kernel"):
        assert label in output, output


def test_ptx_figures_are_read_from_ptxas_and_the_ptx(counter):
    report = ("ptxas info    : Function properties for gemm\n"
              "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
              "ptxas info    : Used 63 registers, 8192 bytes smem, 400 bytes cmem[0]\n")
    assert counter.parse_ptxas_report(report) == (63, 8192, 20)
    ptx = ("ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4];\n"
           "ld.shared.v2.f32 {%f5, %f6}, [%r3];\n"
           "ld.global.f32 %f7, [%rd5];\n"
           "st.shared.v4.f32 [%r4], {%f1, %f2, %f3, %f4};\n")
    assert counter.vector_loads(ptx) == 2
    ptx = ("div.u32 %r3, %r1, %r2;\nrem.s64 %rd3, %rd1, %rd2;\ndiv.rn.f32 %f3, %f1, %f2;\n"
           "mul.hi.u32 %r4, %r1, %r2;\n")
    assert counter.integer_divisions(ptx) == 2  # (a float division is not one)


@pytest.mark.slow
def test_the_ptx_report_compiles_every_kernel_of_both_steps():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, str(SCRIPT), "--ptx"], capture_output=True,
                            text=True, env=env, timeout=600)
    if "stopped early" in result.stdout and "nvvm" in result.stdout.lower():
        pytest.skip("numba finds no NVVM here: " + result.stdout.splitlines()[0])
    assert result.returncode == 0, result.stderr
    assert "stopped early" not in result.stdout, result.stdout
    # "gemm 128x128 NT v4/v4 32-bit  registers smem spills vector-loads int-div": both tiles,
    # no spills in any variant, and vector loads wherever the operands are aligned
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("  gemm")]
    assert {row[1] for row in rows} >= {"128x128", "64x64"}, result.stdout
    assert all(row[-3] in ("0", "-") for row in rows), result.stdout
    assert all(int(row[-2]) >= 4 for row in rows if row[3] == "v4/v4"), result.stdout


def test_a_compiled_plan_launches_no_more_kernels_than_its_ops_one_by_one(counter, monkeypatch):
    # md.compile hands convolutions, pools and linear layers to the backend's plan steps; on
    # CUDA they are composed of the ops' own primitives and must not add launches (a copy of
    # each result into a fixed buffer once added one per step).
    from minidl.inference import plan
    md.manual_seed(0)
    nn = md.nn
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8, 2)).eval().to("cuda")
    x = md.randn(1, 1, 4, 4).to("cuda")

    def launches_per_call(compiled):
        counter.launches.clear()
        compiled(x)
        return sum(counter.launches.values())
    lowered = md.compile(model, x)
    assert sum("# plan step" in line for line in lowered.steps) == 3, lowered
    monkeypatch.setattr(plan, "lower_steps", lambda *args: {})
    op_by_op = md.compile(model, x)
    assert not any("# plan step" in line for line in op_by_op.steps)
    assert launches_per_call(lowered) <= launches_per_call(op_by_op)
