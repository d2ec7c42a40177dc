"""The training loop: ``Trainer`` and its one-call form ``fit``.

The loop counts global steps. Each step draws the next batch from the reader, runs forward,
backward and the optimizer, steps the scheduler, and lets the checkpoint manager decide whether to
save. Everything that influences the future — model, optimizer, scheduler, reader position, the
global RNG, the metric history and stateful callbacks — is tracked by one ``Checkpoint``, so a run
restarted from its latest checkpoint continues exactly as if it had never stopped.

An epoch ends when the reader's epoch counter moves on; then validation runs and the epoch's
metrics are recorded.
"""

from __future__ import annotations

import math

import numpy as np

from .. import distributed as dist
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor, as_tensor
from .callbacks import Callback
from .history import History, plot_history
from .progress import Progress


def _count_correct(outputs: Tensor, targets: np.ndarray) -> int | None:
    """Correct predictions for classification outputs (N, C) and integer targets; else None."""
    if outputs.ndim != 2 or targets.dtype.kind not in "iu" or targets.shape != outputs.shape[:1]:
        return None
    return int((outputs.numpy().argmax(axis=1) == targets).sum())


class _CallbackStates:
    """Adapts a list of callbacks to the state_dict protocol, so a Checkpoint can track them."""

    def __init__(self, callbacks):
        self.callbacks = callbacks

    def state_dict(self):
        return {"states": [c.state_dict() for c in self.callbacks]}

    def load_state_dict(self, state):
        states = state.get("states") if isinstance(state, dict) else None
        if not isinstance(states, list) or len(states) != len(self.callbacks):
            raise ValueError(f"callback state holds {len(states) if isinstance(states, list) else '?'}"
                             f" entries, but fit was given {len(self.callbacks)} callbacks")
        for callback, callback_state in zip(self.callbacks, states):
            callback.load_state_dict(callback_state)


def _job_wide(loss: float, size: int, correct: int | None) -> tuple[float, int, int | None]:
    """One step's loss and counts over every rank of a data-parallel job (the same on all of
    them), so that logs, checkpointed totals and callbacks' decisions agree across ranks."""
    if dist.get_world_size() == 1:
        return loss, size, correct
    steps = dist.all_gather_object([loss, size, correct])
    total = sum(s for _, s, _ in steps)
    mean_loss = sum(l * s for l, s, _ in steps) / max(total, 1)
    counts = [c for _, _, c in steps]
    return mean_loss, total, None if None in counts else sum(counts)


