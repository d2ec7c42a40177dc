"""The training loop: ``Trainer`` and its one-call form ``fit``.

The loop counts global steps. Each step draws the next batch from the reader, runs forward,
backward and the optimizer, steps the scheduler, and lets the checkpoint manager decide whether to
save. Everything that influences the future — model, optimizer, scheduler, reader position, the
global RNG, the metric history, the running sums of the current epoch and stateful callbacks — is
tracked by one ``Checkpoint``, so a run restarted from its latest checkpoint continues exactly as
if it had never stopped.

An epoch ends when the reader's epoch counter moves on; then validation runs and the epoch's
metrics are recorded. Where training stands is ``(epoch, batch)``: the epoch of the last batch
trained and that batch's number within it, both from 1 (MindSpore's rule). Checkpoint names carry
it, so the end of epoch 1 and the middle of epoch 2 can never be confused.
"""

from __future__ import annotations

import copy
import math
import os
import sys
import warnings

import numpy as np

from .. import distributed as dist
from . import by_name, resume, run_signature
from .callbacks import Callback, CallbackStates
from .checkpoint_model import describe_model
from .config import CheckpointConfig
from .data_source import (
    as_arrays, model_device, on_device, split_off_validation, training_reader)
from .gradient_steps import GradientSteps
from .evaluation import evaluate as evaluate_model
from .evaluation import predict as predict_model
from .history import History, check_plot_path, plot_history
from .metrics import Metric, count_correct, get_metric
from .progress import Progress


def _job_wide_step(loss: float, scores: np.ndarray, targets: np.ndarray):
    """One step's loss, outputs and targets over every rank of a data-parallel job (the same
    on all of them), so that logs, metrics, checkpointed totals and callbacks' decisions agree
    across ranks: the loss is the sample-weighted mean, outputs and targets are concatenated."""
    parts = dist.all_gather_object([loss, [scores.tobytes(), list(scores.shape), scores.dtype.str],
                                    [targets.tobytes(), list(targets.shape), targets.dtype.str]])

    def joined(index):
        return np.concatenate([np.frombuffer(data, np.dtype(dtype)).reshape(shape)
                               for data, shape, dtype in (p[index] for p in parts)])

    sizes = [p[2][1][0] if p[2][1] else 1 for p in parts]
    # A rank whose share of a short last batch is empty has a NaN mean: it weighs nothing.
    mean = sum(p[0] * n for p, n in zip(parts, sizes) if n) / max(sum(sizes), 1)
    return mean, joined(1), joined(2)


