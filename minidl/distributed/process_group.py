"""The process group: which process this is, how many there are, and how long to wait for them.

minidl does no process management or networking of its own. ``mpiexec -n 4 python train.py``
starts the processes (across machines with a hostfile) and MPI, reached through ``mpi4py``,
moves the bytes. A plain ``python train.py`` is a group of one: every collective is then the
identity and MPI is never imported, so single-process users need neither MPI nor ``mpi4py``.

**Failing fast.** MPI's own collectives block for ever when a peer never arrives (it died, or
took another branch of the program). Every minidl collective therefore first meets the other
ranks at a *non-blocking* barrier that this process polls against a deadline (``timeout``);
only once every rank is known to be present does the blocking MPI call run at full speed. A
rank that misses the deadline makes the others raise :class:`DistributedError` saying so,
and the process group is marked broken: later collectives raise at once, and at exit the
job is aborted (``MPI_Abort``) rather than left waiting in ``MPI_Finalize``.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
import time
import zlib

import numpy as np

# Environment variables by which MPI launchers tell a process it is one of several (MPICH's
# Hydra and Slurm's PMI, Open MPI, MVAPICH).
_LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
DEFAULT_TIMEOUT_SECONDS = 300.0
TIMEOUT_VARIABLE = "MINIDL_DIST_TIMEOUT"
SPIN_POLLS = 100        # polls before yielding the core between polls, ...
YIELD_SECONDS = 0.1     # ... then sleep: a rank this late is computing, not about to arrive


class DistributedError(RuntimeError):
    """A collective could not complete: a rank is missing, dead, or disagrees with the others."""


class _Group:
    """The state of this process's membership (one per process)."""

    def __init__(self):
        self.initialized = False
        self.comm = None          # mpi4py communicator, None for a group of one
        self.rank = 0
        self.world_size = 1
        self.timeout = DEFAULT_TIMEOUT_SECONDS
        self.broken: str | None = None


_group = _Group()


def _launched_by_mpi() -> bool:
    for name in _LAUNCHER_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 1:
            return True
    return False


def _timeout_seconds(timeout) -> float:
    if timeout is None:
        timeout = os.environ.get(TIMEOUT_VARIABLE, DEFAULT_TIMEOUT_SECONDS)
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"timeout must be seconds or a timedelta, got {timeout!r}") from None
    if not seconds > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    return seconds


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DistributedError(
            "this process was started by an MPI launcher but mpi4py is not installed; "
            "install it with `pip install minidl[mpi]` (mpi4py and the mpich wheel) or "
            "`pip install mpi4py` against a system MPI") from exc
    return MPI


def init_process_group(backend: str = "mpi", timeout=None) -> None:
    """Join the job's process group; rank and world size come from MPI.

    Under ``mpiexec -n N`` this initialises MPI (through ``mpi4py``) and the group has N
    ranks; a plain ``python`` run is a group of one and needs no MPI. ``timeout`` (seconds or
    a ``timedelta``; default 300 s or the ``MINIDL_DIST_TIMEOUT`` environment variable) bounds
    how long a collective waits for the other ranks before raising ``DistributedError``.
    Calling it again is harmless.
    """
    if backend != "mpi":
        raise ValueError(f"backend: only 'mpi' is supported, got {backend!r}")
    _group.timeout = _timeout_seconds(timeout)
    if _group.initialized:
        return
    if _launched_by_mpi() or "mpi4py.MPI" in sys.modules:
        MPI = _import_mpi()
        comm = MPI.COMM_WORLD
        if comm.Get_size() > 1:
            _group.comm = comm.Dup()  # our own context: user traffic on COMM_WORLD cannot mix
            _group.rank, _group.world_size = comm.Get_rank(), comm.Get_size()
            atexit.register(_abort_if_broken)
            _abort_on_uncaught_exception()
    _group.initialized = True


