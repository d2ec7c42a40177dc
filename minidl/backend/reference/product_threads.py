"""A large matrix product's independent parts computed on several threads at once, each part one
BLAS call on one thread.

Why not leave the threads to BLAS: a convolution's products and attention's are stacks of
small GEMMs (one per image or head), which OpenBLAS runs one after another, each on one core
(it threads only large single products). And where it does thread (a Linear layer's product),
its idle workers spin on the cores for a while after each product, just when the Numba kernels
around it (im2col, batch norm) want those cores: the two pools then take turns on the cores
instead of working at once. So a product that is big enough is cut here into as many parts as
the thread budget (``md.set_num_threads``), the calling thread and a few persistent worker
threads each claim parts until none is left (NumPy lets go of the GIL inside ``matmul``), while
OpenBLAS computes on one thread (``md.set_num_threads`` sets it so, see :mod:`..threads`), so
that the budget is never exceeded. The workers sleep on a queue between products: nothing
spins.

Once the CPU backend's kernels are loaded, the products whose parts are plain BLAS calls (rows of
a 2-D product, the matrices of a stack, the image blocks of a convolution's wide product, the
images of a small weight gradient) hand those calls to Numba's threads instead
(:data:`native_parts`), which take a part in microseconds; the rest (a large weight gradient's
chunks of images, whose parts also copy and add) stay here.

A part is a range of output rows or of whole images, never a range of the summed axis: every
output element is still one BLAS dot product over the whole of k, in the same order, so the
result is bitwise the same whichever thread computes it and however many parts there are.

Numba's pool hands a part over fast only while its threads spin. When they waited passively (as the
CPU backend once had them do), a parallel region woke its thread through the kernel as a queue
wakes a worker here, and its end waited for every thread, where the caller here computes a late
worker's parts itself. Measured then on a 2-core virtual machine (float32, two parts, medians of
interleaved rounds, load average 1.1-1.5), against one thread: both gained only from ~16-30 million
multiply-adds (Numba's pool, then this module: 1024×128×128 0.96x, 0.92x; 2048×128×128 1.46x,
1.56x), Numba's lost more on small per-head stacks (32×(64×32×64): 0.52x, 0.70x), and the
attention, Transformer and LSTM steps, their plain and per-head products on Numba's pool from 2²²
multiply-adds, took the same time (1.00-1.01x). With spinning threads the hand-off took ~2 µs and
4-8 million multiply-adds gained 1.65-2.1x (load 0.8), but a product waited 4-7 ms for a thread
whose core another process had taken (load 1.4-3), and 1-5 ms to wake one idle for 20 ms. Numba's
threads now spin only for a moment after each region (about 0.4 ms), which keeps the fast hand-off
inside a training step and lets them sleep between steps; hence :data:`native_parts`.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import queue
import threading

from .. import threads
from ..threads import (follow_in_this_thread, on_numba_threads, openblas_thread_count_functions,
                       product_thread_budget)

# Multiply-adds every part keeps. Below 100³ = 10⁶ multiply-adds OpenBLAS switches to its
# small-matrix kernels, which sum in another order: a part of a product too large for them must
# stay too large as well, or its bits would depend on the thread count. (Whether a split pays
# at all is SPLIT_MIN_WORK's question.)
PARALLEL_MIN_WORK = 1 << 21

# Multiply-adds from which a product is split at all. A worker that sleeps takes a while to
# wake: on a 2-core virtual machine handing it a part cost ~150 µs, and a float32 product gained
# from a second thread only from ~25 million multiply-adds (6.3M: 0.51x, 16.8M: 0.93x, 33.6M:
# 1.15x, 51M: 1.27x, 134M: 1.70x). Below this a product stays whole on the calling thread.
SPLIT_MIN_WORK = 1 << 25

# Multiply-adds of one BLAS call below which OpenBLAS runs its small-matrix kernels (100³).
_SMALL_CALL_WORK = 10 ** 6

# Multiply-adds the calling thread computes while a sleeping worker wakes up. Timed on a 2-core
# virtual machine (1024×128×128 float32 cut in two, medians): the worker began its part ~70 µs
# after the call (the queue's wake-up, ~50 µs), and a caller that finished first and slept until
# the worker ended was woken ~65 µs after it. So the caller's part is made larger by what it
# computes in the worker's wake-up time (~70 µs at ~60 GMAC/s), the workers' smaller: they then
# end about when the caller does, and the caller seldom has to sleep and be woken again. Of
# 2^21-2^24, 2^22 gained most at 2 threads (2048×128×128: 1.18x -> 1.34x one thread's speed;
# attention's per-head stacks 0.90-1.08x -> 1.04-1.23x; 134M multiply-adds 1.62x -> 1.68x).
WAKE_WORK = 1 << 22


class _Worker:
    """A thread that runs the functions handed to it by :meth:`start`, one after another."""

    def __init__(self):
        self._functions = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="minidl-product", daemon=True).start()

    def _serve(self):
        while True:
            self._functions.get()()

    def start(self, function):
        self._functions.put(function)


class _Parts:
    """One product's parts, each claimed by whichever thread is free first. The caller never
    waits for a worker to wake: on a busy machine a sleeping thread may get a core only
    milliseconds later (measured: 14 ms at worst for a 0.5 ms product), and by then the caller
    has computed the parts itself. Which thread computes a part never changes its bits."""

    def __init__(self, compute, bounds):
        self._compute, self._bounds = compute, bounds
        self._claims = itertools.count()  # next() on it is atomic: each part is claimed once
        self._unfinished = len(bounds) - 1
        self._count_lock = threading.Lock()
        self._all_finished = threading.Event()
        self.error = None  # the first error a part raised

    def claim(self) -> int:
        """The next part's number (one past the last when none is left)."""
        return next(self._claims)

    def compute_until_none_is_left(self, part: int | None = None):
        """Compute ``part`` (claimed already), then claim and compute parts until none is
        left."""
        part = self.claim() if part is None else part
        while part < len(self._bounds) - 1:
            try:
                self._compute(self._bounds[part], self._bounds[part + 1])
            except BaseException as error:  # handed to the caller by wait()
                self.error = self.error or error
            with self._count_lock:
                self._unfinished -= 1
                if self._unfinished == 0:
                    self._all_finished.set()
            part = self.claim()

    def wait(self):
        """Wait for the parts claimed by workers, still being computed; raise what one raised."""
        self._all_finished.wait()
        if self.error is not None:
            raise self.error


