"""Run the training script, SIGKILL it at random moments, restart it until it finishes.

Shared by the kill tests and ``benchmarks/stress_kill_resume.py``.  A kill counts as
*inside a save* when the script's last words were "saving N" (it died inside the save
call) or when it left the hidden temporary file of a half-written checkpoint behind (a
background write was under way: that file exists only until the atomic rename).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint_train_script.py")


@dataclass
class KillStats:
    """What happened during one interrupted run."""

    kills: int = 0
    kills_inside_save: int = 0
    restarts: int = 0
    seconds: float = 0.0


def _start(directory: str, output: str, options: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, SCRIPT, directory, output, *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen) -> None:
    _, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"training script failed ({process.returncode}):\n{err}")


def _leftover_temps(directory: str) -> int:
    return sum(1 for name in os.listdir(directory) if name.endswith(".tmp"))


def run_uninterrupted(directory: str, output: str, options: list[str]) -> float:
    """Run to the end; returns the seconds per step (saves included), timed after step 1,
    which also loads the compiled kernels."""
    process = _start(directory, output, options)
    stamps = []
    for line in process.stdout:
        if line.startswith("step"):
            stamps.append(time.perf_counter())
    _finish(process)
    return (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1)


def _wait_for_step(process: subprocess.Popen, target: int) -> bool:
    """Read progress lines until step ``target`` is reported; False if the run ended first."""
    for line in process.stdout:
        if line.startswith("step") and int(line.split()[1]) >= target:
            return True
    return False


def run_with_kills(directory: str, output: str, options: list[str], kills: int,
                   seconds_per_step: float, total_steps: int, rng: np.random.Generator,
                   window: int = 8) -> KillStats:
    """Kill the run up to ``kills`` times, then let it finish.

    Each kill is aimed at one of the next ``window`` steps, drawn at random: once the script
    reports that step, the harness sleeps a random fraction of two steps' time (a save
    takes most of a step's time) and sends SIGKILL, wherever the script then is.  A run
    restored with no step left is let finish.
    """
    stats = KillStats()
    began = time.perf_counter()
    while True:
        process = _start(directory, output, options)
        line = process.stdout.readline()  # "training START"
        start = int(line.split()[1]) if line.startswith("training") else total_steps
        if stats.kills < kills and start < total_steps:
            target = start + int(rng.integers(1, min(window, total_steps - start) + 1))
            if _wait_for_step(process, target):
                time.sleep(rng.uniform(0.0, 2 * seconds_per_step))
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                rest, _ = process.communicate()
                last_words = rest.splitlines()[-1] if rest.strip() else ""
                stats.kills += 1
                stats.kills_inside_save += (last_words.startswith("saving")
                                            or _leftover_temps(directory) > 0)
                stats.restarts += 1
                continue
        _finish(process)
        if os.path.exists(output):
            break
        stats.restarts += 1
    stats.seconds = time.perf_counter() - began
    return stats


def load_result(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


def bitwise_differences(a: dict, b: dict) -> list[str]:
    """Names whose arrays differ in keys, dtype, shape or any bit."""
    problems = sorted(set(a) ^ set(b))
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            problems.append(name)
    return problems
