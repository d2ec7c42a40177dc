"""What an op costs in Python, counted rather than timed: the functions it enters.

A profiler's call events are the same on a quiet and a loaded machine, so a test can pin that an
op's path stays free of per-call imports, generator expressions and NumPy's Python-level helpers
without ever asserting a wall-clock bound.
"""

from __future__ import annotations

import sys


def python_calls(function) -> list:
    """(file name, function name) of every Python function entered while ``function()`` runs,
    in order (C functions such as ``np.add`` do not appear)."""
    calls = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append((frame.f_code.co_filename.rsplit("/", 1)[-1], frame.f_code.co_name))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(previous)
    return calls


def generator_frames(calls) -> list:
    """The generator expressions and comprehensions among ``calls``: a frame each, per call."""
    return [c for c in calls if c[1] in ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")]


def c_calls(function) -> list:
    """The names of the C functions (``np.empty``, ``ndarray.reshape``, ``astype``...) called
    while ``function()`` runs, in order: what a primitive's glue allocates, copies or views."""
    calls = []

    def profile(frame, event, arg):
        if event == "c_call":
            calls.append(getattr(arg, "__name__", repr(arg)))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(previous)
    return [c for c in calls if c != "setprofile"]
