"""Writing checkpoints on a background thread, one at a time.

Training only has to wait for the *snapshot* (copying the state out of the live objects,
done by the caller before submitting); checksumming, encrypting, writing and fsyncing
happen here while the next steps run.  Rules that keep this trustworthy:

* at most one write in flight: submitting waits for the previous one, so memory holds at
  most two snapshots and files are committed in the order they were saved;
* an exception in the background is kept and raised in the training thread at the next
  call (``submit`` or ``wait``), never lost;
* an interpreter that exits normally first lets the write finish (see the exit hook at
  the end of this module); a hard kill abandons it, and the atomic write leaves only a
  hidden temporary file, never a partial file under the final name.
"""

from __future__ import annotations

import atexit
import threading
import warnings
import weakref
from typing import Callable

_live_writers: "weakref.WeakSet[BackgroundWriter]" = weakref.WeakSet()


class BackgroundWriter:
    """Runs submitted write jobs on a background thread, one job at a time."""

    def __init__(self, name: str = "minidl-checkpoint-writer"):
        self._name = name
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        _live_writers.add(self)

    @property
    def busy(self) -> bool:
        """Whether a write is in flight right now."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, job: Callable[[], None]) -> None:
        """Wait for the previous job (raising its error, if any), then start ``job``."""
        self.wait()
        thread = threading.Thread(target=self._run, args=(job,), name=self._name, daemon=False)
        self._thread = thread
        thread.start()

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # handed to the training thread by wait()
            self._error = exc

    def wait(self) -> None:
        """Block until the job in flight is done; raise the error of a failed job once."""
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None
        self.raise_pending()

    def raise_pending(self) -> None:
        """Raise (once) the error of a finished background job, if there was one."""
        if self._error is not None and not self.busy:
            error, self._error = self._error, None
            raise error


def _finish_writes_at_exit() -> None:
    # Errors can no longer reach the training loop, so they become warnings.
    for writer in list(_live_writers):
        try:
            writer.wait()
        except BaseException as exc:
            warnings.warn(f"a background checkpoint save failed at exit: {exc}", RuntimeWarning)


# When the main thread ends, the interpreter (1) runs threading's exit hooks, where
# concurrent.futures shuts its thread pools down (the io layer hashes large tensors on
# one, and imports it lazily), then (2) joins non-daemon threads, then (3) runs atexit
# handlers.  A write still in flight at (2) would find the pool gone and fail, so the
# wait is hooked into (1), ahead of the pools: hooks run in reverse order of
# registration, and importing concurrent.futures.thread here registers its hook first.
import concurrent.futures.thread  # noqa: E402,F401  (for its exit hook's position)

_register_threading_exit = getattr(threading, "_register_atexit", None)
if _register_threading_exit is not None:
    _register_threading_exit(_finish_writes_at_exit)
else:  # an interpreter without the hook: still finish what can be finished
    atexit.register(_finish_writes_at_exit)
