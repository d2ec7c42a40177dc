"""Input checks that run on the device and are reported at the next synchronisation.

A primitive that must raise on bad values (a class target outside [0, C)) can only see the
values on the device. Reading a verdict back at once would stop the host until every queued
kernel has run: one full stall per training step, which on a GPU costs more than the step's
small kernels themselves. So, as PyTorch's device-side asserts do, the kernel that uses the
values also checks them and records the first bad position in a device *slot*; the host reads
the slots only when it waits for the device anyway (a copy to the host, ``md.cuda.synchronize()``)
and raises the error there, before handing back any value.

The slots live in one small per-device buffer, set once to "nothing found" and written by a
kernel only on bad input, so an error-free step launches nothing and copies nothing for its
checks. A slot is taken per checked call; when every slot is taken (many calls without a
synchronisation) the pending checks are read at once, which is then the one wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import cuda

from .allocator import current_device
from .transfers import transfers

NOTHING_FOUND = np.iinfo(np.int64).max
"""A slot's value while its kernel found no bad input (kernels ``atomic.min`` a position in)."""
SLOTS = 64
"""Checks that may wait for one synchronisation."""


@dataclass
class PendingCheck:
    """A slot some kernel may write, and how to turn the position it wrote into an error."""

    slot: int
    report: Callable[[int], Exception]


_slots: dict = {}      # device index -> int64 device buffer of SLOTS slots
_pending: dict = {}    # device index -> list of PendingCheck, in launch order


def _device_index() -> int:
    return current_device()


def take_slot(report: Callable[[int], Exception]):
    """(the device buffer, the slot index) a checking kernel writes its first bad position to;
    ``report(position)`` makes the exception raised for it at the next synchronisation."""
    device = _device_index()
    if device not in _slots:  # once per device: the driver allocation and the one upload
        _slots[device] = cuda.to_device(np.full(SLOTS, NOTHING_FOUND, np.int64))
    if len(_pending.get(device, ())) >= min(SLOTS, _slots[device].size):
        raise_pending()  # every slot taken: this is the one wait
    pending = _pending.setdefault(device, [])
    slot = len(pending)
    pending.append(PendingCheck(slot, report))
    return _slots[device], slot


def report_bad_value(values, error_type, describe: Callable[[int], str]):
    """A ``report`` for :func:`take_slot`: ``error_type(describe(value))`` for the value at the
    position a kernel recorded, read back from the device array ``values`` when it is raised."""
    def report(position):
        # The error report's own read (a flag-like read, not a copy the program asked for).
        host = values.buffer.copy_to_host()[:values.size]
        transfers["checks"] += 1
        return error_type(describe(int(host.reshape(-1)[position])))
    return report


def raise_pending() -> None:
    """Read the pending checks of the current device (one small copy, only when there are any)
    and raise the first error a kernel recorded, in the order the checks were launched."""
    device = _device_index()
    pending = _pending.get(device)
    if not pending:
        return
    _pending[device] = []
    transfers["deferred_checks"] += 1
    slots = _slots[device]
    found = slots.copy_to_host()
    bad = [check for check in pending if found[check.slot] != NOTHING_FOUND]
    if bad:
        slots.copy_to_device(np.full(slots.size, NOTHING_FOUND, np.int64))  # ready for the next
        raise bad[0].report(int(found[bad[0].slot]))


def pending_count() -> int:
    """How many checks on the current device wait for the next synchronisation."""
    return len(_pending.get(_device_index(), ()))
