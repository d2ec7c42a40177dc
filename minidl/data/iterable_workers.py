"""Reading an iterable data set in worker processes, each its own shard, resumable exactly.

As in PyTorch, every worker iterates its own copy of the data set; the data set reads its share
through :func:`~minidl.data.get_worker_info`. Each worker makes whole batches from its share, and
the main process hands them out round-robin: worker 0, 1, ..., skipping the workers whose
pass has ended; the epoch ends when every worker's has.

Each batch comes back with its worker's position *after* it: the data set's ``state_dict()``
(or, for a data set without one, how many samples that worker has handed out this pass). The
loader's progress is the position of every worker at its last batch handed out, which workers
have finished the epoch, and whose turn is next -- so a restore starts fresh workers, each at
its own position, and the round-robin continues where it was. Batches that workers had read
ahead are read again.

To keep the progress normalised (after the last batch of an epoch it already names the next
epoch), the cursor looks at the next worker's next message before it hands out a batch: an
"end of pass" is taken in right away.
"""

from __future__ import annotations

import copy
import multiprocessing
import queue
import warnings
import weakref

from .iterable import WorkerInfo, has_state, set_worker_info
from .worker_pool import _start_method
from ..validation import check_non_negative_int

_POLL_SECONDS = 1.0


def _send(out, message) -> None:
    out.put(message)


def run_worker(dataset, info, batch_size, drop_last, collate, start, out) -> None:
    """A worker's life: iterate pass after pass, sending ``("batch", data, position)`` for each
    batch and ``("end", position)`` at the end of each pass; ``("error", exc)`` on failure.

    ``start`` is the position to continue from: ``{"state": ...}`` (loaded into the data set),
    ``{"samples": n}`` (n samples skipped), or None (the data set as it was copied).
    """
    try:
        set_worker_info(info)
        stateful = has_state(dataset)
        skip = 0
        if start is not None and stateful:
            dataset.load_state_dict(start["state"])
        elif start is not None:
            skip = start["samples"]
        while True:
            iterator = iter(dataset)
            handed = 0
            for _ in range(skip):
                next(iterator, None)
                handed += 1
            skip = 0
            while True:
                samples = []
                for sample in iterator:
                    samples.append(sample)
                    if len(samples) == batch_size:
                        break
                if not samples or (drop_last and len(samples) < batch_size):
                    for _ in iterator:  # a dropped tail: finish the pass
                        pass
                    _send(out, ("end", _position(dataset, stateful, 0)))
                    break
                handed += len(samples)
                _send(out, ("batch", collate(samples), _position(dataset, stateful, handed)))
    except BaseException as error:  # handed to the main process, which re-raises it
        try:
            _send(out, ("error", error))
        except Exception:
            _send(out, ("error", RuntimeError(f"{type(error).__name__}: {error}")))


def _position(dataset, stateful: bool, handed: int) -> dict:
    return {"state": dataset.state_dict()} if stateful else {"samples": handed}


