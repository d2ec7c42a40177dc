"""Checkpoint file names: what they say, and how to read them back.

A name carries the run's prefix, where training stood, and the global step, zero-padded so
that names sort in training order::

    cnn-step00000120.mdl                        no data reader tracked: the step only
    cnn-epoch0003-step00000120.mdl              the tracked reader's last batch was in epoch 3
    cnn-epoch0004-batch00013-step00000133.mdl   from ``fit``: batch 13 of epoch 4
    cnn_2-step00000050.mdl                      a second run (MindSpore's "_N")

Epochs count from 1 everywhere: the epoch a name carries is the one the last trained batch
belongs to (0 before the first batch). Whoever knows the batch within the epoch -- ``fit`` --
passes it too, and the name says exactly where training stood.  A directory may hold several runs of one prefix:
``prefix``, ``prefix_2``, ``prefix_3``, ...; a resuming run continues the newest (highest
number) and a new run takes the next free number.

The manager learns everything it needs by listing the directory and parsing these names,
so there is no separate index file that a crash could leave out of date.  Files written by
an interrupted save never match: ``write_atomically`` writes to a hidden temporary name
(``.<final name>.<random>.tmp``) and only a completed write is renamed to its final name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..io.atomic import final_name_of_temp

EXTENSION = ".mdl"
STEP_DIGITS = 8
EPOCH_DIGITS = 4
BATCH_DIGITS = 5


@dataclass(frozen=True)
class CheckpointName:
    """A parsed checkpoint file name."""

    prefix: str
    step: int
    epoch: int | None
    batch: int | None = None


def check_prefix(prefix: str) -> str:
    """A prefix must be a plain file-name part (no separators, not hidden)."""
    if (not isinstance(prefix, str) or not prefix or prefix.startswith(".")
            or os.sep in prefix or "/" in prefix or (os.altsep and os.altsep in prefix)):
        raise ValueError(f"prefix must be a non-empty file name part, got {prefix!r}")
    return prefix


def file_name(prefix: str, step: int, epoch: int | None = None,
              batch: int | None = None) -> str:
    """The name of the checkpoint for ``step`` (and ``epoch``, and the ``batch`` within that
    epoch, when known)."""
    if batch is not None and epoch is None:
        raise ValueError("file_name: a batch number needs its epoch")
    epoch_part = f"-epoch{epoch:0{EPOCH_DIGITS}d}" if epoch is not None else ""
    batch_part = f"-batch{batch:0{BATCH_DIGITS}d}" if batch is not None else ""
    return f"{prefix}{epoch_part}{batch_part}-step{step:0{STEP_DIGITS}d}{EXTENSION}"


# Steps (and epochs, batches) are below 2**63, as a 64-bit signed counter holds them.
MAX_STEP = 2**63 - 1

# [0-9], not \d: \d also matches the digits of other scripts, which int() accepts. At most
# 19 digits (enough for MAX_STEP): int() refuses strings of thousands of digits, and a name
# with more is no checkpoint of ours anyway.
_NUMBER = r"([0-9]{1,19})"
_POSITION = rf"(?:-epoch{_NUMBER}(?:-batch{_NUMBER})?)?-step{_NUMBER}"


def _pattern(prefix: str) -> re.Pattern:
    return re.compile(re.escape(prefix) + _POSITION + re.escape(EXTENSION))


def parse_name(prefix: str, name: str) -> CheckpointName | None:
    """Where ``name`` says training stood, if it is a checkpoint of exactly this prefix, else
    None."""
    match = _pattern(prefix).fullmatch(name)
    if match is None:
        return None
    epoch, batch, step = match.groups()
    if any(number is not None and int(number) > MAX_STEP for number in (epoch, batch, step)):
        return None
    return CheckpointName(prefix, int(step), None if epoch is None else int(epoch),
                          None if batch is None else int(batch))


def is_leftover_temp(prefix: str, name: str) -> bool:
    """Whether ``name`` is the temporary file of an interrupted save of this prefix."""
    final = final_name_of_temp(name)
    return final is not None and parse_name(prefix, final) is not None


def run_prefixes(prefix: str, names) -> set[str]:
    """Every run prefix (``prefix``, ``prefix_2``, ...) that has a checkpoint among ``names``."""
    pattern = re.compile(re.escape(prefix) + r"(_[0-9]+)?" + _POSITION + re.escape(EXTENSION))
    found = set()
    for name in names:
        match = pattern.fullmatch(name)
        if match:
            found.add(prefix + (match.group(1) or ""))
    return found


def _run_number(prefix: str, run_prefix: str) -> int:
    return 1 if run_prefix == prefix else int(run_prefix[len(prefix) + 1:])


def newest_run_prefix(prefix: str, names) -> str:
    """The prefix of the newest run (highest ``_N``) that has a checkpoint among ``names``;
    ``prefix`` itself when there is none. This is the run a resuming run continues."""
    used = run_prefixes(prefix, names)
    return max(used, key=lambda p: _run_number(prefix, p)) if used else prefix


def fresh_prefix(prefix: str, names) -> str:
    """``prefix`` when no checkpoint uses it, else ``prefix_N`` with N one past the highest
    in use (N >= 2), so run numbers keep increasing."""
    used = run_prefixes(prefix, names)
    if prefix not in used:
        return prefix
    return f"{prefix}_{max(_run_number(prefix, p) for p in used) + 1}"
