"""Progress output of ``fit``: what a user watching the run sees.

On a terminal (and with tqdm installed) each epoch gets a progress bar with the running loss and
accuracy; when the epoch ends the bar is replaced by one summary line.  When the output is not a
terminal (a log file, a pipe, a notebook's captured stream) there is no bar: just the summary
line of each epoch, flushed at once, so a log of 55 epochs is 55 lines, not kilobytes of
carriage returns, and a ``| tee`` shows each line as it comes.
"""

from __future__ import annotations

import sys
import time


def _format(logs: dict) -> str:
    return " - ".join(f"{name} {value:.4f}" for name, value in logs.items())


_said: set[str] = set()


def _say_once(stream, text: str) -> None:
    """``text`` on ``stream``, once per process: a hint, not a line every epoch or run."""
    if text not in _said:
        _said.add(text)
        print(text, file=stream, flush=True)


class Progress:
    """Writes to ``stream`` (default ``sys.stdout``); ``enabled=False`` writes nothing."""

    def __init__(self, enabled: bool, epochs: int | None, batches_per_epoch: int | None,
                 stream=None):
        self.enabled = bool(enabled)
        self.stream = stream if stream is not None else sys.stdout
        self.epochs, self.batches_per_epoch = epochs, batches_per_epoch
        self.bar = None
        self.epoch_started = time.perf_counter()
        self.tqdm = None
        if self.enabled and getattr(self.stream, "isatty", lambda: False)():
            try:
                from tqdm.auto import tqdm
                self.tqdm = tqdm
            except ImportError:
                _say_once(self.stream, "minidl: no progress bar: it needs tqdm, "
                                       "pip install 'minidl[progress]'; one line per epoch")

    def _epoch_label(self, epoch: int) -> str:
        return f"epoch {epoch + 1}" + (f"/{self.epochs}" if self.epochs else "")

    def begin_epoch(self, epoch: int, batches_done: int) -> None:
        """An epoch starts (or resumes after ``batches_done`` batches)."""
        self.epoch_started = time.perf_counter()
        if self.tqdm is not None:
            self.bar = self.tqdm(total=self.batches_per_epoch, initial=batches_done,
                                 desc=self._epoch_label(epoch), unit="batch", leave=False,
                                 dynamic_ncols=True, file=self.stream)

    def step(self, running_logs: dict) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(_format(running_logs), refresh=False)
            self.bar.update(1)

    def end_epoch(self, epoch: int, steps: int, logs: dict) -> None:
        """The epoch's summary line (after removing its bar)."""
        self.close()
        if self.enabled:
            seconds = time.perf_counter() - self.epoch_started
            line = f"{self._epoch_label(epoch)} - {steps} steps - {seconds:.1f}s - {_format(logs)}"
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