class IterableWorkerCursor:
    """The loader's cursor over an iterable data set read by ``workers`` processes."""

    def __init__(self, dataset, batch_size: int, drop_last: bool, collate, finish,
                 workers: int, prefetch_factor: int, seed: int):
        self.dataset = dataset
        self.batch_size, self.drop_last = batch_size, drop_last
        self.collate, self.finish = collate, finish
        self.workers, self.prefetch_factor, self.seed = workers, prefetch_factor, seed
        self.stateful = has_state(dataset)
        self._processes = None
        self._finalizer = None
        self._set(epoch=0, position=0, turn=0, positions=[None] * workers,
                  ended=[False] * workers)

    def _set(self, epoch, position, turn, positions, ended):
        self.close()
        self.epoch, self.position, self.turn = epoch, position, turn
        self.positions, self.ended = positions, ended
        self._peeked = [None] * self.workers

    # -- the worker processes ------------------------------------------------------------------

    def _start(self):
        context = multiprocessing.get_context(_start_method())
        queues, processes = [], []
        for w in range(self.workers):
            out = context.Queue(maxsize=self.prefetch_factor)
            info = WorkerInfo(w, self.workers, self.seed + w, self.dataset)
            process = context.Process(
                target=run_worker, daemon=True, name=f"minidl-data-worker-{w}",
                args=(self.dataset, info, self.batch_size, self.drop_last, self.collate,
                      self.positions[w], out))
            process.start()
            queues.append(out)
            processes.append(process)
        self._queues, self._processes = queues, processes
        self._finalizer = weakref.finalize(self, _stop, processes)

    def _peek(self, w: int):
        """Worker ``w``'s next message, read (once) without handing it out."""
        if self._processes is None:
            self._start()
        while self._peeked[w] is None:
            try:
                self._peeked[w] = self._queues[w].get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if not self._processes[w].is_alive():
                    raise RuntimeError(f"DataLoader worker {w} exited unexpectedly (exit code "
                                       f"{self._processes[w].exitcode})") from None
        message = self._peeked[w]
        if message[0] == "error":
            raise message[1]
        return message

    def _next_turn(self, start: int) -> int | None:
        """The first worker from ``start`` on (cyclically) with a batch left this epoch; the
        ones found at the end of their pass are marked so. None when all have ended."""
        for step in range(self.workers):
            w = (start + step) % self.workers
            if self.ended[w]:
                continue
            message = self._peek(w)
            if message[0] == "batch":
                return w
            self.ended[w], self.positions[w], self._peeked[w] = True, message[1], None
        return None

    # -- the cursor protocol -------------------------------------------------------------------

    def produce(self):
        w = self._next_turn(self.turn)
        if w is None:
            raise ValueError(f"DataLoader: {type(self.dataset).__name__} yielded no "
                             f"{'full ' if self.drop_last else ''}batch of {self.batch_size} "
                             f"samples in an epoch on any of {self.workers} workers")
        _, data, position = self._peek(w)
        self._peeked[w] = None
        self.positions[w] = position
        self.position += 1
        turn = self._next_turn(w + 1)
        if turn is None:  # every worker's pass is over: the epoch ends with this batch
            self.epoch, self.position, self.turn = self.epoch + 1, 0, 0
            self.ended = [False] * self.workers
            if not self.stateful:
                self.positions = [{"samples": 0}] * self.workers
        else:
            self.turn = turn
        return self.finish(data)

    def progress(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "turn": self.turn,
                "workers": [copy.deepcopy(p) for p in self.positions],
                "ended": list(self.ended)}

    def seek(self, progress: dict) -> None:
        epoch = check_non_negative_int("state field 'epoch'", progress["epoch"])
        position = check_non_negative_int("state field 'position'", progress["position"])
        turn = check_non_negative_int("state field 'turn'", progress["turn"])
        positions, ended = progress["workers"], progress["ended"]
        if not (isinstance(positions, list) and isinstance(ended, list)
                and len(positions) == len(ended) == self.workers and turn < self.workers):
            raise ValueError(f"state fields 'workers'/'ended'/'turn' do not describe "
                             f"{self.workers} workers (a loader resumes at the num_workers it "
                             f"was saved with)")
        field = "state" if self.stateful else "samples"
        for p in positions:
            if p is not None and (not isinstance(p, dict) or field not in p):
                raise ValueError(f"state field 'workers' holds {p!r}, expected a dict with "
                                 f"{field!r}")
        skipped = sum(p["samples"] for p, done in zip(positions, ended)
                      if p is not None and not done and not self.stateful)
        if skipped:
            warnings.warn(
                f"{type(self.dataset).__name__} has no state_dict()/load_state_dict(): "
                f"resuming by reading and discarding the {skipped} samples the workers already "
                f"handed out in this epoch, which is exact only if its iteration is "
                f"deterministic", stacklevel=3)
        self._set(epoch, position, turn, [copy.deepcopy(p) for p in positions],
                  [bool(e) for e in ended])

    def close(self) -> None:
        """Stop the workers; the next batch starts fresh ones at the saved positions."""
        if self._finalizer is not None:
            self._finalizer()
        self._processes = self._finalizer = None


def _stop(processes) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
