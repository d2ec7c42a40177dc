"""``Checkpoint``: everything a training run needs to continue, in one minidl file.

A checkpoint tracks named objects that follow minidl's state protocol (``state_dict()`` and
``load_state_dict()``: modules, optimizers, schedulers, data readers, the user's own
objects) and always the global random generator, so that dropout masks and shuffles after a
resume are the ones the uninterrupted run would have drawn.

Saving happens in two phases, which is what lets the manager save in the background:

1. :meth:`Checkpoint.stage` runs in the caller's thread and takes a *snapshot*: every state
   is copied (arrays included) into a :class:`StagedCheckpoint`.  Training may go on
   changing the live objects as soon as it returns.  (A synchronous save skips the copy:
   nothing changes the objects while it writes.)
2. :meth:`Checkpoint.write` turns the snapshot into a file through the io layer
   (``kind="checkpoint"``), atomically: the file appears whole under its name, or not at all.

Restoring is all-or-nothing.  The file is read and checked completely first (checksums,
layout, every tracked name present, module shapes and the RNG state valid); only then are
objects changed, each after a copy of its current state was put aside, so that if one of
them still refuses its state the ones already loaded are rolled back.  Whatever goes wrong,
the caller gets a :class:`~minidl.io.CheckpointError` naming the file, and every object
(and the RNG) is as it was.

Header layout (``metadata`` of the file; ``SPEC.md`` has the full description)::

    {"checkpoint_format": 1,
     "step": 120,
     "metadata": {...},                  # the user's metadata (arrays become TensorRefs)
     "objects": {"model": {...}, ...},   # each tracked object's state, in tracking order
     "rng": {...},                       # minidl.get_rng_state()
     "manager": {...}}                   # optional: what a CheckpointManager records
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .. import random as md_random
from . import naming, sharded
from .data_parallel import rng_for_this_rank
from .formats import CHECKPOINT_FORMAT, CHECKPOINT_KIND
from ..io.state_tree import (
    copy_arrays_into, copy_state, from_storable, to_storable)
from ..io import (
    CheckpointError, CorruptFileError, decode_value, encode_value, read_file, write_file)
from ..nn.module import Module, StateDictMismatchError
from ..optim.optimizer import Optimizer
from ..placement import check_map_location, mapped_device
from ..validation import check_number

_REQUIRED_FIELDS = ("checkpoint_format", "step", "metadata", "objects", "rng")


class StateMismatchError(CheckpointError):
    """The file is sound but does not fit the tracked objects (a name missing or unexpected,
    a shape that differs, a state an object refuses)."""


@dataclass
class RestoreInfo:
    """What :meth:`Checkpoint.restore` restored, and from where."""

    path: str
    step: int
    metadata: dict
    restored: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    manager: dict = field(default_factory=dict)


@dataclass
class StagedCheckpoint:
    """A checkpoint copied out of the live objects, ready to be written by any thread.

    ``header`` is the file's metadata tree (with TensorRefs) and ``tensors`` the arrays it
    refers to; neither shares memory with the objects that were staged.
    """

    step: int
    epoch: int | None
    header: dict
    tensors: dict[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        """Bytes of array data the file will hold."""
        return sum(a.nbytes for a in self.tensors.values())


def _is_count(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _epoch_of(obj) -> int | None:
    """The epoch of the last batch a reader handed out, counted from 1 (0 before the first).

    A reader's ``epoch`` counts the epochs it finished, and after an epoch's last batch it
    already points at the next epoch's start (``position`` 0). So the epoch in progress is
    ``epoch + 1`` while ``position`` is inside an epoch, and ``epoch`` itself at a boundary:
    the end of epoch 1 is epoch 1, its successor's fifth batch epoch 2 -- the rule of
    ``fit``'s names, so every checkpoint name means the same thing.
    """
    epoch = getattr(obj, "epoch", None)
    if not _is_count(epoch):
        return None
    position = getattr(obj, "position", 0)
    return int(epoch) + (1 if _is_count(position) and position > 0 else 0)


class Checkpoint:
    """Saves and restores named stateful objects, plus the global RNG, as one file.

    ``Checkpoint(model=model, optimizer=opt, scheduler=sched, reader=reader)``: every value
    must have ``state_dict()`` and ``load_state_dict(state)``.
    """

    def __init__(self, **objects):
        for name, obj in objects.items():
            if not (callable(getattr(obj, "state_dict", None))
                    and callable(getattr(obj, "load_state_dict", None))):
                raise TypeError(f"Checkpoint: {name!r} is a {type(obj).__name__}, which lacks "
                                "state_dict()/load_state_dict()")
        self._objects = dict(objects)

    @property
    def objects(self) -> dict:
        """The tracked objects by name (a copy of the mapping; the objects themselves)."""
        return dict(self._objects)

    @property
    def epoch(self) -> int | None:
        """The epoch, from 1, of the last batch handed out by the first tracked object that
        has an epoch (a data reader); 0 before its first batch; None without a reader."""
        for obj in self._objects.values():
            epoch = _epoch_of(obj)
            if epoch is not None:
                return epoch
        return None

    def __repr__(self) -> str:
        return f"Checkpoint({', '.join(self._objects)})"

    # -- saving ----------------------------------------------------------------------------------

    def stage(self, step: int = 0, metadata: dict | None = None, manager: dict | None = None,
              *, copy: bool = True, reuse: dict | None = None,
              rank_rng: list | None = None, shards: dict | None = None,
              rank_states: dict | None = None) -> StagedCheckpoint:
        """Snapshot every tracked object and the RNG, ready to be written.

        With ``copy`` (the default) every array is copied, so the result may be written
        from another thread while training goes on; ``reuse`` (the ``tensors`` of an
        earlier, already written snapshot) lends its buffers to the copies.  ``copy=False``
        keeps the live arrays: only for writing right away, in the same thread.
        ``manager`` is extra plain data stored under the header's ``"manager"`` field;
        ``rank_rng`` every rank's generator state in a data-parallel job; ``shards`` the
        shard files already written for the objects it names (see :mod:`~minidl.checkpoint.
        sharded`), whose states the file then does not hold itself; ``rank_states`` every
        rank's state of objects whose state differs per rank, stored as ``{"per_rank": [...]}``.
        """
        step = check_step("step", step)
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
        sharded_names = shards["objects"] if shards else ()
        rank_states = rank_states or {}
        states = {name: (sharded.placeholder(shards) if name in sharded_names else
                         {"per_rank": rank_states[name]} if name in rank_states else
                         to_storable(obj.state_dict(), name, copy_arrays=False))
                  for name, obj in self._objects.items()}
        user = to_storable(metadata or {}, "metadata", copy_arrays=False)
        # One encode for everything gives every array a unique, readable tensor name
        # ("objects/model/0.weight") that says where it belongs.
        tree, tensors = encode_value({"metadata": user, "objects": states})
        if copy:
            tensors = copy_arrays_into(tensors, reuse)
        header = {"checkpoint_format": CHECKPOINT_FORMAT, "step": step,
                  "metadata": tree["metadata"], "objects": tree["objects"],
                  "rng": md_random.get_rng_state()}
        if manager:
            header["manager"] = to_storable(manager, "manager")
        if rank_rng is not None:
            header["rank_rng"] = list(rank_rng)
        if shards:
            header["checkpoint_format"] = sharded.SHARDED_CHECKPOINT_FORMAT
            header["shards"] = shards
        return StagedCheckpoint(step, self.epoch, header, tensors)

    @staticmethod
    def write(path, staged: StagedCheckpoint, *, key: bytes | None = None) -> str:
        """Write a staged checkpoint to ``path`` atomically; returns the path."""
        path = os.fspath(path)
        write_file(path, staged.header, staged.tensors, kind=CHECKPOINT_KIND, key=key)
        return path

    def save(self, path, step: int = 0, metadata: dict | None = None, *,
             key: bytes | None = None) -> str:
        """Save every tracked object, the RNG, ``step`` and ``metadata`` to ``path``.

        The file appears complete or not at all (a crash leaves the previous file, if any).
        ``key`` (16/24/32 bytes) encrypts it.  Returns the path.
        """
        # Training waits for this save, so the live arrays can be written without a copy.
        return self.write(path, self.stage(step, metadata, copy=False), key=key)

    # -- restoring -------------------------------------------------------------------------------

    def restore(self, path, *, key: bytes | None = None, strict: bool = True,
                map_location=None) -> RestoreInfo:
        """Load every tracked object and the RNG from ``path``: all of them, or none.

        ``map_location`` (``"cpu"``, ``"cuda:0"``) moves the tracked modules to that device
        before their state is loaded, so the optimizer's state follows their parameters there;
        by default every object keeps its device. A file holds no device, so any checkpoint
        restores onto any device. As for ``md.load`` it may also be a dict from where the
        modules' tensors are to where they go (``{"cuda:1": "cuda:0"}``; other devices stay) or
        a callable ``f(tensor, location)`` called with each of their tensors and its device,
        whose result's device (a Tensor's; a NumPy array's is ``"cpu"``) is where it goes.

        With ``strict`` (the default) objects in the file that are not tracked are an error;
        ``strict=False`` ignores them (they are listed in ``info.skipped``).  Tracked objects
        missing from the file are always an error.  Raises ``CheckpointError`` (or a subclass)
        naming the file for every problem; nothing else escapes.
        """
        return self._restore(path, key=key, strict=strict, map_location=map_location)

    def _restore(self, path, *, key, strict: bool, map_location,
                 expected_step: int | None = None) -> RestoreInfo:
        """:meth:`restore`; with ``expected_step`` (what a managed file's name says) a header
        that says another step is refused as corrupt before anything changes."""
        path = os.fspath(path)
        map_location = check_map_location(map_location)
        try:
            plan = self._read_and_check(path, key, strict)
            step = plan["info"].step
            if expected_step is not None and step != expected_step:
                raise CorruptFileError(path, f"header says step {step}, the file name says "
                                             f"step {expected_step}")
            self._apply(path, plan, map_location)
        except CheckpointError:
            raise
        except Exception as exc:  # a promise of the API: one except clause suffices
            raise CheckpointError(path, f"cannot restore: {type(exc).__name__}: {exc}") from exc
        return plan["info"]

    def _read_and_check(self, path: str, key, strict: bool) -> dict:
        metadata, tensors = read_file(path, key=key, kind=CHECKPOINT_KIND)
        missing_fields = [f for f in _REQUIRED_FIELDS if f not in metadata]
        if missing_fields:
            raise CorruptFileError(path, f"checkpoint header lacks {', '.join(missing_fields)}")
        if metadata["checkpoint_format"] != (sharded.SHARDED_CHECKPOINT_FORMAT
                                             if "shards" in metadata else CHECKPOINT_FORMAT):
            raise CorruptFileError(path, f"unknown checkpoint_format "
                                         f"{metadata['checkpoint_format']!r}")
        try:
            step = check_step("checkpoint step", metadata["step"])
        except ValueError as exc:
            raise CorruptFileError(path, str(exc)) from None
        if not isinstance(metadata["objects"], dict) or not isinstance(metadata["rng"], dict):
            raise CorruptFileError(path, "checkpoint fields 'objects' and 'rng' must be maps")
        decoded = decode_value(path, {"metadata": metadata["metadata"],
                                      "objects": metadata["objects"]}, tensors)
        try:
            states = {name: from_storable(tree) for name, tree in decoded["objects"].items()}
            user_metadata = from_storable(decoded["metadata"])
            manager = from_storable(metadata.get("manager", {}))
        except ValueError as exc:
            raise CorruptFileError(path, str(exc)) from None
        if "shards" in metadata:  # the index of a sharded checkpoint: join the shards
            states.update(sharded.read_shard_states(path, metadata, key=key))

        missing = [name for name in self._objects if name not in states]
        unexpected = [name for name in states if name not in self._objects]
        if missing:
            raise StateMismatchError(path, f"holds no state for tracked object(s) "
                                           f"{', '.join(missing)} (it has: {', '.join(states)})")
        if unexpected and strict:
            raise StateMismatchError(path, f"holds object(s) {', '.join(unexpected)} that are not "
                                           "tracked; track them, or pass strict=False to skip them")
        rng = rng_for_this_rank(path, metadata)  # a data-parallel job saved one per rank
        try:  # dry run on a scratch generator: the global one must not change yet
            md_random.Generator().set_state(rng)
        except ValueError as exc:
            raise CorruptFileError(path, f"saved RNG state is invalid: {exc}") from None
        for name, obj in self._objects.items():
            if isinstance(obj, Module):
                _check_module_state(path, name, obj, states[name])
        info = RestoreInfo(path, step, user_metadata, tuple(self._objects), tuple(unexpected),
                           manager if isinstance(manager, dict) else {})
        return {"states": states, "rng": rng, "info": info}

    def _apply(self, path: str, plan: dict, map_location=None) -> None:
        # All snapshots first: loading one object may touch another (a user object holding a
        # reference to the model), and the rollback must return to the state before restore.
        # A sharded object (ZeRO) snapshots its own shard: loading that back restores it.
        own = all(map(_loads_as_minidl_does, self._objects.values()))
        assigned = self._assignable_modules(plan["states"]) if own else set()
        snapshots = {name: _snapshot(obj, uncopied=name in assigned or
                                     (own and isinstance(obj, Optimizer)))
                     for name, obj in self._objects.items()}
        rng_before = md_random.get_rng_state()
        placements = self._move_modules(map_location) if map_location is not None else []
        loaded = []
        try:
            for name, obj in self._objects.items():
                loaded.append(name)
                if name in assigned:
                    obj.load_state_dict(plan["states"][name], assign=True)
                else:
                    obj.load_state_dict(plan["states"][name])
            md_random.set_rng_state(plan["rng"])
        except BaseException as exc:
            # BaseException: a Ctrl-C in the middle of a restore must not leave half the
            # objects at the file's state and half at the old one either.
            _put_back(placements)  # modules moved by map_location go back where they were
            problems = self._roll_back(loaded, snapshots)
            md_random.set_rng_state(rng_before)
            note = (f"rolling back also failed for {', '.join(problems)}: "
                    "those objects are in neither state" if problems else "")
            if not isinstance(exc, Exception):
                # KeyboardInterrupt, SystemExit: rolled back, and passed on as they are; a
                # rollback that failed is told in the traceback, never swallowed.
                if note:
                    exc.add_note(f"{path}: restore interrupted; {note}")
                raise
            raise StateMismatchError(
                path, f"object {loaded[-1]!r} refused its saved state ({type(exc).__name__}: "
                      f"{exc}); nothing was restored{'; ' + note if note else ''}") from exc

    # Memory: the file's arrays, a rollback snapshot and the state copied in would be three
    # copies of the state at once. Two of them are avoidable when every tracked object loads
    # with minidl's own code (none of which writes into another's arrays): a module takes
    # the arrays just read from the file as its storage (``assign=True``: they are private to
    # this restore), and an optimizer builds new slot arrays; either way the arrays held before
    # are never written, so they are the snapshot as they are, uncopied.

    def _assignable_modules(self, states: dict) -> set:
        """Tracked modules that can take the file's arrays as their own storage."""
        assignable = set()
        for name, obj in self._objects.items():
            if isinstance(obj, Module):
                try:
                    obj.check_state_dict(states[name], assign=True)
                except (StateDictMismatchError, TypeError, ValueError):
                    continue  # a dtype to convert: copied in, as load_state_dict does
                assignable.add(name)
        return assignable

    def _move_modules(self, map_location) -> list:
        """Move the tracked modules' tensors where ``map_location`` sends them (every target is
        decided before anything moves); returns (tensor, device it was on) pairs."""
        moves = []
        for obj in self._objects.values():
            if isinstance(obj, Module):
                tensors = [t for module in obj.modules()
                           for table in (module._parameters, module._buffers)
                           for t in table.values() if t is not None]
                moves.append((obj, [(t, t.device, mapped_device(map_location, t, t.device))
                                    for t in tensors]))
        placements = []
        for obj, targets in moves:
            placements.extend((t, before) for t, before, _ in targets)
            where = {target for _, _, target in targets}
            if len(where) == 1:
                obj.to(where.pop())  # as the module moves itself (gradients included)
            else:  # the module is split across devices: each tensor goes its own way
                _move_tensors([(t, target) for t, _, target in targets])
        return placements

    def _roll_back(self, names: list[str], snapshots: dict) -> list[str]:
        """Load each snapshot back; returns ``"name (why)"`` for each object that refused."""
        failed = []
        for name in reversed(names):
            try:
                self._objects[name].load_state_dict(snapshots[name])
            except BaseException as exc:  # noqa: BLE001 - reported; the rest still roll back
                failed.append(f"{name} ({type(exc).__name__}: {exc})")
        return failed


def _loads_as_minidl_does(obj) -> bool:
    """Whether loading ``obj`` runs only minidl's code: a module or optimizer of any class
    that keeps their ``load_state_dict``, or an object of minidl's own (a scheduler, a data
    reader). A user's own ``load_state_dict`` may touch other objects' arrays."""
    for base in (Module, Optimizer):
        if isinstance(obj, base):
            return type(obj).load_state_dict is base.load_state_dict
    return type(obj).__module__.startswith("minidl.")


def _snapshot(obj, uncopied: bool):
    """What a rollback loads back into ``obj``: its state, copied unless loading never writes
    into the arrays it holds now (see ``Checkpoint._assignable_modules``)."""
    if sharded.is_sharded(obj):
        return copy_state(obj.sharded_state_dict())
    return obj.state_dict() if uncopied else copy_state(obj.state_dict())


def check_step(name: str, value) -> int:
    """A training step as an int, ``0 <= step <= naming.MAX_STEP``, or ValueError naming it."""
    check_number(name, value, low=0, high=naming.MAX_STEP, integer=True)
    return int(value)


def _put_back(placements: list) -> None:
    """Return tensors moved by a failed restore to the devices they were on."""
    _move_tensors(placements)


def _move_tensors(placements: list) -> None:
    """Put each tensor of the (tensor, device) pairs on its device, in place."""
    for tensor, device in placements:
        if tensor.device != device:
            moved = tensor.detach().to(device)
            tensor.data, tensor.device = moved.data, moved.device


def _check_module_state(path: str, name: str, module: Module, state) -> None:
    """``Module.check_state_dict``, with its refusal reported as a mismatch with the file."""
    try:
        module.check_state_dict(state)
    except (StateDictMismatchError, TypeError) as exc:
        raise StateMismatchError(path, f"module {name!r} does not match the saved state: "
                                       f"{exc}") from None
