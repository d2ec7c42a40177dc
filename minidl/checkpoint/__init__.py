"""Training checkpoints: save everything a run needs, resume bit-exact after any crash.

* :class:`Checkpoint` (``checkpoint.py``) — named stateful objects plus the global RNG,
  saved to and restored from one minidl file, restore all-or-nothing;
* :class:`CheckpointManager` (``manager.py``) — a directory of checkpoints: when to save,
  file names (``naming.py``), what to keep (``retention.py``), background saving
  (``async_writer.py``) and resuming from the newest sound file;
* :func:`latest_checkpoint` (``latest.py``) — the newest checkpoint file in a directory;
* data-parallel jobs (``data_parallel.py``: rank 0 writes, every rank restores) and sharded
  optimizer state (``sharded.py``: a shard per rank, an index that commits them, merge).
* ``formats.py`` — the kinds and format numbers a checkpoint file carries, named by both.

Everything here is built on :mod:`minidl.io` (the file format) and on the
``state_dict()``/``load_state_dict()`` protocol of modules, optimizers and readers.
"""

from .checkpoint import (
    Checkpoint, RestoreInfo, StagedCheckpoint, StateMismatchError)
from .latest import latest_checkpoint
from .manager import CheckpointManager
from .sharded import merge_checkpoint
from .retention import CheckpointRecord, RetentionPolicy

__all__ = ["Checkpoint", "CheckpointManager", "RestoreInfo", "StagedCheckpoint",
           "StateMismatchError", "RetentionPolicy", "CheckpointRecord", "latest_checkpoint",
           "merge_checkpoint"]
