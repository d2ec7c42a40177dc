"""``benchmarks/bench_engine.py``: its quick mode runs, and its Amdahl arithmetic is right.

The benchmark's figures are taken on a quiet machine, but its code must not first meet one
untested. By default: the Amdahl arithmetic, and the breakdown's minidl timing in this process.
Marked slow (each starts several child processes that import both engines): a quick run (one
round, 0.2 s windows) of the MLP row at 1 and 2 threads, and of the breakdown, checks that every
column they print is filled.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_engine.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_engine", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_parallel_fraction_inverts_amdahls_law(bench):
    # T(4) = T(1)·(0.25 + 0.75/4): three quarters of the part runs in parallel.
    assert bench.parallel_fraction(1.0, 0.25 + 0.75 / 4, 4) == pytest.approx(0.75)
    assert bench.parallel_fraction(2.0, 1.0, 2) == pytest.approx(1.0)
    assert bench.parallel_fraction(1.0, 1.3, 2) == 0.0  # slower with threads: serial
    assert bench.parallel_fraction(1.0, 0.1, 2) == 1.0  # (noise beyond perfect scaling)


def test_amdahl_projection_sums_each_parts_own_law(bench):
    # A serial part of 3 ms and a perfectly parallel one of 1 ms (0.5 ms at 2 threads).
    share, projected = bench.amdahl_projection({"a": 3e-3, "b": 1e-3}, {"a": 3e-3, "b": 5e-4},
                                               2, (8, 16))
    assert share == pytest.approx(0.75)
    assert projected[8] == pytest.approx(1 / (3e-3 + 1e-3 / 8))
    assert projected[16] == pytest.approx(1 / (3e-3 + 1e-3 / 16))


def test_thread_counts_accept_lists_and_all(bench):
    assert bench.thread_counts("1,2,2") == [1, 2]
    assert bench.thread_counts("all") == [bench.available_cores()]
    with pytest.raises(Exception, match="positive thread counts"):
        bench.thread_counts("1,zero")


def test_breakdown_times_each_primitive_and_restores_the_backend(bench, capsys):
    import json

    import minidl as md
    backend = md.backend.get_backend("cpu")
    threads = md.get_num_threads()
    try:
        bench.breakdown_worker("minidl", "mlp", 0.01)
    finally:
        md.set_num_threads(threads)
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert {"matmul", "relu"} <= set(result["parts"]), result
    assert any(name.startswith("adam_update") for name in result["parts"]), result  # (or _group)
    assert 0 < sum(result["parts"].values()) < result["step"]
    assert "matmul" not in vars(backend)  # the timers are gone again


@pytest.mark.slow
def test_quick_run_fills_every_column_at_each_thread_count(bench, capsys):
    pytest.importorskip("torch")
    assert bench.main(["--workloads", "mlp", "--threads", "1,2", "--rounds", "1",
                       "--seconds", "0.2"]) == 0
    output = capsys.readouterr().out
    assert re.search(r"load average \(1, 5, 15 min\): [\d.]+ [\d.]+ [\d.]+ before", output)
    rows = re.findall(r"^(?:MLP.*?)?\s+([12])\s+([\d.]+) steps/s\s+([\d.]+) steps/s\s+"
                      r"([\d.]+)x\s+([\d.]+)\s+([\d.]+)", output, re.MULTILINE)
    assert [threads for threads, *_ in rows] == ["1", "2"], output
    for threads, ours, theirs, ratio, our_speedup, their_speedup in rows:
        assert float(ours) > 0 and float(theirs) > 0
        assert float(ratio) == pytest.approx(float(ours) / float(theirs), rel=0.02)
        if threads == "1":
            assert our_speedup == their_speedup == "1.00"


@pytest.mark.slow
def test_breakdown_names_primitives_and_projects_to_more_threads(bench, capsys):
    assert bench.main(["--workloads", "mlp", "--threads", "1,2", "--rounds", "1",
                       "--seconds", "0.2", "--breakdown"]) == 0
    output = capsys.readouterr().out
    minidl = output[output.index("  minidl "):]
    assert re.search(r"^  matmul\s+[\d.]+\s+[\d.]+\s+[\d.]+%", minidl, re.MULTILINE), output
    assert re.search(r"^  adam_update\w*\s", minidl, re.MULTILINE), output
    assert re.search(r"minidl: \d+% of the 1-thread step ran on one core; steps/s measured "
                     r"1T [\d.]+, 2T [\d.]+; Amdahl projection 8T [\d.]+, 16T [\d.]+", output)