class _EpochTotals:
    """Running sums of the current epoch's training loss and accuracy.

    They are checkpointed too: a run resumed mid-epoch must report the same epoch loss as one
    that never stopped, so the part of the epoch before the checkpoint has to be remembered.
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.loss_sum, self.correct, self.samples, self.has_accuracy = 0.0, 0, 0, True

    def add(self, loss: float, size: int, correct: int | None) -> None:
        self.loss_sum += loss * size
        self.samples += size
        if correct is None:
            self.has_accuracy = False
        else:
            self.correct += correct

    def logs(self) -> dict:
        logs = {"loss": self.loss_sum / max(self.samples, 1)}
        if self.has_accuracy and self.samples:
            logs["accuracy"] = self.correct / self.samples
        return logs

    def state_dict(self) -> dict:
        return {"loss_sum": self.loss_sum, "correct": self.correct, "samples": self.samples,
                "has_accuracy": self.has_accuracy}

    def load_state_dict(self, state: dict) -> None:
        try:
            values = (float(state["loss_sum"]), int(state["correct"]), int(state["samples"]),
                      bool(state["has_accuracy"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"epoch totals: malformed state ({error!r})") from None
        self.loss_sum, self.correct, self.samples, self.has_accuracy = values


class Trainer:
    """Trains ``model`` on batches from ``reader``; see :func:`fit` for the arguments."""

    def __init__(self, model, loss_fn, optimizer, reader, *, epochs=None, steps=None,
                 scheduler=None, val_data=None, val_batch_size: int = 256, callbacks=(),
                 checkpoint_dir=None, checkpoint_prefix: str = "ckpt",
                 save_every_steps: int | None = None, save_every_seconds: float | None = None,
                 max_to_keep: int | None = 3, async_save: bool = False, restore: bool = True,
                 progress: bool = True, plot_path=None):
        if (epochs is None) == (steps is None):
            raise ValueError("fit: give exactly one of epochs= and steps=")
        if epochs is not None:
            try:
                per_epoch = len(reader)
            except TypeError:
                raise ValueError("fit: epochs= needs a reader with a length (batches per epoch); "
                                 "streaming readers take steps=") from None
            if epochs < 0:
                raise ValueError(f"fit: epochs must be >= 0, got {epochs}")
            self.total_steps = int(epochs) * per_epoch
        else:
            if steps < 0:
                raise ValueError(f"fit: steps must be >= 0, got {steps}")
            self.total_steps = int(steps)
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"fit: callbacks must be Callback instances, got "
                                f"{type(callback).__name__}")
        self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
        self.reader, self.scheduler, self.val_data = reader, scheduler, val_data
        self.val_batch_size = int(val_batch_size)
        self.callbacks = list(callbacks)
        self.history = History()
        self.totals = _EpochTotals()
        self.step = 0
        self.stop_training = False
        self.progress_enabled, self.plot_path = progress, plot_path
        self.restore = restore
        self.manager = None
        if checkpoint_dir is not None:
            from ..checkpoint import Checkpoint, CheckpointManager
            tracked = {"model": model, "optimizer": optimizer, "reader": reader,
                       "history": self.history, "epoch_totals": self.totals,
                       "callbacks": _CallbackStates(self.callbacks)}
            if scheduler is not None:
                tracked["scheduler"] = scheduler
            self.manager = CheckpointManager(
                Checkpoint(**tracked), checkpoint_dir, prefix=checkpoint_prefix,
                max_to_keep=max_to_keep, save_every_steps=save_every_steps,
                save_every_seconds=save_every_seconds, async_save=async_save)

    # -- one step and one evaluation ---------------------------------------------------------------

    def train_step(self, batch) -> tuple[float, int, int | None]:
        inputs, targets = batch[:-1], batch[-1]
        outputs = self.model(*(as_tensor(x) for x in inputs))
        loss = self.loss_fn(outputs, as_tensor(targets))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        with no_grad():
            correct = _count_correct(outputs, np.asarray(targets))
        return float(loss.item()), len(targets), correct

    def evaluate(self, data) -> dict:
        """Mean loss (and accuracy, for classification) over ``data`` = (inputs, targets) arrays,
        in evaluation mode and without recording a graph."""
        inputs, targets = data
        was_training = self.model.training
        self.model.eval()
        total_loss, total_correct, count = 0.0, 0, 0
        try:
            with no_grad():
                for start in range(0, len(targets), self.val_batch_size):
                    xb = inputs[start:start + self.val_batch_size]
                    yb = targets[start:start + self.val_batch_size]
                    outputs = self.model(as_tensor(xb))
                    total_loss += float(self.loss_fn(outputs, as_tensor(yb)).item()) * len(yb)
                    correct = _count_correct(outputs, np.asarray(yb))
                    total_correct = None if correct is None or total_correct is None \
                        else total_correct + correct
                    count += len(yb)
        finally:
            self.model.train(was_training)
        logs = {"val_loss": total_loss / max(count, 1)}
        if total_correct is not None and count:
            logs["val_accuracy"] = total_correct / count
        return logs

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> History:
        restored = None
        if self.manager is not None and self.restore:
            restored = self.manager.restore_latest()
            self.step = restored or 0
        last_saved_step = restored
        for callback in self.callbacks:
            callback.on_train_begin(self)
        # In a data-parallel job only rank 0 reports.
        progress = Progress(self.total_steps, self.step,
                            self.progress_enabled and dist.get_rank() == 0)
        try:
            while self.step < self.total_steps and not self.stop_training:
                epoch_before = self.reader.epoch
                loss, size, correct = _job_wide(*self.train_step(self.reader.next_batch()))
                self.step += 1
                self.totals.add(loss, size, correct)
                progress.step(loss, size)
                for callback in self.callbacks:
                    callback.on_step_end(self, self.step, {"loss": loss})
                if self.reader.epoch != epoch_before or self.step == self.total_steps:
                    self._end_epoch(epoch_before, progress)
                if self.manager is not None and self.manager.maybe_save(
                        self.step, metrics=self._last_metrics()) is not None:
                    last_saved_step = self.step
            if self.manager is not None:
                # Always leave a checkpoint of the final state, so re-running a finished run
                # restores it and does nothing more.
                if last_saved_step != self.step:
                    self.manager.save(self.step, metrics=self._last_metrics())
                self.manager.wait()
        finally:
            progress.close()
        for callback in self.callbacks:
            callback.on_train_end(self)
        if self.plot_path is not None and len(self.history):
            plot_history(self.history, self.plot_path)
        return self.history

    def _last_metrics(self) -> dict:
        return {name: values[-1] for name, values in self.history.metrics.items()
                if values and not math.isnan(values[-1])}

    def _end_epoch(self, epoch: int, progress: Progress) -> None:
        logs = self.totals.logs()
        self.totals.reset()
        if self.val_data is not None:
            logs.update(self.evaluate(self.val_data))
        self.history.record(epoch, self.step, logs)
        progress.epoch(epoch, logs)
        for callback in self.callbacks:
            callback.on_epoch_end(self, epoch, logs)


def fit(model, loss_fn, optimizer, reader, **options) -> History:
    """Train ``model`` and return its :class:`History` (per-epoch loss, accuracy, val metrics).

    ``epochs=`` or ``steps=`` sets the length; ``scheduler=`` is stepped after every optimizer
    step; ``val_data=(inputs, targets)`` is evaluated at the end of each epoch; ``callbacks=``
    (EarlyStopping, ModelCheckpoint, your own); ``checkpoint_dir=`` with ``save_every_steps=`` /
    ``save_every_seconds=`` checkpoints the whole training state, and with ``restore=True`` (the
    default) a re-run continues from the latest checkpoint; ``progress=`` shows a tqdm bar;
    ``plot_path=`` writes a PNG of the metrics (needs matplotlib).
    """
    return Trainer(model, loss_fn, optimizer, reader, **options).run()
