"""``benchmarks/bench_cuda.py --smoke`` runs every row of the CUDA benchmark with tiny sizes.

The benchmark's figures need a GPU, but its code must not first meet one untested: the smoke
mode runs the SGEMM, MLP, CNN, copy and allocator rows (and the PyTorch comparisons, on
PyTorch's CPU when it has no CUDA), here on the simulator or the GPU the tests run on.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_helpers import requires_cuda  # noqa: E402

pytestmark = requires_cuda
SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_cuda.py"


def load_script():
    spec = importlib.util.spec_from_file_location("bench_cuda", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def test_every_row_of_the_benchmark_runs_in_smoke_mode(capsys):
    assert load_script().main(["--smoke"]) == 0
    output = capsys.readouterr().out
    titles = ["SGEMM 8x8x8 float32 (GFLOP/s)", "MLP 6-4-4-3, batch 1, Adam (steps/s)",
              "CNN (4x4 RGB, BatchNorm), batch 1, SGD momentum (steps/s)",
              "Copies of 1 KiB (GB/s)", "Caching allocator, CNN training:"]
    for title in titles:
        assert title in output, output
    rows = re.findall(r"^  (matmul|training steps|host->device|device->host)\s+([\d,.]+)\s+"
                      r"(\S+)\s+(\S+)$", output, re.MULTILINE)
    assert [name for name, *_ in rows] == ["matmul", "training steps", "training steps",
                                           "host->device", "device->host"], output
    for name, ours, theirs, ratio in rows:
        assert math.isfinite(float(ours.replace(",", ""))), name
        try:
            import torch  # noqa: F401  (the comparison ran: on its GPU, or its CPU)
        except ImportError:
            assert theirs == ratio == "-", name
        else:  # (tiny sizes may print 0.0, and then no ratio)
            assert math.isfinite(float(theirs.replace(",", ""))), name
            assert ratio.endswith("x") or (ratio == "-" and float(theirs) == 0), name
