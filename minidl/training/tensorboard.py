"""``TensorBoard``: the training curves as TensorBoard event files (Keras's callback).

Events are made and written with tensorboardX (``pip install minidl[tensorboard]``), a
maintained implementation of TensorBoard's format, imported only when training starts: its
summary builders and its record writer, used directly rather than through its
``SummaryWriter``, whose background thread may still hold events when ``flush()`` returns. Here
a flush is on disk when it returns -- at the end of each epoch and whenever the run saves a
checkpoint, so a crashed run's file holds at least every step up to its last checkpoint, which
is where the resumed run goes on. Per epoch: every metric of
the epoch's logs (``loss``, ``accuracy``, ``val_loss``, ...) as ``epoch/<name>`` and the
learning rate as ``epoch/learning_rate``; with ``update_freq=N`` also each N-th step's loss
and learning rate as ``step/loss`` and ``step/learning_rate``; every ``histogram_freq`` epochs
a histogram of each parameter, named as in ``state_dict``. The x axis is the global step.

A resumed run starts a new event file with a purge marker at the first step it trains:
TensorBoard then drops what the interrupted run had written from that step on, so the curves
show each step once. In a data-parallel job only rank 0 writes.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import time

import numpy as np

from .. import distributed as dist
from .callbacks import Callback


def _learning_rate(trainer) -> float | None:
    groups = getattr(trainer.optimizer, "param_groups", None)
    return float(groups[0]["lr"]) if groups else None


class TensorBoard(Callback):
    """Write scalars (and, on request, weight histograms) for TensorBoard to ``log_dir``.

    ``update_freq``: ``"epoch"`` (default) writes per epoch only; ``"batch"`` or an int N also
    every (N-th) step. ``histogram_freq``: every how many epochs the parameters' histograms are
    written (0: never).
    """

    def __init__(self, log_dir="logs", histogram_freq: int = 0, update_freq="epoch"):
        if importlib.util.find_spec("tensorboardX") is None:
            raise ImportError("TensorBoard needs the tensorboardX package: "
                              "pip install minidl[tensorboard]")
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and (isinstance(update_freq, bool)
                                       or not isinstance(update_freq, int) or update_freq < 1):
            raise ValueError(f"TensorBoard: update_freq must be 'epoch', 'batch' or an int "
                             f">= 1, got {update_freq!r}")
        if isinstance(histogram_freq, bool) or not isinstance(histogram_freq, int) \
                or histogram_freq < 0:
            raise ValueError(f"TensorBoard: histogram_freq must be an int >= 0, got "
                             f"{histogram_freq!r}")
        self.log_dir = os.fspath(log_dir)
        self.histogram_freq, self.update_freq = histogram_freq, update_freq
        self.writer = None

    def _write(self, step: int, summary=None, **fields) -> None:
        from tensorboardX.proto.event_pb2 import Event

        self.writer.write_event(Event(wall_time=time.time(), step=step, summary=summary,
                                      **fields))

    def _scalar(self, name: str, value: float, step: int) -> None:
        from tensorboardX.summary import scalar

        self._write(step, scalar(name, float(value)))

    def on_train_begin(self, trainer):
        if dist.get_rank() != 0:
            return
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import SessionLog

        os.makedirs(self.log_dir, exist_ok=True)
        # A suffix of its own: two runs starting in the same second must not share a file.
        self.writer = EventsWriter(os.path.join(self.log_dir, "events"),
                                   f".{os.getpid()}.{secrets.token_hex(4)}")
        if trainer.resumed_from is not None:
            self._write(trainer.step + 1, session_log=SessionLog(status=SessionLog.START))

    def on_step_end(self, trainer, step, logs):
        if self.writer is None or self.update_freq == "epoch" or step % self.update_freq:
            return
        self._scalar("step/loss", logs["loss"], step)
        rate = _learning_rate(trainer)
        if rate is not None:
            self._scalar("step/learning_rate", rate, step)

    def on_epoch_end(self, trainer, epoch, logs):
        if self.writer is None:
            return
        for name, value in logs.items():
            self._scalar(f"epoch/{name}", value, trainer.step)
        rate = _learning_rate(trainer)
        if rate is not None:
            self._scalar("epoch/learning_rate", rate, trainer.step)
        if self.histogram_freq and (epoch + 1) % self.histogram_freq == 0:
            from tensorboardX.summary import histogram

            for name, value in trainer.model.state_dict().items():
                self._write(trainer.step, histogram(name, np.asarray(value), "auto"))
        self.writer.flush()

    def after_step(self, trainer, step):
        if self.writer is not None and trainer.saved_step == step:
            self.writer.flush()  # on disk before the checkpoint is the run's latest

    def on_train_end(self, trainer):
        if self.writer is not None:
            self.writer.close()
            self.writer = None