def destroy_process_group() -> None:
    """Leave the group; afterwards the process is a group of one again."""
    if _group.comm is not None and _group.broken is None:
        _group.comm.Free()
    _group.comm, _group.rank, _group.world_size = None, 0, 1
    _group.initialized = False


def is_initialized() -> bool:
    """Whether :func:`init_process_group` was called."""
    return _group.initialized


def is_available() -> bool:
    """Whether multi-process training is possible here (``mpi4py`` can be imported)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def get_rank() -> int:
    """This process's rank, 0 .. world size - 1 (0 when the group was not initialised)."""
    return _group.rank


def get_world_size() -> int:
    """Number of processes in the group (1 when the group was not initialised)."""
    return _group.world_size


def get_timeout() -> float:
    """Seconds a collective waits for the other ranks."""
    return _group.timeout


def communicator():
    """The group's mpi4py communicator, or None in a group of one."""
    if _group.broken is not None:
        raise DistributedError(f"the process group is broken ({_group.broken}); restart the job")
    return _group.comm


def wait_for_all(what: str, signature: str = "") -> None:
    """Meet every rank before a collective, or raise ``DistributedError`` after the timeout.

    The meeting is a tiny non-blocking all-reduce that this process polls: ``SPIN_POLLS``
    tight polls first (ranks usually arrive together, within microseconds), then polls that
    yield the core in between (when ranks outnumber cores, the rank we wait for may need ours
    to make progress; MPI's own blocking calls yield the same way), and after
    ``YIELD_SECONDS`` sleeps growing to 1 ms, so that ranks waiting for a slow one leave the
    CPU to the ones still computing. It also compares
    ``signature`` (what the collective will move: shape and dtype) across ranks: the MAX of
    ``(h, -h)`` over ranks is ``(h, -h)`` again exactly when every rank has the same hash
    ``h``, and every rank sees the same result, so all of them raise together on a mismatch
    instead of MPI mixing bytes of different meaning.
    """
    comm = communicator()
    if comm is None:
        return
    from mpi4py import MPI
    code = zlib.crc32(signature.encode())
    votes = np.array([code, -code], np.int64)
    request = comm.Iallreduce(MPI.IN_PLACE, votes, op=MPI.MAX)
    start = time.monotonic()
    deadline = start + _group.timeout
    pause = 0.0
    polls = 0
    while not request.Test():
        polls += 1
        if polls < SPIN_POLLS:
            continue
        waited = time.monotonic() - start
        if waited > _group.timeout:
            _group.broken = (f"rank {_group.rank} waited {_group.timeout:g} s in {what} for "
                             "ranks that never arrived")
            raise DistributedError(
                f"{what}: rank {_group.rank} of {_group.world_size} waited "
                f"{_group.timeout:g} s and not every rank arrived; a rank has died, hangs, "
                "or is not calling the same collective (raise the limit with "
                "init_process_group(timeout=...))")
        if waited < YIELD_SECONDS:
            os.sched_yield()  # a rank that shares our core runs now, we come straight back
            continue
        time.sleep(pause)
        pause = min(max(pause * 2, 1e-5), 1e-3)
    if votes[0] != -votes[1]:
        raise DistributedError(f"{what}: the ranks disagree on what it moves (this rank: "
                               f"{signature or 'nothing'}); every rank must pass the same shape "
                               "and dtype")


def _abort_on_uncaught_exception() -> None:
    """An exception that ends one rank ends the job (as ``python -m mpi4py`` does).

    Otherwise the other ranks would only notice at their next collective's timeout.
    """
    previous = sys.excepthook

    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        sys.stderr.flush()
        _group.broken = _group.broken or f"rank {_group.rank} raised {kind.__name__}"
        _abort_if_broken()

    sys.excepthook = hook


def _abort_if_broken() -> None:
    # Runs before mpi4py's own exit handler (registered earlier, so run later): a job whose
    # group broke would otherwise wait in MPI_Finalize for the missing rank for ever.
    if _group.broken is not None:
        from mpi4py import MPI
        MPI.COMM_WORLD.Abort(1)
