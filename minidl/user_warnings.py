"""Warnings that point at the user's line.

A warning raised deep inside ``fit`` (a checkpoint skipped while resuming, changed
hyper-parameters) is about the user's call, so Python should show the user's file and line,
not the minidl module that noticed. A fixed ``stacklevel`` breaks as soon as the call path
changes (``md.fit`` or ``Trainer.run``, a manager used directly or through ``fit``); counting
the frames up to the first one outside the package does not.
"""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the nearest caller outside minidl."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    # +1: the level counts from this function's caller, as warnings.warn's own frame is ours.
    warnings.warn(message, category, stacklevel=level + 1)
