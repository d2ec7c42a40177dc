"""``CheckpointManager``: when to save, where, what to keep, and where to resume from.

The manager owns a directory of checkpoints of one run (one file name prefix):

* **when** — ``maybe_save(step)`` saves every ``save_every_steps`` steps or every
  ``save_every_seconds`` of the clock (given both, the steps decide, as in MindSpore);
  ``save(step)`` saves unconditionally;
* **where** — names that carry the step and epoch (see :mod:`minidl.checkpoint.naming`);
* **what to keep** — the policies of :mod:`minidl.checkpoint.retention`, applied after
  every committed save, so the directory never holds more than they allow;
* **resume** — ``restore_latest()`` loads the newest *sound* checkpoint: one that fails
  to read (damaged, truncated) is reported with a warning and the next older one is tried.

There is no index file: the directory listing and each file's header (step, the clock
time of the save, its metrics) are the truth, re-read when the manager starts, so a crash
at any moment cannot leave an index that disagrees with the files.  The hidden temporary
files of saves that were interrupted are never mistaken for checkpoints, and are removed
once their writer is gone (never while another process is still writing them).

With ``async_save=True`` the snapshot is taken in the caller's thread (so it is exactly
the state at ``step``) and written by a :class:`~minidl.checkpoint.async_writer.
BackgroundWriter` while training continues.  In data-parallel training every rank builds
the manager and calls ``save``/``maybe_save`` at the same steps: rank 0 writes, the others
wait for the committed path (see :mod:`minidl.checkpoint.data_parallel`), and every rank
restores the same file.
"""

from __future__ import annotations

import math
import os
import threading
import time

from .. import distributed as dist
from .. import user_warnings
from . import data_parallel, naming, sharded, task_claims
from .async_writer import BackgroundWriter
from .checkpoint import Checkpoint, RestoreInfo, StagedCheckpoint
from .retention import CheckpointRecord, RetentionPolicy
from ..io import CheckpointError, MissingFileError, read_header
from ..io.errors import printable
from ..io.atomic import temp_is_abandoned
from ..placement import check_map_location
from ..validation import check_non_negative_int, check_number


def _plain_metrics(metrics) -> dict:
    """Metrics as {str: float}: what the header stores and keep_best ranks by."""
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise TypeError(f"metrics must be a dict of numbers, got {type(metrics).__name__}")
    plain = {}
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise TypeError(f"metric names must be str, got {name!r}")
        item = getattr(value, "item", None)  # a Tensor or NumPy scalar
        plain[name] = float(item() if callable(item) else value)
    return plain


def _check_interval(name: str, value, integer: bool):
    """A save interval: None (no interval), a whole number of steps >= 1, or seconds > 0."""
    if value is None:
        return None
    if integer:
        return check_non_negative_int(name, value, minimum=1)
    check_number(name, value, low=0, low_open=True)
    return value


