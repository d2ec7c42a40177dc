"""Starting scripts under ``mpiexec`` from the tests, or skipping when MPI is not installed.

The MPI tests need ``mpi4py`` and an ``mpiexec``: the one installed beside this Python (the
``mpich`` wheel of ``pip install minidl[mpi]``) or one on the PATH. Ranks outnumber the cores
on small machines; MPICH's launcher allows that without options.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ddp_train_script.py")


def find_mpiexec() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(beside):
        return beside
    return shutil.which("mpiexec")


def why_no_mpi() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install minidl[mpi])"
    if find_mpiexec() is None:
        return "no mpiexec beside this Python or on the PATH (pip install mpich)"
    return None


requires_mpi = pytest.mark.skipif(why_no_mpi() is not None, reason=str(why_no_mpi()))


def environment() -> dict:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(HERE))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    # Several ranks share few cores: one thread each, or their thread pools fight.
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = "1"
    return env


def command(ranks: int, script: str, *args: str) -> list[str]:
    """The command line that runs ``script`` on ``ranks`` processes (1: plain python)."""
    base = [sys.executable, script, *args]
    return base if ranks == 1 else [find_mpiexec(), "-n", str(ranks), *base]


def run(ranks: int, script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(command(ranks, script, *args), capture_output=True, text=True,
                            timeout=timeout, env=environment())
    if result.returncode != 0:
        raise AssertionError(f"{ranks} rank(s) of {os.path.basename(script)} failed "
                             f"({result.returncode}):\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


def start(ranks: int, script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(command(ranks, script, *args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environment())
