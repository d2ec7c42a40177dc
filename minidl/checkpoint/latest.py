"""``latest_checkpoint(directory)``: the file a user means by "the newest checkpoint there".

A directory may hold the checkpoints of several runs (``ckpt``, ``ckpt_2``, ...) written by
``fit`` or a :class:`~minidl.checkpoint.CheckpointManager`, and the model or weight files of a
``ModelCheckpoint`` callback.  The newest is the one written last.  File times can tie (the
clock behind them is coarse), so ties go to the higher step in the name, then to the name.
"""

from __future__ import annotations

import os
import re

from . import naming

_STEP_IN_NAME = re.compile(r"-step(\d+)" + re.escape(naming.EXTENSION) + r"$")


def _step_in_name(name: str) -> int:
    match = _STEP_IN_NAME.search(name)
    return int(match.group(1)) if match else -1


def latest_checkpoint(directory, prefix: str | None = None) -> str | None:
    """Path of the newest checkpoint in ``directory``, or None when it holds none.

    Without ``prefix``: the most recently written ``.mdl`` file (training checkpoints and
    ``ModelCheckpoint`` files alike; hidden temporary files of unfinished saves never count).
    With ``prefix``: the highest-step checkpoint of that prefix's newest run -- the file
    ``fit`` and ``CheckpointManager`` would resume from.
    """
    directory = os.fspath(directory)
    try:
        names = [n for n in os.listdir(directory)
                 if n.endswith(naming.EXTENSION) and not n.startswith(".")]
    except FileNotFoundError:
        return None
    if prefix is not None:
        run = naming.newest_run_prefix(naming.check_prefix(prefix), names)
        ours = [(parsed.step, name) for name in names
                if (parsed := naming.parse_name(run, name)) is not None]
        return os.path.join(directory, max(ours)[1]) if ours else None
    candidates = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            if os.path.isfile(path):
                candidates.append((os.stat(path).st_mtime_ns, _step_in_name(name), name))
        except OSError:
            continue  # removed while we looked: not a candidate
    return os.path.join(directory, max(candidates)[2]) if candidates else None
