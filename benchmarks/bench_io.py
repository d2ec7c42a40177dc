"""Benchmark minidl file I/O: save, load, lazy open, verify, and memory while saving.

Compares with a raw write+fsync of the same bytes (the ceiling for any format) and with
torch.save/torch.load when PyTorch is installed.  Run: ``python benchmarks/bench_io.py``.
Temporary files go to a temporary directory under the current directory (so the same
filesystem as the project is measured) and are deleted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc

import numpy as np

import minidl.io as mio


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def raw_write(path: str, arrays) -> None:
    with open(path, "wb") as file:
        for array in arrays:
            file.write(memoryview(array).cast("B"))
        file.flush()
        os.fsync(file.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tensors", type=int, default=100)
    parser.add_argument("--tensor-mb", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    n_elements = int(args.tensor_mb * (1 << 20)) // 4
    rng = np.random.default_rng(0)
    tensors = {f"layer{i}.weight": rng.standard_normal(n_elements, dtype=np.float32)
               for i in range(args.tensors)}
    total = sum(a.nbytes for a in tensors.values())
    gb = total / 1e9
    rows = []

    try:
        import torch
    except ImportError:
        torch = None

    with tempfile.TemporaryDirectory(dir=os.getcwd(), prefix=".bench_io_") as tmp:
        mdl, raw, pt = (os.path.join(tmp, name) for name in ("t.mdl", "t.raw", "t.pt"))
        mio.save(tensors, mdl)  # warm-up: compiles the checksum kernel once
        as_torch = {k: torch.from_numpy(v) for k, v in tensors.items()} if torch else None

        def torch_save():
            with open(pt, "wb") as file:
                torch.save(as_torch, file)
                file.flush()
                os.fsync(file.fileno())

        # Rounds interleave the contenders so that disk and machine noise hits them
        # alike; each writes a fresh file (the old one is removed outside the timing).
        contenders = {"minidl save": lambda: mio.save(tensors, mdl),
                      "raw": lambda: raw_write(raw, tensors.values())}
        if torch:
            contenders["torch save"] = torch_save
        best = {name: float("inf") for name in contenders}
        for _ in range(args.repeats):
            for name, fn in contenders.items():
                target = {"minidl save": mdl, "raw": raw, "torch save": pt}[name]
                if os.path.exists(target):
                    os.remove(target)
                best[name] = min(best[name], best_of(1, fn))
        t_save, t_raw = best["minidl save"], best["raw"]
        t_torch_save = best.get("torch save")
        rows.append(("save (fsync), minidl", t_save, f"{gb / t_save:.2f} GB/s"))
        rows.append(("raw write + fsync", t_raw, f"{gb / t_raw:.2f} GB/s"))
        rows.append(("save (fsync), torch.save", t_torch_save,
                     f"{gb / t_torch_save:.2f} GB/s" if torch else "n/a (torch not installed)"))

        loaders = {"verified": lambda: mio.load(mdl),
                   "unverified": lambda: mio.load(mdl, verify=False)}
        if torch:
            loaders["torch"] = lambda: torch.load(pt, weights_only=True)
        best = {name: float("inf") for name in loaders}
        for _ in range(args.repeats):
            for name, fn in loaders.items():
                best[name] = min(best[name], best_of(1, fn))
        t_load, t_torch_load = best["verified"], best.get("torch")
        rows.append(("full load, verified", t_load, f"{gb / t_load:.2f} GB/s"))
        rows.append(("full load, verify=False", best["unverified"],
                     f"{gb / best['unverified']:.2f} GB/s"))
        rows.append(("torch.load(weights_only)", t_torch_load,
                     f"{gb / t_torch_load:.2f} GB/s" if torch else "n/a"))

        opens = []
        for _ in range(50):
            start = time.perf_counter()
            mio.load(mdl, mmap=True, verify=False)  # mapped loads verify unless told not to
            opens.append(time.perf_counter() - start)
        t_open = statistics.median(opens)
        rows.append(("lazy open (mmap=True, verify=False), median", t_open,
                     f"{t_open * 1e3:.2f} ms"))
        t_verify = best_of(args.repeats, lambda: mio.verify_file(mdl))
        rows.append(("verify (page cache warm)", t_verify, f"{gb / t_verify:.2f} GB/s"))

        tracemalloc.start()
        mio.save(tensors, mdl)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append(("peak extra memory while saving", None, f"{peak / 2**20:.1f} MiB"))

    print(f"\nminidl I/O benchmark: {args.tensors} float32 tensors x {args.tensor_mb:g} MB "
          f"= {total / 2**20:.0f} MiB, best of {args.repeats}\n")
    print(f"{'measure':<34}{'seconds':>10}  result")
    print("-" * 70)
    for name, seconds, result in rows:
        shown = f"{seconds:10.3f}" if seconds is not None else f"{'':>10}"
        print(f"{name:<34}{shown}  {result}")
    print("-" * 70)
    print(f"save vs raw write:   {t_raw / t_save:6.0%}   (target >= 70%)")
    if torch:
        print(f"save vs torch.save:  {t_torch_save / t_save:6.2f}x  (target >= 2x)")
        print(f"load vs torch.load:  {t_torch_load / t_load:6.2f}x  (target >= 1x)")
    print(f"lazy open:           {t_open * 1e3:6.2f} ms (target <= 5 ms)")


if __name__ == "__main__":
    main()
