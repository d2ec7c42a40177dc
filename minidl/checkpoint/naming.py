"""Checkpoint file names: what they say, and how to read them back.

A name carries the run's prefix, the epoch (when the checkpoint tracks a data reader) and
the step, zero-padded so that names sort in training order::

    cnn-step00000120.mdl
    cnn-epoch0003-step00000120.mdl
    cnn_2-step00000050.mdl        # a second run told not to resume (MindSpore's "_N")

The manager learns everything it needs by listing the directory and parsing these names,
so there is no separate index file that a crash could leave out of date.  Files written by
an interrupted save never match: ``write_atomically`` writes to a hidden temporary name
(``.<final name>.<random>.tmp``) and only a completed write is renamed to its final name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from minidl.io.atomic import final_name_of_temp

EXTENSION = ".mdl"
STEP_DIGITS = 8
EPOCH_DIGITS = 4


@dataclass(frozen=True)
class CheckpointName:
    """A parsed checkpoint file name."""

    prefix: str
    step: int
    epoch: int | None


def check_prefix(prefix: str) -> str:
    """A prefix must be a plain file-name part (no separators, not hidden)."""
    if (not isinstance(prefix, str) or not prefix or prefix.startswith(".")
            or os.sep in prefix or "/" in prefix or (os.altsep and os.altsep in prefix)):
        raise ValueError(f"prefix must be a non-empty file name part, got {prefix!r}")
    return prefix


def file_name(prefix: str, step: int, epoch: int | None = None) -> str:
    """The name of the checkpoint for ``step`` (and ``epoch``, when known)."""
    epoch_part = f"-epoch{epoch:0{EPOCH_DIGITS}d}" if epoch is not None else ""
    return f"{prefix}{epoch_part}-step{step:0{STEP_DIGITS}d}{EXTENSION}"


def _pattern(prefix: str) -> re.Pattern:
    # [0-9], not \d: \d also matches the digits of other scripts, which int() accepts.
    return re.compile(re.escape(prefix) + r"(?:-epoch([0-9]+))?-step([0-9]+)"
                      + re.escape(EXTENSION))


def parse_name(prefix: str, name: str) -> CheckpointName | None:
    """The step and epoch in ``name`` if it is a checkpoint of exactly this prefix, else None."""
    match = _pattern(prefix).fullmatch(name)
    if match is None:
        return None
    epoch = int(match.group(1)) if match.group(1) is not None else None
    return CheckpointName(prefix, int(match.group(2)), epoch)


def is_leftover_temp(prefix: str, name: str) -> bool:
    """Whether ``name`` is the temporary file of an interrupted save of this prefix."""
    final = final_name_of_temp(name)
    return final is not None and parse_name(prefix, final) is not None


def run_prefixes(prefix: str, names) -> set[str]:
    """Every run prefix (``prefix``, ``prefix_2``, ...) that has a checkpoint among ``names``."""
    pattern = re.compile(re.escape(prefix) + r"(_[0-9]+)?(?:-epoch[0-9]+)?-step[0-9]+"
                         + re.escape(EXTENSION))
    found = set()
    for name in names:
        match = pattern.fullmatch(name)
        if match:
            found.add(prefix + (match.group(1) or ""))
    return found


def fresh_prefix(prefix: str, names) -> str:
    """``prefix`` when no checkpoint uses it, else ``prefix_N`` with N one past the highest
    in use (N >= 2), so run numbers keep increasing."""
    used = run_prefixes(prefix, names)
    if prefix not in used:
        return prefix
    numbers = [int(p[len(prefix) + 1:]) for p in used if p != prefix]
    return f"{prefix}_{max(numbers, default=1) + 1}"
