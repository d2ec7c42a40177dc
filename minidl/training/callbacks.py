"""Callbacks: code that runs at fixed points of ``fit`` (Keras's protocol, minidl's state).

Hooks, in the order they run: ``on_train_begin``, then per epoch ``on_epoch_begin``, per step
``on_step_begin`` / ``on_step_end``, ``on_epoch_end`` (after the epoch's last step), then
``after_step`` once the step is fully accounted for (epoch bookkeeping and ``fit``'s own
checkpoint done: the one point where a snapshot of the whole training state is consistent),
and finally ``on_train_end``.  Each gets
the :class:`~minidl.training.Trainer` (``trainer.model``, ``.optimizer``, ``.step``,
``.history``; ``trainer.stop_training = True`` ends the run after the current step).
Epochs are numbered from 0 in the hooks, as in Keras. What a callback adds to the ``logs`` of
``on_epoch_end`` is recorded in the history (which is written after the callbacks ran).

A callback whose behaviour depends on the past (a patience counter, the best value so far)
keeps that in ``state_dict()``; ``fit`` stores it in every checkpoint, so a resumed run stops,
saves and logs exactly as an uninterrupted one would. States are stored by callback, not by
position (:class:`CallbackStates`): a callback without state can be added or removed between a
run and its resume, and a stateful one is found again wherever it now stands in the list.
"""

from __future__ import annotations

import csv
import math
import os
import string

from .. import user_warnings


class Callback:
    """Base class: override the hooks you need.

    ``state_key``: the name this callback's state is stored under in a checkpoint. By default
    its class name, numbered from the second callback of a class on (``"EarlyStopping"``,
    ``"EarlyStopping#2"``); set it when two callbacks of one class may change places.
    """

    state_key: str | None = None

    def on_train_begin(self, trainer) -> None: ...

    def on_epoch_begin(self, trainer, epoch: int) -> None: ...

    def on_step_begin(self, trainer, step: int) -> None: ...

    def on_step_end(self, trainer, step: int, logs: dict) -> None: ...

    def on_epoch_end(self, trainer, epoch: int, logs: dict) -> None: ...

    def after_step(self, trainer, step: int) -> None: ...

    def on_train_end(self, trainer) -> None: ...

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def state_keys(callbacks) -> list[str]:
    """The key each callback's state is stored under (see :attr:`Callback.state_key`)."""
    keys, seen = [], {}
    for callback in callbacks:
        if callback.state_key is not None:
            keys.append(str(callback.state_key))
            continue
        name = type(callback).__name__
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"fit: two callbacks have the state_key {duplicates[0]!r}; give each "
                         f"a different one")
    return keys


def _saved_states(state, keys: list[str]) -> dict:
    """{key: state} from a checkpoint's callback state. Older checkpoints stored a list with
    one state per callback; it is read by position when the list fits the callbacks given."""
    if not isinstance(state, dict):
        raise ValueError("callback state: malformed (not a map)")
    if isinstance(state.get("by_key"), dict):
        return dict(state["by_key"])
    states = state.get("states")
    if not isinstance(states, list):
        raise ValueError("callback state: malformed (neither 'by_key' nor 'states')")
    if len(states) == len(keys):
        return {key: s for key, s in zip(keys, states) if s}
    return {f"callback at position {i}": s for i, s in enumerate(states) if s}


def callback_changes(state, callbacks) -> list[str]:
    """How the stateful callbacks given now differ from those whose state ``state`` holds
    (``CallbackStates.state_dict()`` of a checkpoint): one line per difference."""
    keys = state_keys(callbacks)
    saved = _saved_states(state, keys)
    lines = [f"callbacks/{key}: in the checkpoint, not given now (its state is dropped)"
             for key in saved if key not in keys]
    lines += [f"callbacks/{key}: given now, not in the checkpoint (starts afresh)"
              for key, callback in zip(keys, callbacks)
              if key not in saved and callback.state_dict()]
    return lines