class _ProductThreads:
    """The workers, created on first use, and the lock that gives them to one caller at a time
    (a second thread calling a product meanwhile computes it alone)."""

    def __init__(self):
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()

    def thread_budget(self) -> int:
        """The thread count ``md.set_num_threads`` gave (OpenBLAS's own before it is called)."""
        return product_thread_budget()

    def run(self, compute, size: int, parts: int, work: int | None = None) -> None:
        """Call ``compute(start, stop)`` on ``parts`` ranges that cover ``range(size)``, at once,
        one per thread (at most the budget's; all on this thread while another caller has the
        workers); the first range, this thread's, the larger by ``WAKE_WORK`` of ``work``."""
        budget = self.thread_budget()
        parts = min(parts, budget, size)  # never more threads than the budget
        if parts < 2 or not self._lock.acquire(blocking=False):
            compute(0, size)
            return
        try:
            while len(self._workers) < parts - 1:
                self._workers.append(_Worker())
            # Each part's BLAS call on its own thread: parts <= budget.
            with_blas_at_one_thread(lambda: self._run_parts(compute, size, parts, work))
        finally:
            self._lock.release()

    def run_whole(self, compute) -> None:
        """Call ``compute()`` on this thread with OpenBLAS held at one thread (unless the budget
        is one already, or another caller holds it so)."""
        budget = self.thread_budget()
        if budget < 2 or not self._lock.acquire(blocking=False):
            compute()
            return
        try:
            with_blas_at_one_thread(compute)
        finally:
            self._lock.release()

    def _run_parts(self, compute, size: int, parts: int, work: int | None) -> None:
        product = _Parts(compute, _part_bounds(size, parts, work))
        first = product.claim()  # the largest part is this thread's, whichever thread is awake
        for worker in self._workers[:parts - 1]:
            worker.start(product.compute_until_none_is_left)
        product.compute_until_none_is_left(first)
        product.wait()  # every part, even after an error: they write into the caller's result


