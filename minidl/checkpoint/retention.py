"""Which checkpoints to keep: three policies, and a file goes only when none of them keeps it.

* newest ``max_to_keep`` (None keeps every checkpoint, CNTK's ``preserve_all``);
* one per ``keep_every_n_minutes`` of the clock, kept forever (TensorFlow's
  ``keep_checkpoint_every_n_hours``, MindSpore's ``keep_checkpoint_per_n_minutes``);
* the ``keep_best`` best by a monitored metric (Keras' ``save_best_only``, Orbax's best-N).

The decision is a pure function of the records, so it can be recomputed from the files on
disk after a restart and give the same answer.  That holds for the time policy too: the
kept-forever checkpoints are found greedily from the oldest (keep it, then the first one at
least N minutes later, and so on).  Deleting only checkpoints that were not chosen never
changes which ones the greedy walk chooses, so a checkpoint kept forever stays kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..validation import check_non_negative_int


@dataclass
class CheckpointRecord:
    """What the manager knows about one committed checkpoint (from its name and header)."""

    path: str
    step: int
    epoch: int | None = None
    time: float | None = None           # the manager's clock when it was saved
    metrics: dict = field(default_factory=dict)
    batch: int | None = None            # the batch within ``epoch``, when the name says it


@dataclass(frozen=True)
class RetentionPolicy:
    """The three keep rules together; see the module docstring."""

    max_to_keep: int | None = 5
    keep_every_n_minutes: float | None = None
    monitor: str | None = None
    mode: str = "min"
    keep_best: int | None = None

    def __post_init__(self):
        if self.max_to_keep is not None:
            check_non_negative_int("max_to_keep", self.max_to_keep, minimum=1)
        if self.keep_every_n_minutes is not None and not self.keep_every_n_minutes > 0:
            raise ValueError(f"keep_every_n_minutes must be positive or None, "
                             f"got {self.keep_every_n_minutes!r}")
        if self.mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {self.mode!r}")
        if self.keep_best is not None:
            check_non_negative_int("keep_best", self.keep_best, minimum=1)
            if self.monitor is None:
                raise ValueError("keep_best needs monitor= (the metric to rank checkpoints by)")

    def metric_of(self, record: CheckpointRecord) -> float | None:
        """The monitored metric of a checkpoint, or None when it has no usable value."""
        if self.monitor is None:
            return None
        value = record.metrics.get(self.monitor)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return None
        return float(value)

    def ranked_best(self, records: list[CheckpointRecord]) -> list[CheckpointRecord]:
        """Checkpoints with the metric, best first (ties: the newer one first)."""
        scored = [(self.metric_of(r), r) for r in records]
        scored = [(m, r) for m, r in scored if m is not None]
        sign = 1.0 if self.mode == "min" else -1.0
        scored.sort(key=lambda mr: (sign * mr[0], -mr[1].step))
        return [r for _, r in scored]

    def kept_forever(self, records: list[CheckpointRecord]) -> list[CheckpointRecord]:
        """The one-per-N-minutes checkpoints (records ordered oldest first)."""
        if self.keep_every_n_minutes is None:
            return []
        interval = self.keep_every_n_minutes * 60.0
        chosen, anchor = [], None
        for record in records:
            if record.time is None:
                continue
            if anchor is None or record.time >= anchor + interval:
                chosen.append(record)
                anchor = record.time
        return chosen

    def to_keep(self, records: list[CheckpointRecord]) -> set[str]:
        """Paths of the checkpoints some policy keeps (records ordered oldest first)."""
        if self.max_to_keep is None:
            return {r.path for r in records}
        keep = {r.path for r in records[-self.max_to_keep:]}
        keep.update(r.path for r in self.kept_forever(records))
        if self.keep_best is not None:
            keep.update(r.path for r in self.ranked_best(records)[:self.keep_best])
        return keep
