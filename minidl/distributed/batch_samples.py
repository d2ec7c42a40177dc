"""How many samples this rank's batch of the current step holds, as its data reader said.

Data-parallel training averages the ranks' gradients. When every rank's batch has the same
B samples and each rank's loss is the mean over its batch, the plain average over the N ranks
is the gradient of the mean loss over all N*B samples: N ranks step like one process. The
last batch of an epoch breaks that: its S < N*B samples are split unevenly (some ranks one
sample more, some none), and the plain average would weight a sample on a lightly loaded
rank more than one on a full rank. Weighting rank r's gradient by its share n_r / B,

    g = sum_r (n_r / B) g_r / sum_r (n_r / B) = sum_r n_r g_r / sum_r n_r,

gives back the mean over the S samples, i.e. exactly what one process computes. For full
batches every weight is exactly 1.0, so the arithmetic (and the bits) are those of the plain
average.

A data-parallel reader (``DataReader`` and the readers built on it, with ``world_size > 1``)
records here the samples of each batch it hands out and the samples of a full batch;
``DistributedDataParallel`` takes that record when the next training forward runs. A batch
split into micro-batches is counted once; the batches read between two gradient averagings
(``no_sync`` accumulation over several batches) add up.
"""

from __future__ import annotations


class _Record:
    def __init__(self):
        self.serial = 0        # counts batches handed out, so a batch is taken only once
        self.samples = 0
        self.full_samples = 0


_latest = _Record()


def record_batch(samples: int, full_samples: int) -> None:
    """A data-parallel reader handed out a batch of ``samples`` samples of this rank, where a
    full batch holds ``full_samples``."""
    _latest.serial += 1
    _latest.samples, _latest.full_samples = int(samples), int(full_samples)


def latest_batch() -> tuple[int, int, int]:
    """``(serial, samples, full_samples)`` of the newest batch recorded (serial 0: none)."""
    return _latest.serial, _latest.samples, _latest.full_samples
