"""Reading any file needs at most 2 x its size + 64 MB (4 x the header budget): every load path
(md.load, mapped, load_model, read_file, Checkpoint.restore, restore_latest, minidl inspect),
on header-heavy files within the header budget and far beyond it, and on legitimate files,
whose cost must be proportional to their size (2 x plus a few MB: their headers are small).

The peaks are measured with tracemalloc in a child process (tests/io/memory_worker.py), with
the header budget lowered to keep it quick; the 64 MB is then 4 x that budget."""

import json
import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memory_worker.py")
LEGITIMATE_SLACK = 8 << 20


def measured(directory, beyond=None) -> list[dict]:
    environment = dict(os.environ)
    project = os.path.dirname(os.path.dirname(os.path.dirname(WORKER)))
    environment["PYTHONPATH"] = os.pathsep.join(
        [project] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p])
    command = [sys.executable, WORKER, str(directory)] + ([str(beyond)] if beyond else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200,
                          env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return lines[0]["limit"], lines[1:]


def check(limit: int, results: list[dict]) -> None:
    paths = {r["path"] for r in results}
    assert {"md.load", "md.load mmap", "load_model", "read_file", "Checkpoint.restore",
            "restore_latest", "inspect"} <= paths
    over = []
    for r in results:
        slack = LEGITIMATE_SLACK if r["file"].startswith("legitimate") else 4 * limit
        if r["growth_bytes"] > 2 * r["file_bytes"] + slack:
            over.append(r)
    assert not over, over


def test_every_load_path_stays_within_twice_the_file_plus_64_mb(tmp_path):
    check(*measured(tmp_path))


@pytest.mark.slow
def test_a_far_larger_header_heavy_file_too(tmp_path):
    check(*measured(tmp_path, beyond=2_000_000))