class _EpochTotals:
    """Running sums of the current epoch: batches, training loss, accuracy and the ``metrics=``
    of ``fit``, and whether a callback asked to stop.

    They are checkpointed too: a run resumed mid-epoch must report the same epoch loss as one
    that never stopped, so the part of the epoch before the checkpoint has to be remembered;
    and a run that was stopped early must stay stopped when its script is run again.
    """

    def __init__(self, metrics=()):
        self.metrics = list(metrics)
        self.reset()
        self.stopped = False

    def reset(self) -> None:
        self.loss_sum, self.correct, self.samples, self.has_accuracy = 0.0, 0, 0, True
        self.batches = 0
        for metric in self.metrics:
            metric.reset()

    def add(self, loss: float, size: int, correct: int | None) -> None:
        self.batches += 1
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
        for metric in self.metrics:
            logs[metric.name] = metric.result()
        return logs

    def state_dict(self) -> dict:
        return {"loss_sum": self.loss_sum, "correct": self.correct, "samples": self.samples,
                "has_accuracy": self.has_accuracy, "batches": self.batches,
                "stopped": self.stopped, "metrics": [m.state_dict() for m in self.metrics]}

    def load_state_dict(self, state: dict) -> None:
        try:
            values = (float(state["loss_sum"]), int(state["correct"]), int(state["samples"]),
                      bool(state["has_accuracy"]), int(state["batches"]), bool(state["stopped"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"epoch totals: malformed state ({error!r})") from None
        metrics = state.get("metrics")
        if not isinstance(metrics, list) or len(metrics) != len(self.metrics):
            raise ValueError(f"epoch totals: the checkpoint has {len(metrics or [])} training "
                             f"metrics, fit was given {len(self.metrics)}")
        for metric, metric_state in zip(self.metrics, metrics):
            metric.load_state_dict(metric_state)
        (self.loss_sum, self.correct, self.samples, self.has_accuracy, self.batches,
         self.stopped) = values


def _legacy_checkpoint_config(checkpoint, checkpoint_dir, options: dict):
    """``checkpoint=`` from the older keyword arguments (``checkpoint_dir=`` and friends)."""
    given = {k: v for k, v in options.items() if v is not None}
    if isinstance(checkpoint, (str, os.PathLike)):
        checkpoint = CheckpointConfig(checkpoint)
    if checkpoint is not None and (checkpoint_dir is not None or given):
        raise TypeError(f"fit: give the checkpoint policy either as checkpoint=CheckpointConfig"
                        f"(...) or as checkpoint_dir= and its keywords, not both "
                        f"({', '.join(sorted(given)) or 'checkpoint_dir'} given too)")
    if checkpoint is not None:
        if not isinstance(checkpoint, CheckpointConfig):
            raise TypeError(f"fit: checkpoint must be a CheckpointConfig or a directory, got "
                            f"{type(checkpoint).__name__}")
        return checkpoint
    if checkpoint_dir is None:
        if given:
            raise TypeError(f"fit: {', '.join(sorted(given))} need checkpoint_dir= (or "
                            f"checkpoint=CheckpointConfig(...))")
        return None
    renamed = {"checkpoint_prefix": "prefix"}
    return CheckpointConfig(checkpoint_dir, **{renamed.get(k, k): v for k, v in given.items()})


class Trainer:
    """Trains ``model`` on ``data``; see :func:`fit` for the arguments.

    ``trainer.run()`` trains and returns the :class:`History` (also ``trainer.history``, kept
    even when training fails). ``trainer.evaluate(data)`` and ``trainer.predict(data)`` use
    the trainer's model, loss and metrics.
    """

    def __init__(self, model, loss_fn, optimizer, data, *, batch_size: int | None = None,
                 epochs: int | None = None, steps: int | None = None, validation_data=None,
                 validation_split: float | None = None, shuffle: bool = True, seed: int = 0,
                 callbacks=(), scheduler=None, metrics=None,
                 checkpoint: CheckpointConfig | str | os.PathLike | None = None,
                 progress: bool = True, plot_path=None, validation_batch_size: int = 256,
                 val_data=None, val_batch_size: int | None = None, checkpoint_dir=None,
                 checkpoint_prefix: str | None = None, save_every_steps: int | None = None,
                 save_every_seconds: float | None = None, max_to_keep: int | None = None,
                 async_save: bool | None = None, restore: str | bool | None = None,
                 accumulate_grad_batches: int = 1, clip_grad_norm: float | None = None,
                 clip_grad_value: float | None = None):
        if (epochs is None) == (steps is None):
            raise ValueError("fit: give exactly one of epochs= and steps=")
        loss_fn, optimizer = by_name.loss_from(loss_fn), by_name.optimizer_from(optimizer, model)
        if val_data is not None:
            if validation_data is not None:
                raise TypeError("fit: val_data is the older name of validation_data; give one")
            validation_data = val_data
        if validation_split is not None:
            arrays = as_arrays(data, "fit: data")
            if arrays is None:
                raise ValueError("fit: validation_split needs (inputs, targets) arrays; give "
                                 "validation_data= for a data set or a reader")
            if validation_data is not None:
                raise ValueError("fit: give validation_data or validation_split, not both")
            data, validation_data = split_off_validation(arrays, validation_split)
        self.reader = training_reader(data, batch_size, shuffle, seed)
        self.batches_per_epoch = None
        try:
            self.batches_per_epoch = len(self.reader)
        except TypeError:
            if epochs is not None:
                raise ValueError("fit: epochs= needs a reader with a length (batches per epoch); "
                                 "streaming readers take steps=") from None
        if epochs is not None:
            if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
                raise ValueError(f"fit: epochs must be an integer >= 0, got {epochs!r}")
            self.total_steps = epochs * self.batches_per_epoch
        else:
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
                raise ValueError(f"fit: steps must be >= 0, got {steps!r}")
            self.total_steps = steps
        self.epochs = epochs
        callbacks = list(callbacks or ())
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"fit: callbacks must be Callback instances, got "
                                f"{type(callback).__name__}")
        if plot_path is not None:
            check_plot_path(plot_path)  # before training: a bad path must not cost the run
        self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
        self.scheduler, self.validation_data, self.metrics = scheduler, validation_data, metrics
        self.gradient_steps = GradientSteps(optimizer, scheduler, accumulate_grad_batches,
                                            clip_grad_norm, clip_grad_value)
        self.validation_batch_size = int(val_batch_size or validation_batch_size)
        self.callbacks = callbacks
        self.history = History()
        # Training metrics are copies: validation resets and fills its own.
        self.totals = _EpochTotals(copy.deepcopy(get_metric(m)) for m in (
            [metrics] if isinstance(metrics, (str, Metric)) else metrics or []))
        self.step = 0
        self.position = (0, 0)
        self.progress_enabled, self.plot_path = progress, plot_path
        self.resumed_from: str | None = None
        self.checkpoint_config = _legacy_checkpoint_config(checkpoint, checkpoint_dir, {
            "checkpoint_prefix": checkpoint_prefix, "save_every_steps": save_every_steps,
            "save_every_seconds": save_every_seconds, "max_to_keep": max_to_keep,
            "async_save": async_save, "restore": restore})
        self.manager = None
        self.signature = None
        self.saved_step: int | None = None  # the step of this run's newest checkpoint
        self.model_spec: dict | None = None  # the model's topology, described on first save

    # -- what a checkpoint holds ------------------------------------------------------------------

    @property
    def stop_training(self) -> bool:
        """Set to True (by a callback) to end training after the current step."""
        return self.totals.stopped

    @stop_training.setter
    def stop_training(self, value: bool) -> None:
        self.totals.stopped = bool(value)

    def training_state(self):
        """A :class:`~minidl.checkpoint.Checkpoint` of everything this run's future depends on."""
        from ..checkpoint import Checkpoint
        tracked = {"model": self.model, "optimizer": self.optimizer, "reader": self.reader,
                   "history": self.history, "epoch_totals": self.totals,
                   "callbacks": CallbackStates(self.callbacks)}
        if self.scheduler is not None:
            tracked["scheduler"] = self.scheduler
        if self.gradient_steps.checkpointed:  # an open accumulation window's gradients
            tracked["gradient_steps"] = self.gradient_steps
        return Checkpoint(**tracked)

    def signature_given(self) -> dict:
        """How this run is set up, as given to ``fit`` (see :mod:`.run_signature`)."""
        given = run_signature.signature(self.model, self.optimizer, self.scheduler, self.reader,
                                        [m.name for m in self.totals.metrics])
        if self.gradient_steps.checkpointed:  # a checkpoint's open window is k batches wide
            given["structure"]["fit/accumulate_grad_batches"] = self.gradient_steps.accumulate
        return given

    def checkpoint_metadata(self) -> dict:
        """The metadata every checkpoint of this run carries: the user's, how the run began,
        and the model's topology."""
        metadata = dict(self.checkpoint_config.metadata or {}) if self.checkpoint_config else {}
        metadata["fit"] = self.signature or self.signature_given()
        if self.model_spec is None:
            self.model_spec = describe_model(self.model) or {}
        if self.model_spec:  # lets the model be rebuilt from the checkpoint alone
            metadata["model_spec"] = self.model_spec
        return metadata

    def save_training_state(self, path) -> str:
        """Write the whole training state to ``path`` (resumable with ``restore_from=``)."""
        key = self.checkpoint_config.key if self.checkpoint_config else None
        return self.training_state().save(path, self.step, self.checkpoint_metadata(), key=key)

    # -- messages ---------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """A line for the user that must not be missed (also with ``progress=False``); from
        rank 0 only in a data-parallel job."""
        if dist.get_rank() == 0:
            print(f"minidl: {text}", file=sys.stderr, flush=True)

    # -- one step, evaluation, prediction ---------------------------------------------------------

    def train_step(self, batch, last_of_epoch: bool = True) -> tuple[float, int, int | None]:
        """Forward and backward on ``batch``, and an optimizer step when its accumulation
        window is full or ``last_of_epoch`` (see :mod:`.gradient_steps`)."""
        inputs, targets = batch[:-1], batch[-1]
        device = model_device(self.model)
        outputs = self.model(*(on_device(x, device) for x in inputs))
        loss = self.loss_fn(outputs, on_device(targets, device))
        self.gradient_steps.apply(loss, last_of_epoch)
        scores, targets = outputs.numpy(), np.asarray(targets)
        loss_value = float(loss.item())
        if dist.get_world_size() > 1:
            loss_value, scores, targets = _job_wide_step(loss_value, scores, targets)
        for metric in self.totals.metrics:
            metric.update(scores, targets)
        return loss_value, len(targets), count_correct(scores, targets)

    def evaluate(self, data, metrics=None) -> dict:
        """Loss and metrics of the model over ``data`` (see :func:`minidl.training.evaluate`);
        ``metrics`` defaults to the trainer's."""
        return evaluate_model(self.model, data, self.metrics if metrics is None else metrics,
                              loss_fn=self.loss_fn, batch_size=self.validation_batch_size)

    def predict(self, data):
        """The model's outputs for ``data`` (see :func:`minidl.training.predict`)."""
        return predict_model(self.model, data, batch_size=self.validation_batch_size)

    # -- resuming ---------------------------------------------------------------------------------

    def _open_checkpoints(self) -> None:
        """Build the manager, and restore what ``restore``/``restore_from`` ask for."""
        resume.open_checkpoints(self)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> History:
        """Train; returns the History. Everything up to training is checked first."""
        self._check_same_run_on_every_rank()
        if self.checkpoint_config is not None:
            self._open_checkpoints()
        for callback in self.callbacks:
            callback.on_train_begin(self)
        # In a data-parallel job only rank 0 reports (the logs are the job's on every rank).
        progress = Progress(self.progress_enabled and dist.get_rank() == 0, self.epochs,
                            self.batches_per_epoch)
        epoch_open = False
        try:
            while self.step < self.total_steps and not self.stop_training:
                epoch_before = getattr(self.reader, "epoch", 0)
                if not epoch_open:
                    if self.totals.batches == 0:  # not when resuming in the middle of it
                        for callback in self.callbacks:
                            callback.on_epoch_begin(self, epoch_before)
                    progress.begin_epoch(epoch_before, self.totals.batches)
                    epoch_open = True
                for callback in self.callbacks:
                    callback.on_step_begin(self, self.step + 1)
                batch = self.reader.next_batch()
                last_of_epoch = getattr(self.reader, "epoch", 0) != epoch_before \
                    or self.step + 1 == self.total_steps
                loss, size, correct = self.train_step(batch, last_of_epoch)
                self.step += 1
                self.totals.add(loss, size, correct)
                self.position = (epoch_before + 1, self.totals.batches)
                progress.step(self.totals.logs())
                for callback in self.callbacks:
                    callback.on_step_end(self, self.step, {"loss": loss})
                if getattr(self.reader, "epoch", 0) != epoch_before \
                        or self.step == self.total_steps:
                    self._end_epoch(epoch_before, progress)
                    epoch_open = False
                if self.manager is not None and self.manager.maybe_save(
                        self.step, self._last_metrics(), self.checkpoint_metadata(),
                        epoch=self.position[0], batch=self.position[1]) is not None:
                    self.saved_step = self.step
                for callback in self.callbacks:
                    callback.after_step(self, self.step)
            if self.manager is not None:
                # Always leave a checkpoint of the final state, so re-running a finished run
                # restores it and does nothing more.
                if self.saved_step != self.step:
                    self.manager.save(self.step, self._last_metrics(), self.checkpoint_metadata(),
                                      epoch=self.position[0] or None,
                                      batch=self.position[1] or None)
                self.manager.wait()
        finally:
            progress.close()
        for callback in self.callbacks:
            callback.on_train_end(self)
        if self.plot_path is not None and len(self.history) and dist.get_rank() == 0:
            try:
                plot_history(self.history, self.plot_path)
            except Exception as error:  # the run is done: a failed plot must not lose it
                warnings.warn(f"fit: could not write the plot {self.plot_path}: {error}",
                              RuntimeWarning, stacklevel=4)
        return self.history

    def _check_same_run_on_every_rank(self) -> None:
        """In a data-parallel job, raise ``DistributedError`` on every rank unless all ranks
        were given the same model, optimizer, scheduler, data and length of training."""
        if dist.get_world_size() == 1:
            return
        from ..distributed.agreement import check_same_on_all_ranks
        given = self.signature_given()
        settings = dict(given["structure"], **given["hyperparameters"])
        settings.update({"fit/steps": self.total_steps, "fit/batches_per_epoch":
                         self.batches_per_epoch, "data/seed": getattr(self.reader, "seed", None),
                         "data/shuffle": getattr(self.reader, "shuffle", None)})
        check_same_on_all_ranks("fit", settings)

    def _last_metrics(self) -> dict:
        return {name: values[-1] for name, values in self.history.metrics.items()
                if values and not math.isnan(values[-1])}

    def _end_epoch(self, epoch: int, progress: Progress) -> None:
        logs = self.totals.logs()
        steps = self.totals.batches
        self.totals.reset()
        if self.validation_data is not None:
            results = self.evaluate(self.validation_data)
            logs.update({f"val_{name}": value for name, value in results.items()})
        for callback in self.callbacks:
            callback.on_epoch_end(self, epoch, logs)
        # Recorded after the callbacks, as Keras's History: what they add to the logs is kept
        # (and shown, and ranked by keep_best).
        self.history.record(epoch, self.step, logs)
        progress.end_epoch(epoch, steps, logs)


def fit(model, loss_fn, optimizer, data, *, batch_size: int | None = None,
        epochs: int | None = None, steps: int | None = None, validation_data=None,
        validation_split: float | None = None, shuffle: bool = True, seed: int = 0,
        callbacks=(), scheduler=None, metrics=None,
        checkpoint: CheckpointConfig | str | os.PathLike | None = None, progress: bool = True,
        plot_path=None, validation_batch_size: int = 256, val_data=None,
        val_batch_size: int | None = None, checkpoint_dir=None,
        checkpoint_prefix: str | None = None, save_every_steps: int | None = None,
        save_every_seconds: float | None = None, max_to_keep: int | None = None,
        async_save: bool | None = None, restore: str | bool | None = None,
        accumulate_grad_batches: int = 1, clip_grad_norm: float | None = None,
        clip_grad_value: float | None = None) -> History:
    """Train ``model`` and return its :class:`History` (``history.history["val_loss"]``, ...).

    ``loss_fn`` is a loss module or function, or a Keras name (``"mse"``,
    ``"categorical_crossentropy"``, ...); ``optimizer`` an optimizer over the model's
    parameters, or a Keras name (``"adam"``, ``"sgd"``, ...: Keras's default learning rate);
    see :mod:`minidl.training.by_name`.

    ``data``: ``(X, y)`` arrays (read in batches of ``batch_size``, default 32, shuffled each
    epoch by ``shuffle`` with the fixed ``seed``), a data set, or a reader (``DataReader``,
    ``CSVReader``, ...: its own batch size and order). ``epochs=`` or ``steps=`` (optimizer
    steps) sets the length.
    Batches are read on the host and each is copied to the device the model is on (move the
    model with ``model.to("cuda")`` before calling ``fit``; a resumed run restores onto it).

    The logs of an epoch hold the mean training ``loss``, ``accuracy`` (for class scores and
    class targets) and each of ``metrics=`` (names or Metric objects, as for :func:`evaluate`).
    ``validation_data=(Xv, yv)`` (or a data set or reader), or ``validation_split=0.2`` (the
    last 20 % of the arrays, as Keras), is evaluated at the end of every epoch and adds
    ``val_loss``, ``val_accuracy``, ``val_<metric>``.
    ``scheduler=`` is stepped after every optimizer step; ``callbacks=`` (EarlyStopping,
    ModelCheckpoint, ReduceLROnPlateau, CSVLogger, LearningRateScheduler, LambdaCallback,
    your own).

    ``checkpoint=CheckpointConfig(directory, ...)`` (or just the directory) checkpoints the whole
    training state and resumes from it when the script runs again; see
    :class:`CheckpointConfig` for every policy, new runs (``restore=False``) and what happens
    when the hyper-parameters changed. The older ``checkpoint_dir=``, ``checkpoint_prefix=``,
    ``save_every_steps=``, ``save_every_seconds=``, ``max_to_keep=``, ``async_save=``,
    ``restore=`` (and ``val_data=``, ``val_batch_size=``) still work.

    ``accumulate_grad_batches=k`` steps the optimizer once per k batches on their summed
    gradients (each loss divided by k; an epoch's last batch closes its window);
    ``clip_grad_norm=`` / ``clip_grad_value=`` clip the gradients before each optimizer step
    (see :mod:`minidl.training.gradient_steps`). Both resume bitwise from a checkpoint.

    ``progress=`` prints a bar per epoch on a terminal, one line per epoch otherwise;
    ``plot_path=`` writes a PNG of the metrics when training ends (needs matplotlib; checked
    before training starts; a plot that still fails only warns).

    If training itself fails (a callback raises, an interrupt), the exception carries the
    History of the epochs that completed as ``error.history``.
    """
    trainer = Trainer(model, loss_fn, optimizer, data, batch_size=batch_size, epochs=epochs,
                   steps=steps, validation_data=validation_data,
                   validation_split=validation_split, shuffle=shuffle, seed=seed,
                   callbacks=callbacks, scheduler=scheduler, metrics=metrics,
                   checkpoint=checkpoint, progress=progress, plot_path=plot_path,
                   validation_batch_size=validation_batch_size, val_data=val_data,
                   val_batch_size=val_batch_size, checkpoint_dir=checkpoint_dir,
                   checkpoint_prefix=checkpoint_prefix, save_every_steps=save_every_steps,
                   save_every_seconds=save_every_seconds, max_to_keep=max_to_keep,
                   async_save=async_save, restore=restore,
                   accumulate_grad_batches=accumulate_grad_batches,
                   clip_grad_norm=clip_grad_norm, clip_grad_value=clip_grad_value)
    try:
        return trainer.run()
    except BaseException as error:
        try:
            error.history = trainer.history
        except AttributeError:  # an exception type that takes no attributes
            pass
        raise