def _part_bounds(size: int, parts: int, work: int | None) -> list[int]:
    """The bounds of ``parts`` ranges of ``range(size)``: even, or, given the product's
    ``work``, the first (the calling thread's) larger by ``WAKE_WORK`` multiply-adds for each
    worker, and the rest even. Every range keeps at least one entry."""
    if work is None:
        return [size * part // parts for part in range(parts + 1)]
    # The caller's share x of the work: x·work = (1 - x)·work / (parts - 1) + WAKE_WORK.
    first = size * (work + (parts - 1) * WAKE_WORK) // (parts * work)
    first = min(max(first, size // parts), size - (parts - 1))
    rest = size - first
    return [0] + [first + rest * part // (parts - 1) for part in range(parts)]


def blas_thread_count() -> int:
    """OpenBLAS's thread count now."""
    return int(openblas_thread_count_functions()[0]())


def with_blas_at_one_thread(compute) -> None:
    """Call ``compute()`` with OpenBLAS at one thread: it is so already once
    ``md.set_num_threads`` was called; before that it has NumPy's default count, given back
    after (a switch costs about a microsecond)."""
    get_count, set_count = openblas_thread_count_functions()
    count = int(get_count())
    if count == 1:
        compute()
        return
    set_count(ctypes.c_int(1))
    threads.blas_count_held = count  # still the parts' budget meanwhile
    try:
        compute()
    finally:
        threads.blas_count_held = None
        set_count(ctypes.c_int(count))


_threads = _ProductThreads()


def _forget_the_parent_threads():
    # A forked child has only the thread that forked: the parent's workers are not there to
    # answer, and the lock may have been held by a thread that no longer exists.
    global _threads
    _threads = _ProductThreads()


os.register_at_fork(after_in_child=_forget_the_parent_threads)


def part_count(size: int, work: int, call_work: int | None = None) -> int:
    """How many threads share a product of ``work`` multiply-adds cut along an axis of ``size``:
    1 for small work or a budget of one thread, else up to one part per thread. Where the cut
    shrinks a BLAS call, ``work`` is that call's, so that each part's call stays above
    OpenBLAS's small-matrix kernels. ``call_work``: for a stack of products cut between whole
    products, the work of each one."""
    if not worth_splitting(work, call_work):
        return 1
    return max(1, min(_threads.thread_budget(), size, work // PARALLEL_MIN_WORK))


def worth_splitting(work: int, call_work: int | None = None) -> bool:
    """Whether a product of ``work`` multiply-adds (``call_work`` as for :func:`part_count`) is
    split on a budget of two threads or more. It does not depend on the budget, so a product
    may choose by it how to cut itself and keep the same bits at any thread count."""
    return work >= 2 * PARALLEL_MIN_WORK and _as_one_product(work, call_work) >= SPLIT_MIN_WORK


def _as_one_product(work: int, call_work: int | None) -> int:
    """The multiply-adds of one large product that take as long as ``work`` in BLAS calls of
    ``call_work`` each (None: one call, or large ones)."""
    if call_work is not None and call_work < _SMALL_CALL_WORK:
        # A stack of small products (attention's heads: 128 products of 64×32×64) runs at
        # about half the rate of one large product, each call paying its own set-up (measured
        # on one thread, float32: 28-41 against 64-71 GMAC/s).
        return 2 * work
    return work


# -- parts made on Numba's threads ------------------------------------------------------------

native_parts = None
"""The Numba CPU backend's :mod:`~minidl.backend.numba_cpu.product_parts`, set when its kernels
load (this module imports nothing of Numba): a part then is the BLAS call NumPy would make,
made on Numba's threads, which take a part in microseconds where the threads above take tens
of them to wake. None until then, and where NumPy's BLAS offers no such calls."""

NATIVE_SPLIT_MIN_WORK = 1 << 23
"""Multiply-adds from which a product whose cut never changes its bits (by rows, by whole
matrices of a stack) is split over Numba's threads (a stack of small products counted as in
:func:`worth_splitting`). Alone, two parts gained from ~8M multiply-adds (512×128×128: 126 ->
76 µs), but a part's output then lies half in the other core's cache for the kernels after it:
on a 2-core VM at two threads, LeNet's step (its convolutions' stacks of 64 per-image products,
15-31M counted) took 167 steps/s with the line at 2^25, 179 at 2^23 and 175 at 2^22 (medians
of 8 alternating runs, load ~1.1); CIFAR's and attention's within 2%."""


def native_part_count(size: int, work: int, call_work: int | None = None) -> int:
    """:func:`part_count` for a product whose parts Numba's threads would make: 1 without them,
    below :data:`NATIVE_SPLIT_MIN_WORK` (for a stack of small products, as one product of its
    cost, as in :func:`worth_splitting`) or on a budget of one thread."""
    if native_parts is None or work < 2 * PARALLEL_MIN_WORK or \
            _as_one_product(work, call_work) < NATIVE_SPLIT_MIN_WORK:
        return 1
    return max(1, min(_threads.thread_budget(), size, work // PARALLEL_MIN_WORK))


def make_native_parts(calls, parts: int, dtype) -> None:
    """Make the BLAS calls of a :func:`~minidl.backend.numba_cpu.product_parts.gemm_call_table`
    in ``parts`` runs of consecutive calls, the runs at once on Numba's threads, OpenBLAS on one
    thread inside each."""
    part_starts = [len(calls) * part // parts for part in range(parts + 1)]
    follow_in_this_thread()
    # Only ``parts`` threads join the region (threads.on_numba_threads): the others, up to the
    # whole budget, would wake for nothing.
    with_blas_at_one_thread(lambda: on_numba_threads(parts, native_parts.make_calls, calls,
                                                     part_starts, dtype))


def compute_in_parts(compute, size: int, parts: int, work: int | None = None,
                     call_work: int | None = None) -> None:
    """Call ``compute(start, stop)`` on ``parts`` ranges that split ``range(size)``, each on its
    own thread, at once, with OpenBLAS held at one thread meanwhile. ``compute`` writes only
    its own range of the result. Given the product's ``work`` (and ``call_work`` as for
    :func:`part_count`), the calling thread's range is the larger by what it computes while
    the workers wake: only for a product whose bits do not depend on where it is cut."""
    _threads.run(compute, size, parts, None if work is None else _as_one_product(work, call_work))


def compute_on_one_blas_thread(compute) -> None:
    """Call ``compute()`` with OpenBLAS held at one thread: for a product that cannot be cut
    into parts with the one-thread bits (BLAS's syrk) and whose sums OpenBLAS's own threads
    would order by the thread count."""
    _threads.run_whole(compute)


__all__ = ["part_count", "worth_splitting", "compute_in_parts", "compute_on_one_blas_thread",
           "native_part_count", "make_native_parts", "with_blas_at_one_thread",
           "blas_thread_count", "PARALLEL_MIN_WORK", "SPLIT_MIN_WORK",
           "WAKE_WORK", "NATIVE_SPLIT_MIN_WORK"]