class CallbackStates:
    """The callbacks of a run as one object of the state_dict protocol, so that a
    :class:`~minidl.checkpoint.Checkpoint` can track them.

    Only callbacks with a state are stored, each under its key (:func:`state_keys`). Loading
    gives every callback the state saved under its key and leaves the others as they are;
    ``changes`` then lists what did not match (:func:`callback_changes`), for ``fit`` to
    handle as ``on_change`` says.
    """

    def __init__(self, callbacks):
        self.callbacks = list(callbacks)
        self.keys = state_keys(self.callbacks)
        self.changes: list[str] = []

    def state_dict(self) -> dict:
        states = ((key, callback.state_dict()) for key, callback in zip(self.keys, self.callbacks))
        return {"by_key": {key: state for key, state in states if state}}

    def load_state_dict(self, state) -> None:
        saved = _saved_states(state, self.keys)
        for key, callback in zip(self.keys, self.callbacks):
            if key in saved:
                callback.load_state_dict(saved[key])
        self.changes = callback_changes(state, self.callbacks)


# -- watching a metric ------------------------------------------------------------------------

_HIGHER_IS_BETTER = ("acc", "precision", "recall", "f1", "auc")


def _resolve_mode(mode: str, monitor: str, who: str) -> str:
    """"min" or "max"; "auto" picks "max" for accuracy-like metrics, as Keras does."""
    if mode == "auto":
        return "max" if any(word in monitor for word in _HIGHER_IS_BETTER) else "min"
    if mode not in ("min", "max"):
        raise ValueError(f"{who}: mode must be 'min', 'max' or 'auto', got {mode!r}")
    return mode


def _improved(value: float, best: float, mode: str, min_delta: float) -> bool:
    if math.isnan(value):
        return False
    return value < best - min_delta if mode == "min" else value > best + min_delta


def _worst(mode: str) -> float:
    return math.inf if mode == "min" else -math.inf


def _monitored(callback, logs: dict, who: str, consequence: str) -> float | None:
    """The value of ``callback.monitor`` in ``logs``; None when the run does not compute it.

    A metric that is missing (``val_loss`` without validation data, a typo) is said once,
    with what the callback does about it, and training goes on: Keras's behaviour, where an
    error at the end of the first epoch would cost the run.
    """
    if callback.monitor in logs:
        return float(logs[callback.monitor])
    if not getattr(callback, "_said_missing", False):
        callback._said_missing = True
        hint = (" (val_ metrics need validation_data= or validation_split=)"
                if callback.monitor.startswith("val_") else "")
        user_warnings.warn(f"{who}: metric {callback.monitor!r} is not computed by this run"
                           f"{hint}; available: {sorted(logs)}. {consequence}")
    return None


def _writes_files() -> bool:
    """Whether this process writes the callbacks' files and messages: in a data-parallel job
    the replicas and the logs are the same on every rank, so rank 0 alone does."""
    from .. import distributed as dist
    return dist.get_rank() == 0