class CheckpointManager:
    """Saves a :class:`~minidl.checkpoint.Checkpoint` into ``directory`` on a schedule, keeps
    the files its policies ask for, and resumes from the newest sound one.

    ``resume=True`` (the default) continues the newest run of ``prefix`` in the directory
    (``prefix``, or the highest ``prefix_N``).  ``resume=False`` starts a new run beside
    existing ones: when the directory already has checkpoints with ``prefix``, this run
    writes under the next free ``prefix_N`` and never touches them.
    ``clock`` (seconds, like ``time.time``) may be replaced, e.g. by a fake one in tests.
    ``key`` encrypts the files (and is needed to read them). ``is_writer`` defaults to
    "this is rank 0" (always true outside data-parallel training).
    """

    def __init__(self, checkpoint: Checkpoint, directory, prefix: str = "ckpt",
                 max_to_keep: int | None = 5, keep_every_n_minutes: float | None = None,
                 save_every_steps: int | None = None, save_every_seconds: float | None = None,
                 monitor: str | None = None, mode: str = "min", keep_best: int | None = None,
                 async_save: bool = False, is_writer: bool | None = None, clock=time.time,
                 resume: bool = True, key: bytes | None = None):
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"CheckpointManager needs a Checkpoint, got {type(checkpoint).__name__}")
        self.checkpoint = checkpoint
        self.directory = os.fspath(directory)
        self.policy = RetentionPolicy(max_to_keep, keep_every_n_minutes, monitor, mode, keep_best)
        self.save_every_steps = _check_interval("save_every_steps", save_every_steps, True)
        self.save_every_seconds = _check_interval("save_every_seconds", save_every_seconds, False)
        self.is_writer = data_parallel.writer_rank(is_writer)
        self.clock = clock
        self.key = key
        self.last_restored: RestoreInfo | None = None
        self._lock = threading.Lock()  # guards _records against the background writer
        self._writer = BackgroundWriter() if async_save else None
        self._spare_tensors: dict | None = None  # buffers of the last written async snapshot
        self._said_missing = False  # whether a missing monitored metric was reported

        naming.check_prefix(prefix)
        names = self._list_directory()
        self.prefix = (naming.newest_run_prefix(prefix, names) if resume
                       else naming.fresh_prefix(prefix, names))
        if self.is_writer:
            os.makedirs(self.directory, exist_ok=True)
            task_claims.claim_directory(self.directory)  # no two lone tasks of one launch
            self._remove_leftovers(names)
        self._records = self._scan(names)
        self._last_saved_step = self._records[-1].step if self._records else 0
        self._last_save_time = self.clock()

    # -- what is on disk -------------------------------------------------------------------------

    def _list_directory(self) -> list[str]:
        try:
            return sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []

    def _remove_leftovers(self, names: list[str], up_to_step: int | None = None) -> None:
        """Remove what interrupted saves of this run left: their abandoned temporary files,
        and shards that no index names. With ``up_to_step`` (after a committed save of that
        step) only shards of steps up to it: a later save may be writing its shards now."""
        def is_ours(name: str) -> bool:
            parsed = naming.parse_name(self.prefix, name)
            return parsed is not None and (up_to_step is None or parsed.step <= up_to_step)

        leftover_shards = set(sharded.leftover_shards(names, is_ours))
        for name in names:
            # Only abandoned temporary files: one whose writer still runs is another
            # process's save in progress (a trainer beside this evaluator), never ours.
            abandoned = (naming.is_leftover_temp(self.prefix, name)
                         and temp_is_abandoned(self.directory, name))
            if abandoned or name in leftover_shards:
                try:
                    os.remove(os.path.join(self.directory, name))
                except OSError:
                    pass  # already gone, or not ours to remove: it is ignored either way

    def _scan(self, names: list[str]) -> list[CheckpointRecord]:
        records = []
        for name in names:
            parsed = naming.parse_name(self.prefix, name)
            if parsed is None:
                continue
            path = os.path.join(self.directory, name)
            record = CheckpointRecord(path, parsed.step, parsed.epoch, batch=parsed.batch)
            try:
                saved_by_manager = read_header(path, key=self.key).metadata.get("manager", {})
            except CheckpointError:
                saved_by_manager = {}  # unreadable: restore_latest will report and skip it
            if isinstance(saved_by_manager, dict):
                saved_time = saved_by_manager.get("time")
                if isinstance(saved_time, (int, float)) and not isinstance(saved_time, bool) \
                        and math.isfinite(saved_time):
                    record.time = float(saved_time)
                metrics = saved_by_manager.get("metrics")
                if isinstance(metrics, dict):
                    record.metrics = metrics
            records.append(record)
        records.sort(key=lambda r: (r.step, r.path))
        return records

    def _refresh(self) -> None:
        with self._lock:
            self._records = self._scan(self._list_directory())

    @property
    def checkpoints(self) -> list[str]:
        """Paths of the committed checkpoints of this run, oldest (lowest step) first."""
        with self._lock:
            return [r.path for r in self._records]

    @property
    def latest(self) -> str | None:
        """Path of the newest committed checkpoint, or None."""
        with self._lock:
            return self._records[-1].path if self._records else None

    @property
    def best(self) -> str | None:
        """Path of the best checkpoint by ``monitor`` and ``mode``, or None."""
        with self._lock:
            ranked = self.policy.ranked_best(self._records)
        return ranked[0].path if ranked else None

    # -- saving ----------------------------------------------------------------------------------

    def _raise_background_error(self) -> None:
        if self._writer is not None:
            self._writer.raise_pending()

    def maybe_save(self, step: int, metrics: dict | None = None, metadata: dict | None = None,
                   *, epoch: int | None = None, batch: int | None = None) -> str | None:
        """Save if ``save_every_steps`` steps, or else ``save_every_seconds`` seconds, have
        passed since the last save (given both, the step policy wins and the clock is not
        consulted: MindSpore's rule); returns the new checkpoint's path, or None.
        ``metadata``, ``epoch`` and ``batch`` are as for :meth:`save`."""
        self._raise_background_error()
        due_by_steps = (self.save_every_steps is not None
                        and step - self._last_saved_step >= self.save_every_steps)
        # Given both, the step policy wins and the clock is not consulted (MindSpore's rule):
        # saves land at multiples of save_every_steps, never shifted by a save the clock
        # asked for in between.
        due_by_time = (self.save_every_seconds is not None and self.save_every_steps is None
                       and self.clock() - self._last_save_time >= self.save_every_seconds)
        if self.save_every_seconds is not None and dist.get_world_size() > 1:
            due_by_time = dist.broadcast_object(due_by_time)  # rank 0's clock decides for all
        if not (due_by_steps or due_by_time) or step == self._last_saved_step:
            return None
        return self.save(step, metrics, metadata, epoch=epoch, batch=batch)

    def save(self, step: int, metrics: dict | None = None, metadata: dict | None = None, *,
             epoch: int | None = None, batch: int | None = None) -> str | None:
        """Save now; returns the path.

        The file name carries ``epoch`` and the ``batch`` within it when given (a training
        loop knows them, counted from 1), else the epoch of the tracked reader's last batch,
        counted from 1 the same way (:attr:`Checkpoint.epoch`).

        With ``async_save`` this returns once the state is snapshotted; the file is
        committed in the background (``wait()`` blocks until it is). In a data-parallel job
        every rank calls it: rank 0 writes, and every rank returns the committed path. A
        single-process manager with ``is_writer=False`` writes nothing and returns None.
        """
        self._raise_background_error()
        now = self.clock()
        metrics = _plain_metrics(metrics)
        rank_rng = data_parallel.gather_rank_rng()
        rank_states = data_parallel.gather_rank_local_states(self.checkpoint.objects)
        if epoch is None:
            epoch, batch = self.checkpoint.epoch, None
        shards = self._write_shards(step, epoch, batch)
        if not self.is_writer:
            self._last_saved_step, self._last_save_time = step, now
            return data_parallel.share_outcome(None, directory=self.directory)
        try:
            path = self._save_as_writer(step, now, metrics, metadata, epoch, batch,
                                        dict(rank_rng=rank_rng, shards=shards,
                                             rank_states=rank_states))
        except BaseException as exc:
            data_parallel.share_outcome(None, exc)
            raise
        return data_parallel.share_outcome(path)

    def _check_monitored(self, metrics: dict) -> None:
        """Say once when saves come with metrics but not the monitored one (``val_loss``
        without validation data, a typo): keep_best then has nothing to rank by."""
        monitor = self.policy.monitor
        if monitor is None or not metrics or monitor in metrics or self._said_missing:
            return
        self._said_missing = True
        hint = (" (val_ metrics need validation data)" if monitor.startswith("val_") else "")
        user_warnings.warn(f"CheckpointManager: monitor {monitor!r} is not among the metrics "
                           f"of the saves{hint}; they hold {sorted(metrics)}. keep_best keeps "
                           f"no checkpoint for it; the other policies apply.")

    def _write_shards(self, step: int, epoch: int | None, batch: int | None) -> dict | None:
        """Every rank writes its shard of sharded objects (ZeRO); None when there are none."""
        objects = {name: obj for name, obj in self.checkpoint.objects.items()
                   if sharded.is_sharded(obj)}
        if not objects or dist.get_world_size() == 1:
            return None
        name = naming.file_name(self.prefix, step, epoch, batch)
        return sharded.write_shards(os.path.join(self.directory, name), step, objects,
                                    key=self.key)

    def _save_as_writer(self, step, now, metrics, metadata, epoch, batch, gathered: dict) -> str:
        self._check_monitored(metrics)
        saved_by_manager = {"time": float(now), "metrics": metrics}
        if self._writer is None:
            # Training waits for a synchronous save: the live arrays are written as they are.
            staged = self.checkpoint.stage(step, metadata, saved_by_manager, copy=False,
                                           **gathered)
        else:
            # At most one write in flight: once the previous one is committed its snapshot
            # buffers are free, and this snapshot is copied into them.
            self._writer.wait()
            staged = self.checkpoint.stage(step, metadata, saved_by_manager,
                                           reuse=self._spare_tensors, **gathered)
            self._spare_tensors = None
        self._last_saved_step, self._last_save_time = step, now
        path = os.path.join(self.directory, naming.file_name(self.prefix, staged.step, epoch,
                                                             batch))
        record = CheckpointRecord(path, staged.step, epoch, float(now), metrics, batch=batch)
        if self._writer is None:
            self._write_and_commit(staged, record)
        else:
            self._writer.submit(lambda: self._write_and_commit(staged, record))
        return path

    def _write_and_commit(self, staged: StagedCheckpoint, record: CheckpointRecord) -> None:
        Checkpoint.write(record.path, staged, key=self.key)
        if self._writer is not None:
            self._spare_tensors = staged.tensors  # written: its buffers can hold the next one
        with self._lock:
            self._records = [r for r in self._records if r.path != record.path] + [record]
            self._records.sort(key=lambda r: (r.step, r.path))
            keep = self.policy.to_keep(self._records)
            # Forget a file before deleting it: if deletion is interrupted, the worst case is
            # a stale extra checkpoint that the next scan finds, never a record without a file.
            doomed = [r for r in self._records if r.path not in keep]
            self._records = [r for r in self._records if r.path in keep]
        for old in doomed:
            sharded.remove_checkpoint(old.path)
        # Shards of a save that failed before its index: the manager would otherwise find
        # them only when it next starts.
        self._remove_leftovers(self._list_directory(), up_to_step=record.step)

    def wait(self) -> None:
        """Block until every background save is committed; raise a background error."""
        if self._writer is not None:
            self._writer.wait()

    # -- restoring -------------------------------------------------------------------------------

    def restore_latest(self, strict: bool = True, *, map_location=None) -> int | None:
        """Restore the newest sound checkpoint; returns its step, or None when there is none.

        ``map_location`` (``"cpu"``, ``"cuda:0"``, a dict ``{"cuda:1": "cuda:0"}`` or a callable)
        is as for :meth:`Checkpoint.restore <minidl.checkpoint.Checkpoint.restore>`: the tracked
        modules (and with them the optimizer's state) end up where it sends them; by default
        every object keeps its own device.

        Any checkpoint that cannot be restored (damaged, truncated, of another kind, a wrong
        key, a state that does not fit the tracked objects) is skipped with a warning naming
        the file and why, and the next older one is tried.  A file that vanishes while it is
        read (another process's retention deleted it) makes the manager list the directory
        again.  Raises ``CheckpointError`` when checkpoints exist but none can be restored.
        """
        self.wait()
        return self._restore_on_every_rank(lambda records: list(reversed(records)), strict,
                                           "newest", map_location)

    def restore(self, path, strict: bool = True, *, map_location=None) -> int:
        """Restore the chosen checkpoint file ``path`` (of this run or any other); returns its
        step.  The save schedule counts from there, as after :meth:`restore_latest`;
        ``map_location`` is as there."""
        self.wait()
        info = self.checkpoint.restore(path, key=self.key, strict=strict,
                                       map_location=map_location)
        self.last_restored = info
        self._last_saved_step, self._last_save_time = info.step, self.clock()
        return info.step

    def restore_best(self, strict: bool = True, *, map_location=None) -> int | None:
        """Restore the best sound checkpoint by ``monitor``; returns its step, or None.
        ``map_location`` is as for :meth:`restore_latest`."""
        if self.policy.monitor is None:
            raise ValueError("restore_best needs the manager to have monitor=")
        self.wait()
        return self._restore_on_every_rank(self.policy.ranked_best, strict, "best", map_location)

    def _restore_on_every_rank(self, order, strict: bool, which: str,
                               map_location) -> int | None:
        try:
            # The device is checked before any file is read, and inside the try: a rank that
            # lacks it tells the others instead of leaving them waiting.
            map_location = check_map_location(map_location)
            step = self._restore_first_sound(order, strict, which, map_location)
        except BaseException as exc:
            data_parallel.check_same_step(self.directory, None, exc)
            raise
        data_parallel.check_same_step(self.directory, step)
        return step

    # A directory that another process keeps changing is listed again at most this often.
    _MAX_RELISTS = 20

    def _restore_first_sound(self, order, strict: bool, which: str,
                             map_location) -> int | None:
        failures: dict[str, CheckpointError] = {}
        for _ in range(self._MAX_RELISTS):
            self._refresh()
            with self._lock:
                candidates = order(self._records)
            if not candidates:
                break
            vanished = False
            for record in candidates:
                if record.path in failures:
                    continue  # already reported: an unchanged bad file stays bad
                try:
                    # The name is what the manager ranked the file by: a header that says
                    # another step is not the checkpoint the name promises.
                    info = self.checkpoint._restore(record.path, key=self.key, strict=strict,
                                                    map_location=map_location,
                                                    expected_step=record.step)
                except CheckpointError as exc:
                    if isinstance(exc, MissingFileError) and not os.path.lexists(record.path):
                        # Deleted under us, most likely by a writer's retention that has saved
                        # a newer file meanwhile: look at the directory again.
                        vanished = True
                        break
                    failures[record.path] = exc
                    user_warnings.warn(f"skipping unusable checkpoint {printable(exc)}; trying "
                                       f"an older one", RuntimeWarning)
                    continue
                self.last_restored = info
                self._last_saved_step, self._last_save_time = info.step, self.clock()
                return info.step
            if not vanished:
                break
        else:
            raise CheckpointError(self.directory, f"checkpoints '{self.prefix}-*' kept vanishing "
                                                  f"while being read ({self._MAX_RELISTS} tries)")
        if not failures:
            return None
        newest = next(iter(failures.values()))
        raise CheckpointError(self.directory, f"none of the {len(failures)} checkpoint(s) "
                                              f"'{self.prefix}-*' can be restored (the {which}: "
                                              f"{newest})") from newest

    def __repr__(self) -> str:
        return (f"CheckpointManager({self.directory!r}, prefix={self.prefix!r}, "
                f"{len(self.checkpoints)} checkpoint(s))")
