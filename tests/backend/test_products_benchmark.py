"""``benchmarks/bench_products.py`` runs, and fills both runners' columns on every row."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from minidl.backend.numba_cpu import product_parts

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_products.py"


@pytest.mark.skipif(not product_parts.gemm_functions(),
                    reason="NumPy's BLAS here has no 64-bit-integer CBLAS gemm")
def test_a_quick_run_times_every_product_on_both_runners():
    out = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "1", "--calls", "1"],
                         check=True, capture_output=True, text=True, timeout=300).stdout
    rows = [line for line in out.splitlines() if re.search(r"us \(\d+\.\d\dx\)", line)]
    assert len(rows) == 5
    for row in rows:
        assert len(re.findall(r"\d+ us", row)) == 3  # one thread, Python workers, Numba threads
