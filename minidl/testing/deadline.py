"""Calling something that might block for ever (a reader opening a FIFO), with a deadline.

    error = outcome_within(lambda: import_model(path), seconds=20, unblock=...)

The call runs in a daemon thread; if it has not returned when the deadline passes, ``unblock``
(if given) is called to let it go -- open the FIFO's other end, say -- and ``BlockedError`` is
raised, so a test fails instead of hanging the suite.
"""

from __future__ import annotations

import threading


class BlockedError(AssertionError):
    """The call was still running at its deadline."""


def outcome_within(call, seconds: float = 20, unblock=None):
    """The exception ``call()`` raised, or None once it returned; BlockedError if it is still
    running after ``seconds``."""
    outcome = {}

    def run():
        try:
            call()
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            outcome["error"] = error
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if unblock is not None:
            unblock()
        raise BlockedError(f"still blocked after {seconds} s")
    return outcome.get("error")


__all__ = ["outcome_within", "BlockedError"]
