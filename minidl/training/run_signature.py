"""What a run was started with, stored in its checkpoints and compared when it resumes.

Re-running a script with a changed learning rate in a directory of checkpoints would
otherwise resume silently with the old rate: the optimizer's state (rate included) comes back
from the file.  So ``fit`` records a *signature* of how the run began -- the optimizer's and
scheduler's hyper-parameters as given, the batch size, the data set size and the model's
parameter shapes -- and on resume compares it with what the user passes now.

Hyper-parameters are compared as they were at the start (a scheduler moves the current rate
every step, so the current rate says nothing about what the user wrote).
"""

from __future__ import annotations

import math

# Optimizer group entries that are bookkeeping, not choices of the user.
_NOT_HYPERPARAMETERS = {"params", "initial_lr"}


def _plain(value):
    """Hyper-parameter values as msgpack-able, comparable plain data."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (int, float, bool, str)):
        return value.item()
    return value


def hyperparameters(optimizer, scheduler) -> dict:
    """``{"optimizer/<group>/<name>": value, "scheduler/<name>": value}`` as given now."""
    found = {}
    for index, group in enumerate(getattr(optimizer, "param_groups", [])):
        for name, value in group.items():
            if name == "lr" and "initial_lr" in group:
                value = group["initial_lr"]  # what the user gave; a scheduler moves "lr"
            if name not in _NOT_HYPERPARAMETERS and isinstance(
                    _plain(value), (int, float, bool, str, list, type(None))):
                found[f"optimizer/{index}/{name}"] = _plain(value)
    if scheduler is not None:
        for name in getattr(scheduler, "hyperparameters", ()):
            found[f"scheduler/{name}"] = _plain(getattr(scheduler, name))
    return found


def structure(model, optimizer, scheduler, reader, metric_names=()) -> dict:
    """What must be equal for a checkpoint to be resumable at all (the training metrics too:
    their running sums are part of the state)."""
    found = {f"model/{name}": list(array.shape) for name, array in model.state_dict().items()}
    found["optimizer/type"] = type(optimizer).__name__
    found["scheduler/type"] = None if scheduler is None else type(scheduler).__name__
    found["metrics"] = list(metric_names)
    for name in ("batch_size", "drop_last"):
        if hasattr(reader, name):
            found[f"data/{name}"] = _plain(getattr(reader, name))
    dataset = getattr(reader, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__"):
        found["data/samples"] = len(dataset)
    return found


def signature(model, optimizer, scheduler, reader, metric_names=()) -> dict:
    """The signature stored under the ``"fit"`` key of every checkpoint's metadata."""
    return {"hyperparameters": hyperparameters(optimizer, scheduler),
            "structure": structure(model, optimizer, scheduler, reader, metric_names)}


def _same(a, b) -> bool:
    """Equal values; 1 and 1.0 are the same rate, but True is not 1."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def changed_names(saved: dict, now: dict) -> list[str]:
    """Names given now whose value differs from the checkpoint's (or that it lacks)."""
    return [name for name in now if name not in saved or not _same(saved[name], now[name])]


def differences(saved: dict, now: dict) -> list[str]:
    """Human-readable lines ``name: checkpoint X, given now Y`` for every entry that differs."""
    lines = []
    for name in list(saved) + [n for n in now if n not in saved]:
        if name not in now:
            lines.append(f"{name}: checkpoint {saved[name]!r}, not given now")
        elif name not in saved:
            lines.append(f"{name}: not in the checkpoint, given now {now[name]!r}")
        elif not _same(saved[name], now[name]):
            lines.append(f"{name}: checkpoint {saved[name]!r}, given now {now[name]!r}")
    return lines


def apply_hyperparameters(optimizer, scheduler, given: dict, changed: list[str]) -> None:
    """Put the values ``given`` now back over the restored ones, for the names in ``changed``.

    With a scheduler, a changed base rate moves the schedule: the current rate becomes the
    schedule's value at its restored position from the new base rate.
    """
    for name in changed:
        kind, _, rest = name.partition("/")
        if kind == "optimizer":
            index, _, key = rest.partition("/")
            optimizer.param_groups[int(index)][key] = given[name]
        elif kind == "scheduler":
            setattr(scheduler, rest, given[name])
    if scheduler is None:
        return
    for index, group in enumerate(optimizer.param_groups):
        if f"optimizer/{index}/lr" in changed:
            scheduler.base_lrs[index] = given[f"optimizer/{index}/lr"]
            group["initial_lr"] = given[f"optimizer/{index}/lr"]
    if any(name.startswith("scheduler/") or name.endswith("/lr") for name in changed):
        # Re-take the current step of the schedule: step(epoch) evaluates the closed form,
        # every group's rate from the (new) base rates and hyper-parameters at the same
        # position (a plain step() would continue from the restored rates).
        scheduler.step(scheduler.last_epoch)
