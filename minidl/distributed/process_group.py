"""The process group: which process this is, how many there are, and how long to wait for them.

minidl does no process management or networking of its own. ``mpiexec -n 4 python train.py``
starts the processes (across machines with a hostfile) and MPI, reached through ``mpi4py``,
moves the bytes. A plain ``python train.py`` is a group of one: every collective is then the
identity and MPI is never imported, so single-process users need neither MPI nor ``mpi4py``.

**Failing fast.** MPI's own collectives block for ever when a peer never arrives (it died, or
took another branch of the program). Every minidl collective therefore first meets the other
ranks at a *non-blocking* barrier that this process polls against a deadline (``timeout``,
60 s by default); only once every rank is known to be present does the blocking MPI call run
at full speed. The meeting also compares what each rank is about to do (which collective, its
number in the sequence, the shape it moves), so a rank that skipped a collective or passes
another shape is named the moment it meets the others. A rank that died on this host is seen
within a second; one that misses the deadline is named after a roll call of the others
(:mod:`~minidl.distributed.roll_call`: dead, waiting in another collective, or busy). The
others then raise :class:`DistributedError` saying so, and the process group is marked broken:
later collectives raise at once, and at exit the job is aborted (``MPI_Abort``) rather than
left waiting in ``MPI_Finalize``.
"""

from __future__ import annotations

import atexit
import datetime
import importlib.util
import os
import sys
import time
import zlib

import numpy as np

from .launcher import detect_launch
from .roll_call import RollCall, describe_missing, host_key

DEFAULT_TIMEOUT_SECONDS = 60.0
LIVENESS_SECONDS = 0.5  # how often a waiting rank looks whether the ranks on its host live
TIMEOUT_VARIABLE = "MINIDL_DIST_TIMEOUT"
SPIN_POLLS = 100        # polls before yielding the core between polls, ...
YIELD_SECONDS = 0.1     # ... then sleep: a rank this late is computing, not about to arrive
FORWARDING_PAUSE_S = 1.0  # before MPI_Abort: time for the launcher to forward the last lines


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
        self.backend = "mpi"
        self.broken: str | None = None
        self.roll_call: RollCall | None = None
        self.collectives = 0      # collectives met so far: the same on every rank


_group = _Group()


def _launched_by_mpi() -> bool:
    launch = detect_launch()
    return launch is not None and launch.needs_mpi


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


BACKENDS = ("mpi", "nccl")


def init_process_group(backend: str = "mpi", timeout=None) -> None:
    """Join the job's process group; rank and world size come from MPI.

    MPI always starts the ranks and carries CPU tensors. ``backend`` says what carries the
    gradients of a model on a GPU: ``"mpi"`` (the default) takes NCCL when ``nccl4py`` is
    installed and the GPU is a real one, else MPI through one host copy per gradient bucket;
    ``"nccl"`` insists on NCCL and raises, naming the ``minidl[nccl]`` extra, when it is missing
    (:mod:`~minidl.distributed.device_collectives`).

    Under ``mpiexec -n N`` this initialises MPI (through ``mpi4py``) and the group has N
    ranks; a plain ``python`` run is a group of one and needs no MPI. ``timeout`` (seconds or
    a ``timedelta``; default 60 s or the ``MINIDL_DIST_TIMEOUT`` environment variable) bounds
    how long a collective waits for the other ranks before raising ``DistributedError``
    (a rank that died on the same host is detected within a second); raise it for steps
    where one rank works alone for longer (rank 0 writing a very large checkpoint).
    Calling it again is harmless.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, "
                         f"got {backend!r}")
    if backend == "nccl" and importlib.util.find_spec("nccl") is None:
        raise DistributedError("init_process_group('nccl'): nccl4py is not installed; install "
                               "it with `pip install 'minidl[nccl]'`")
    _group.timeout = _timeout_seconds(timeout)
    _group.backend = backend
    if _group.initialized:
        return
    if _launched_by_mpi() or "mpi4py.MPI" in sys.modules:
        MPI = _import_mpi()
        comm = MPI.COMM_WORLD
        if comm.Get_size() > 1:
            _group.comm = comm.Dup()  # our own context: user traffic on COMM_WORLD cannot mix
            _group.rank, _group.world_size = comm.Get_rank(), comm.Get_size()
            peers = np.empty((_group.world_size, 2), np.int64)
            _group.comm.Allgather(np.array([host_key(), os.getpid()], np.int64), peers)
            _group.roll_call = RollCall(_group.comm.Dup(), [tuple(map(int, p)) for p in peers],
                                        _group.rank)
            _group.collectives = 0
            atexit.register(_abort_if_broken)
            _abort_on_uncaught_exception()
    _group.initialized = True


def destroy_process_group() -> None:
    """Leave the group; afterwards the process is a group of one again."""
    if _group.comm is not None and _group.broken is None:
        _group.comm.Free()
        _group.roll_call.comm.Free()
    _group.roll_call = None
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


def get_backend() -> str:
    """The ``backend`` given to :func:`init_process_group` (``"mpi"`` by default)."""
    return _group.backend


def get_timeout() -> float:
    """Seconds a collective waits for the other ranks."""
    return _group.timeout


def communicator():
    """The group's mpi4py communicator, or None in a group of one."""
    if _group.broken is not None:
        raise DistributedError(f"the process group is broken ({_group.broken}); restart the job")
    return _group.comm