def _check_count(name: str, value, low: int, who: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{who}: {name} must be an integer >= {low}, got {value!r}")
    return value


class EarlyStopping(Callback):
    """Stop training when ``monitor`` has not improved by more than ``min_delta`` for
    ``patience`` epochs in a row (Keras's semantics: with ``patience=2`` and a flat metric,
    training runs 3 epochs: the first sets the best, two more fail to beat it).

    ``baseline``: the metric must beat it, or training stops after ``patience`` epochs.
    ``restore_best_weights``: when stopping, put back the weights of the best epoch.
    """

    def __init__(self, monitor: str = "val_loss", patience: int = 0, min_delta: float = 0.0,
                 mode: str = "auto", baseline: float | None = None,
                 restore_best_weights: bool = False):
        self.monitor = monitor
        self.patience = _check_count("patience", patience, 0, "EarlyStopping")
        self.min_delta = abs(float(min_delta))
        self.mode = _resolve_mode(mode, monitor, "EarlyStopping")
        self.baseline = None if baseline is None else float(baseline)
        self.restore_best_weights = bool(restore_best_weights)
        self.best = _worst(self.mode) if baseline is None else self.baseline
        self.wait, self.best_epoch, self.stopped_epoch = 0, None, None
        self.best_weights = None

    def on_epoch_end(self, trainer, epoch, logs):
        value = _monitored(self, logs, "EarlyStopping", "It will not stop training.")
        if value is None:
            return
        if _improved(value, self.best, self.mode, self.min_delta):
            self.best, self.best_epoch, self.wait = value, epoch, 0
            if self.restore_best_weights:
                self.best_weights = {k: v.copy() for k, v in trainer.model.state_dict().items()}
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = epoch
            trainer.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                trainer.model.load_state_dict(self.best_weights)

    def state_dict(self):
        state = {"best": self.best, "wait": self.wait, "best_epoch": self.best_epoch,
                 "stopped_epoch": self.stopped_epoch}
        if self.best_weights is not None:
            state["best_weights"] = dict(self.best_weights)
        return state

    def load_state_dict(self, state):
        self.best, self.wait = float(state["best"]), int(state["wait"])
        self.best_epoch, self.stopped_epoch = state.get("best_epoch"), state.get("stopped_epoch")
        weights = state.get("best_weights")
        self.best_weights = None if weights is None else {k: v.copy() for k, v in weights.items()}


class ReduceLROnPlateau(Callback):
    """Multiply every group's learning rate by ``factor`` when ``monitor`` has not improved
    (by more than ``min_delta``) for ``patience`` epochs; then wait ``cooldown`` epochs before
    counting again.  The rate never goes below ``min_lr``.  Not with a ``scheduler=``, which
    would overwrite the rate at the next step."""

    def __init__(self, monitor: str = "val_loss", factor: float = 0.1, patience: int = 10,
                 mode: str = "auto", min_delta: float = 1e-4, cooldown: int = 0,
                 min_lr: float = 0.0, verbose: bool = False):
        if not 0.0 < float(factor) < 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor must be in (0, 1), got {factor!r}")
        self.monitor, self.factor = monitor, float(factor)
        self.patience = _check_count("patience", patience, 0, "ReduceLROnPlateau")
        self.cooldown = _check_count("cooldown", cooldown, 0, "ReduceLROnPlateau")
        self.mode = _resolve_mode(mode, monitor, "ReduceLROnPlateau")
        self.min_delta, self.min_lr, self.verbose = abs(float(min_delta)), float(min_lr), verbose
        self.best, self.wait, self.cooldown_left = _worst(self.mode), 0, 0

    def on_train_begin(self, trainer):
        if trainer.scheduler is not None:
            raise ValueError("ReduceLROnPlateau sets the learning rate itself; fit was also given "
                             "a scheduler=, which would overwrite it. Use one of the two.")

    def on_epoch_end(self, trainer, epoch, logs):
        value = _monitored(self, logs, "ReduceLROnPlateau", "The rate is left as it is.")
        if value is None:
            return
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            self.wait = 0
        if _improved(value, self.best, self.mode, self.min_delta):
            self.best, self.wait = value, 0
            return
        if self.cooldown_left > 0:
            return
        self.wait += 1
        if self.wait >= self.patience:
            for group in trainer.optimizer.param_groups:
                group["lr"] = max(group["lr"] * self.factor, self.min_lr)
            if self.verbose:
                trainer.say(f"epoch {epoch + 1}: ReduceLROnPlateau set the learning rate to "
                            f"{trainer.optimizer.param_groups[0]['lr']:.3g}")
            self.cooldown_left, self.wait = self.cooldown, 0

    def state_dict(self):
        return {"best": self.best, "wait": self.wait, "cooldown_left": self.cooldown_left}

    def load_state_dict(self, state):
        self.best, self.wait = float(state["best"]), int(state["wait"])
        self.cooldown_left = int(state["cooldown_left"])


class LearningRateScheduler(Callback):
    """At the start of every epoch, set each group's rate to ``schedule(epoch, lr)`` (epoch
    from 0, ``lr`` the group's current rate).  Not with a ``scheduler=`` (it would overwrite
    the rate every step)."""

    def __init__(self, schedule, verbose: bool = False):
        if not callable(schedule):
            raise TypeError("LearningRateScheduler: schedule must be a function (epoch, lr) -> lr")
        self.schedule, self.verbose = schedule, verbose

    def on_train_begin(self, trainer):
        if trainer.scheduler is not None:
            raise ValueError("LearningRateScheduler sets the learning rate itself; fit was also "
                             "given a scheduler=, which would overwrite it. Use one of the two.")

    def on_epoch_begin(self, trainer, epoch):
        for index, group in enumerate(trainer.optimizer.param_groups):
            rate = self.schedule(epoch, group["lr"])
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) \
                    or not math.isfinite(rate) or rate < 0:
                raise ValueError(f"LearningRateScheduler: schedule({epoch}, ...) returned "
                                 f"{rate!r}, not a learning rate")
            group["lr"] = float(rate)
        if self.verbose:
            trainer.say(f"epoch {epoch + 1}: learning rate "
                        f"{trainer.optimizer.param_groups[0]['lr']:.3g}")


