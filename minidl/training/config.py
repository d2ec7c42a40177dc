"""``CheckpointConfig``: every checkpoint policy of ``fit`` in one object (CNTK's and MindSpore's
``CheckpointConfig``), passed as ``fit(..., checkpoint=CheckpointConfig("runs/digits", ...))``.

It holds the :class:`~minidl.checkpoint.CheckpointManager` policies (when to save, what to
keep, encryption, background writes) and what ``fit`` does with checkpoints already in the
directory (``restore``, ``restore_from``, ``on_change``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

RESTORE_CHOICES = ("auto", "must", False)
ON_CHANGE_CHOICES = ("warn", "error", "override")


# Suffixes of single model or checkpoint files (minidl's, CNTK's, ONNX, PyTorch's, Keras's):
# given one, a user meant a file, and a directory of that name would surprise them.
FILE_SUFFIXES = (".mdl", ".dnn", ".onnx", ".pt", ".pth", ".h5", ".keras", ".model")


def _check_directory(directory: str) -> None:
    """``directory`` must be able to be a directory, and must not look like a file name
    (CNTK users write ``CheckpointConfig("myModel.dnn")``)."""
    if os.path.isdir(directory):
        return
    if os.path.lexists(directory):
        raise ValueError(f"CheckpointConfig: {directory!r} is a file; give the directory the "
                         f"checkpoints go into (e.g. {os.path.dirname(directory) or '.'!r})")
    if directory.lower().endswith(FILE_SUFFIXES):
        raise ValueError(
            f"CheckpointConfig: {directory!r} looks like a file name, but CheckpointConfig "
            f"takes the directory its checkpoints go into (e.g. "
            f"{os.path.splitext(directory)[0]!r}, holding ckpt-...mdl files); to keep the "
            f"model as one file use ModelCheckpoint or md.save_model")


@dataclass
class CheckpointConfig:
    """Where and when ``fit`` checkpoints the whole training state, and how it resumes.

    When to save: ``save_every_steps`` (optimizer steps) or ``save_every_seconds`` (given
    both, the step policy wins and the clock is not consulted: MindSpore's rule); a final
    checkpoint is always written when training ends.  What to keep: the newest
    ``max_to_keep`` (None keeps all), one per ``keep_every_n_minutes`` forever, the
    ``keep_best`` best by ``monitor`` (``mode`` "min" or "max"; a metric of the epoch's logs,
    e.g. "val_loss").  ``key`` encrypts the files (AES-GCM, 16/24/32 bytes); ``metadata`` is
    stored in every file; ``async_save`` writes in the background while training goes on.

    Resuming, ``restore``:

    * ``"auto"`` (default): continue the newest run of ``prefix`` in ``directory`` if it has
      a checkpoint, else start one;
    * ``"must"``: the same, but no checkpoint to continue from is an error;
    * ``False``: start a new run.  When the directory already holds runs of ``prefix``, the
      new one is named ``prefix_N`` (MindSpore's rule) and never reads, mixes with or removes
      their files; a resume later continues this newest run.

    ``restore_from`` restores that checkpoint file instead and continues as a new run (so the
    run the file came from is left as it was).  The new run's checkpoints record the file it
    started from, so the same script run again (after a crash, or when done) continues the
    newest run that started from that file, as ``"auto"`` would, instead of starting over.

    ``on_change``: what to do when the optimizer or scheduler hyper-parameters given to
    ``fit`` differ from those the checkpointed run was started with (a changed learning
    rate, say): ``"warn"`` continues with the checkpoint's values and warns, listing the
    differences; ``"override"`` restores, then applies the values given now (and says so);
    ``"error"`` refuses.  The same holds for the set of stateful callbacks (those whose
    ``state_dict()`` is not empty): each callback gets the state saved for it wherever it now
    stands in the list, callbacks without state may be added or removed freely, and a
    stateful callback added or removed is warned about (its state starts afresh or is
    dropped), accepted quietly, or refused.  A different model (parameter shapes) or data (batch size, size of
    the data set) cannot be resumed and is always an error that lists what differs.
    """

    directory: str | os.PathLike
    prefix: str = "ckpt"
    save_every_steps: int | None = None
    save_every_seconds: float | None = None
    max_to_keep: int | None = 3
    keep_every_n_minutes: float | None = None
    monitor: str | None = None
    mode: str = "min"
    keep_best: int | None = None
    key: bytes | None = field(default=None, repr=False)
    metadata: dict | None = None
    async_save: bool = False
    restore: str | bool = "auto"
    restore_from: str | os.PathLike | None = None
    on_change: str = "warn"

    def __post_init__(self):
        self.directory = os.fspath(self.directory)
        _check_directory(self.directory)
        if self.restore is True:
            self.restore = "auto"
        if self.restore not in RESTORE_CHOICES:
            raise ValueError(f"CheckpointConfig: restore must be 'auto', 'must' or False, "
                             f"got {self.restore!r}")
        if self.on_change not in ON_CHANGE_CHOICES:
            raise ValueError(f"CheckpointConfig: on_change must be 'warn', 'error' or "
                             f"'override', got {self.on_change!r}")
        if self.metadata is not None and not isinstance(self.metadata, dict):
            raise TypeError(f"CheckpointConfig: metadata must be a dict, got "
                            f"{type(self.metadata).__name__}")
        reserved = {"fit", "model_spec"} & set(self.metadata or {})
        if reserved:
            raise ValueError(f"CheckpointConfig: metadata keys {sorted(reserved)} are fit's own")
        if self.restore_from is not None:
            self.restore_from = os.fspath(self.restore_from)
            if self.restore is False:
                raise ValueError("CheckpointConfig: restore_from= asks to restore, but "
                                 "restore=False asks not to")

    def build_manager(self, checkpoint, *, new_run: bool):
        """The :class:`CheckpointManager` these policies describe, over ``checkpoint``."""
        from ..checkpoint import CheckpointManager
        return CheckpointManager(
            checkpoint, self.directory, prefix=self.prefix, max_to_keep=self.max_to_keep,
            keep_every_n_minutes=self.keep_every_n_minutes,
            save_every_steps=self.save_every_steps, save_every_seconds=self.save_every_seconds,
            monitor=self.monitor, mode=self.mode, keep_best=self.keep_best,
            async_save=self.async_save, resume=not new_run, key=self.key)