def wait_for_all(what: str, signature: str = "") -> None:
    """Meet every rank before a collective, or raise ``DistributedError``.

    The meeting is a tiny non-blocking all-reduce that this process polls: ``SPIN_POLLS``
    tight polls first (ranks usually arrive together, within microseconds), then polls that
    yield the core in between (when ranks outnumber cores, the rank we wait for may need ours
    to make progress; MPI's own blocking calls yield the same way), and after
    ``YIELD_SECONDS`` sleeps growing to 1 ms, so that ranks waiting for a slow one leave the
    CPU to the ones still computing. While it waits it answers the others' roll calls, looks
    every ``LIVENESS_SECONDS`` whether the ranks on its host are alive (a dead one is named at
    once), and after ``timeout`` asks the others where they are and names who is missing.

    It also compares where each rank is -- the collective ``what``, its number in the
    sequence, and ``signature`` (what it will move: shape and dtype) -- across ranks: the MAX
    of ``(h, -h)`` over ranks is ``(h, -h)`` again exactly when every rank has the same hash
    ``h``, and every rank sees the same result, so all of them raise together on a mismatch
    (after one more gather that names each rank's collective) instead of MPI mixing bytes of
    different meaning.
    """
    comm = communicator()
    if comm is None:
        return
    from mpi4py import MPI
    _group.collectives += 1
    where = f"{_group.collectives} {what}"
    code = zlib.crc32(f"{where} {signature}".encode())
    votes = np.array([code, -code], np.int64)
    request = comm.Iallreduce(MPI.IN_PLACE, votes, op=MPI.MAX)
    _poll(request.Test, what, where)
    if votes[0] != -votes[1]:
        _disagreement(comm, what, where, signature)


def wait_for_requests(requests: list, what: str) -> None:
    """Wait for non-blocking MPI operations (started after a :func:`wait_for_all` meeting of
    the same ``what``) as a collective waits: against the timeout, naming dead or missing
    ranks."""
    if not requests:
        return
    from mpi4py import MPI
    communicator()
    _poll(lambda: MPI.Request.Testall(requests), what, f"{_group.collectives} {what}")


def _poll(done, what: str, where: str) -> None:
    """Call ``done()`` until it is true, yielding, looking after the other ranks and raising
    ``DistributedError`` as :func:`wait_for_all` describes."""
    start = time.monotonic()
    next_look = start + LIVENESS_SECONDS
    pause = 0.0
    polls = 0
    while not done():
        polls += 1
        if polls < SPIN_POLLS:
            continue
        now = time.monotonic()
        waited = now - start
        if waited < YIELD_SECONDS:
            os.sched_yield()  # a rank that shares our core runs now, we come straight back
            continue
        _group.roll_call.answer(where)
        if now >= next_look:
            next_look = now + LIVENESS_SECONDS
            dead = _group.roll_call.dead_ranks()
            if dead:
                _fail(what, f"{_rank_list(dead)} died (its process is gone)")
        if waited > _group.timeout:
            answers = _group.roll_call.ask(where)
            missing = describe_missing(answers, _group.roll_call.dead_ranks(), where,
                                       _group.world_size, _group.rank)
            _fail(what, f"it waited {_group.timeout:g} s for the others: {missing} (raise the "
                        "limit with init_process_group(timeout=...) or MINIDL_DIST_TIMEOUT)")
        time.sleep(pause)
        pause = min(max(pause * 2, 1e-5), 1e-3)


def _rank_list(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _fail(what: str, reason: str) -> None:
    _group.broken = f"rank {_group.rank} gave up in {what}: {reason}"
    raise DistributedError(f"{what} (collective #{_group.collectives}) on rank {_group.rank} "
                           f"of {_group.world_size}: {reason}")


def _disagreement(comm, what: str, where: str, signature: str) -> None:
    """Every rank is here but they differ: gather where each one is, and raise naming them."""
    mine = np.zeros(256, np.uint8)
    text = f"{where} {signature}".encode()[:256]
    mine[:len(text)] = np.frombuffer(text, np.uint8)
    everyone = np.empty((_group.world_size, 256), np.uint8)
    comm.Allgather(mine, everyone)
    described = []
    for rank, row in enumerate(everyone):
        number, _, rest = row.tobytes().rstrip(b"\0").decode(errors="replace").partition(" ")
        described.append(f"rank {rank}: {rest.strip()} (collective #{number})")
    raise DistributedError(
        f"{what}: the ranks disagree on what it moves, or are not in the same collective "
        f"({'; '.join(described)}); every rank must call the same collectives in the same "
        "order with the same shape and dtype")


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
        # Said by minidl itself, flushed before the abort: the launcher's own MPI_Abort line can
        # be lost when it tears the job down.
        print(f"minidl: rank {_group.rank} ends the job with MPI_Abort: {_group.broken}",
              file=sys.stderr, flush=True)
        # Flushed is not yet shown: the lines sit in the pipe to the launcher's proxy until it
        # reads them, and the abort tears the proxies down. On a busy machine that cut the
        # traceback in half; a moment's pause lets them be forwarded (the job is failing anyway).
        time.sleep(FORWARDING_PAUSE_S)
        MPI.COMM_WORLD.Abort(1)