class CSVLogger(Callback):
    """Write one row per epoch (``epoch`` from 0, then the logs' metrics) to a CSV file.

    The file is rewritten when training starts (``append=True`` adds to it instead).  A resumed
    run rewrites it from the restored history, so rows of epochs that ended after the last
    checkpoint (and will be trained again) are not repeated.  In a data-parallel job only rank
    0 writes (the logs are the job's, the same on every rank).
    """

    def __init__(self, filename, separator: str = ",", append: bool = False):
        self.filename, self.separator, self.append = os.fspath(filename), separator, append
        self.columns: list[str] | None = None

    def _write(self, mode: str, rows: list[dict]) -> None:
        if not _writes_files():
            return
        with open(self.filename, mode, newline="") as file:
            writer = csv.writer(file, delimiter=self.separator)
            if self.columns is None:
                self.columns = sorted(k for k in rows[0] if k != "epoch") if rows else None
                if self.columns is not None and not (mode == "a" and file.tell() > 0):
                    writer.writerow(["epoch"] + self.columns)
            for row in rows:
                writer.writerow([row["epoch"]] + [row.get(c, "") for c in self.columns])

    def on_train_begin(self, trainer):
        history = trainer.history
        if trainer.resumed_from is not None and len(history):
            self.columns = None
            self._write("w", [dict({k: v[i] for k, v in history.metrics.items()},
                                   epoch=history.epochs[i]) for i in range(len(history))])
        elif not self.append:
            self.columns = None
            if _writes_files():
                open(self.filename, "w").close()

    def on_epoch_end(self, trainer, epoch, logs):
        self._write("a", [dict(logs, epoch=epoch)])


class LambdaCallback(Callback):
    """A callback from plain functions, with Keras's signatures: ``on_epoch_begin(epoch)``,
    ``on_epoch_end(epoch, logs)``, ``on_batch_begin(step)``, ``on_batch_end(step, logs)``,
    ``on_train_begin()``, ``on_train_end()`` (steps counted from 1, epochs from 0)."""

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_batch_begin=None,
                 on_batch_end=None, on_train_begin=None, on_train_end=None):
        self.functions = {"epoch_begin": on_epoch_begin, "epoch_end": on_epoch_end,
                          "batch_begin": on_batch_begin, "batch_end": on_batch_end,
                          "train_begin": on_train_begin, "train_end": on_train_end}
        for name, function in self.functions.items():
            if function is not None and not callable(function):
                raise TypeError(f"LambdaCallback: on_{name} must be callable")

    def _call(self, name, *args):
        if self.functions[name] is not None:
            self.functions[name](*args)

    def on_train_begin(self, trainer):
        self._call("train_begin")

    def on_epoch_begin(self, trainer, epoch):
        self._call("epoch_begin", epoch)

    def on_step_begin(self, trainer, step):
        self._call("batch_begin", step)

    def on_step_end(self, trainer, step, logs):
        self._call("batch_end", step, logs)

    def on_epoch_end(self, trainer, epoch, logs):
        self._call("epoch_end", epoch, logs)

    def on_train_end(self, trainer):
        self._call("train_end")


