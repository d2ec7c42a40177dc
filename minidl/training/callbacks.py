"""Callbacks: code that runs at fixed points of ``fit`` (Keras's protocol, minidl's state).

A callback whose behaviour depends on the past (EarlyStopping's patience counter, the best value
seen so far) keeps that in ``state_dict()``, and ``fit`` stores it in every checkpoint, so a
resumed run stops at the same epoch an uninterrupted one would.
"""

from __future__ import annotations

import math


class Callback:
    """Base class: override the hooks you need. ``trainer.stop_training = True`` ends the run."""

    def on_train_begin(self, trainer) -> None: ...

    def on_step_end(self, trainer, step: int, logs: dict) -> None: ...

    def on_epoch_end(self, trainer, epoch: int, logs: dict) -> None: ...

    def on_train_end(self, trainer) -> None: ...

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _improved(value: float, best: float, mode: str, min_delta: float) -> bool:
    if math.isnan(value):
        return False
    return value < best - min_delta if mode == "min" else value > best + min_delta


def _check_mode(mode: str) -> str:
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
    return mode


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs."""

    def __init__(self, monitor: str = "val_loss", patience: int = 3, min_delta: float = 0.0,
                 mode: str = "min", restore_best_weights: bool = False):
        if patience < 0:
            raise ValueError(f"EarlyStopping: patience must be >= 0, got {patience}")
        self.monitor, self.patience, self.min_delta = monitor, int(patience), float(min_delta)
        self.mode, self.restore_best_weights = _check_mode(mode), bool(restore_best_weights)
        self.best = math.inf if mode == "min" else -math.inf
        self.wait, self.stopped_epoch = 0, None
        self.best_weights = None

    def on_epoch_end(self, trainer, epoch, logs):
        if self.monitor not in logs:
            raise KeyError(f"EarlyStopping: metric {self.monitor!r} was not computed; available: "
                           f"{sorted(logs)}")
        value = float(logs[self.monitor])
        if _improved(value, self.best, self.mode, self.min_delta):
            self.best, self.wait = value, 0
            if self.restore_best_weights:
                self.best_weights = {k: v.copy() for k, v in trainer.model.state_dict().items()}
        else:
            self.wait += 1
            if self.wait > self.patience:
                self.stopped_epoch = epoch
                trainer.stop_training = True

    def on_train_end(self, trainer):
        if self.restore_best_weights and self.best_weights is not None and self.stopped_epoch \
                is not None:
            trainer.model.load_state_dict(self.best_weights)

    def state_dict(self):
        state = {"best": self.best, "wait": self.wait, "stopped_epoch": self.stopped_epoch}
        if self.best_weights is not None:
            state["best_weights"] = dict(self.best_weights)
        return state

    def load_state_dict(self, state):
        self.best, self.wait = float(state["best"]), int(state["wait"])
        self.stopped_epoch = state.get("stopped_epoch")
        weights = state.get("best_weights")
        self.best_weights = None if weights is None else {k: v.copy() for k, v in weights.items()}


class ModelCheckpoint(Callback):
    """Save the model (``md.save_model``: topology + weights) at the end of epochs — every epoch,
    or only when ``monitor`` improves (``save_best_only``, Keras's behaviour).

    ``filepath`` may contain ``{epoch}`` and ``{step}`` and any metric name, e.g.
    ``"best-{epoch:02d}-{val_loss:.3f}.mdl"``. Each file is written atomically.
    """

    def __init__(self, filepath: str, monitor: str = "val_loss", mode: str = "min",
                 save_best_only: bool = False):
        self.filepath, self.monitor = str(filepath), monitor
        self.mode, self.save_best_only = _check_mode(mode), bool(save_best_only)
        self.best = math.inf if mode == "min" else -math.inf
        self.saved: list[str] = []

    def on_epoch_end(self, trainer, epoch, logs):
        from ..io import save_model
        if self.save_best_only:
            if self.monitor not in logs:
                raise KeyError(f"ModelCheckpoint: metric {self.monitor!r} was not computed; "
                               f"available: {sorted(logs)}")
            if not _improved(float(logs[self.monitor]), self.best, self.mode, 0.0):
                return
            self.best = float(logs[self.monitor])
        path = self.filepath.format(epoch=epoch + 1, step=trainer.step, **logs)
        from .. import distributed as dist
        from ..nn.parallel import DistributedDataParallel
        model = trainer.model
        if isinstance(model, DistributedDataParallel):
            model = model.module  # the model itself, loadable anywhere, as PyTorch's .module
        if dist.get_rank() == 0:  # replicas are identical: one rank writes
            save_model(model, path)
        self.saved.append(path)

    def state_dict(self):
        return {"best": self.best, "saved": list(self.saved)}

    def load_state_dict(self, state):
        self.best, self.saved = float(state["best"]), [str(p) for p in state["saved"]]