def _template_suffix(template: str) -> str:
    """The file suffix a ``ModelCheckpoint`` template ends with ("" for none).

    Only the literal text after the last format field can be a suffix: in
    ``"best-{epoch:02d}-{val_loss:.3f}"`` the ``.3f}`` is a format spec, and the ``.`` of
    ``"weights.{epoch:02d}"`` is followed by a field. A suffix holds a letter (``.095`` is
    part of a number).
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ValueError(f"ModelCheckpoint: filepath {template!r} is not a valid format "
                         f"template ({error})") from None
    tail = parts[-1][0] if parts and parts[-1][1] is None else ""
    name = tail.replace(os.sep, "/").rsplit("/", 1)[-1]
    if "." not in name:
        return ""
    suffix = name[name.rindex("."):]
    return suffix if any(c.isalpha() for c in suffix) else ""


class ModelCheckpoint(Callback):
    """Save the model at the end of every epoch, or every ``save_freq`` steps, or only when
    ``monitor`` improves (``save_best_only``, Keras's behaviour).

    What a file holds: by default the model (``md.save_model``: topology and weights, loads
    with ``md.load_model``); ``save_weights_only=True``: its ``state_dict`` (``md.save``; load
    with ``model.load_state_dict(md.load(path))``); ``save_training_state=True``: the whole
    training state of ``fit`` (model, optimizer, scheduler, data position, history, callbacks,
    RNG), from which ``fit(..., checkpoint=CheckpointConfig(dir, restore_from=path))`` resumes,
    also with another list of callbacks: each callback given then gets the state saved for it
    (by class and position among its class, or ``state_key``), and a stateful callback that
    was added or removed is handled as ``CheckpointConfig.on_change`` says ("warn": restore
    what matches and say what did not).

    ``filepath`` may use ``{epoch}`` (from 1), ``{step}``, ``{batch}`` (within the epoch) and
    any metric of the logs, e.g. ``"best-{epoch:02d}-{val_loss:.3f}"``; ``.mdl`` is added
    when the template does not end with a suffix of its own (``"m-{epoch}.weights"`` does).  Every file is written atomically, and is found by
    ``md.latest_checkpoint`` of its directory.
    """

    def __init__(self, filepath, monitor: str = "val_loss", mode: str = "auto",
                 save_best_only: bool = False, save_weights_only: bool = False,
                 save_freq="epoch", save_training_state: bool = False):
        self.filepath = os.fspath(filepath)
        if not _template_suffix(self.filepath):
            self.filepath += ".mdl"
        if save_freq != "epoch":
            _check_count("save_freq", save_freq, 1, "ModelCheckpoint (or 'epoch')")
        if save_weights_only and save_training_state:
            raise ValueError("ModelCheckpoint: save_weights_only and save_training_state "
                             "exclude each other")
        self.monitor = monitor
        self.mode = _resolve_mode(mode, monitor, "ModelCheckpoint")
        self.save_best_only, self.save_weights_only = bool(save_best_only), bool(save_weights_only)
        self.save_freq, self.save_training_state = save_freq, bool(save_training_state)
        self.best = _worst(self.mode)
        self.saved: list[str] = []
        self._due: dict | None = None  # the logs of a save that is due at this step's end

    def on_step_end(self, trainer, step, logs):
        if self.save_freq != "epoch" and step % self.save_freq == 0:
            self._due = dict(logs)

    def on_epoch_end(self, trainer, epoch, logs):
        if self.save_freq == "epoch":
            self._due = dict(logs)

    def after_step(self, trainer, step):
        # Saving here, not in the hooks above, means a file never catches the state between
        # an epoch's last step and its bookkeeping (validation, history, other callbacks).
        if self._due is not None:
            logs, self._due = self._due, None
            self._save(trainer, logs)

    def _save(self, trainer, logs):
        from ..io import save
        from ..model_files import save_model
        if self.save_best_only:
            value = _monitored(self, logs, "ModelCheckpoint",
                               "With save_best_only, no file is saved.")
            if value is None or not _improved(value, self.best, self.mode, 0.0):
                return
            self.best = value
        epoch, batch = trainer.position
        path = self.filepath.format(epoch=epoch, batch=batch, step=trainer.step, **logs)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self.saved.append(path)
        if not _writes_files():
            return
        from ..nn.parallel import DistributedDataParallel
        model = trainer.model
        if isinstance(model, DistributedDataParallel):
            model = model.module  # the model itself, loadable by one process (PyTorch's .module)
        if self.save_training_state:
            trainer.save_training_state(path)
        elif self.save_weights_only:
            save(model.state_dict(), path)
        else:
            save_model(model, path)

    def state_dict(self):
        return {"best": self.best, "saved": list(self.saved)}

    def load_state_dict(self, state):
        self.best, self.saved = float(state["best"]), [str(p) for p in state["saved"]]
