"""What an op costs in Python, counted rather than timed: the functions it enters.

A profiler's call events are the same on a quiet and a loaded machine, so a test can pin that an
op's path stays free of per-call imports, generator expressions and NumPy's Python-level helpers
without ever asserting a wall-clock bound.
"""

from __future__ import annotations

import gc
import sys


def _profiled(function, event_kind: str, describe) -> list:
    """``describe(frame, arg)`` of every profiler event of ``event_kind`` while ``function()``
    runs, in order."""
    events = []

    def profile(frame, event, arg):
        if event == event_kind:
            events.append(describe(frame, arg))

    # The garbage collector runs finalizers written in Python (llvmlite's objects' __del__,
    # weakref callbacks) on whichever thread allocates when it triggers: right after Numba
    # compiled a kernel, one such finalizer inside ``function`` would be counted as the op's
    # call. So the garbage is collected before, and none during.
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(previous)
        if collecting:
            gc.enable()
    return events


def python_calls(function) -> list:
    """(file name, function name) of every Python function entered while ``function()`` runs,
    in order (C functions such as ``np.add`` do not appear)."""
    return _profiled(function, "call", lambda frame, arg: (
        frame.f_code.co_filename.rsplit("/", 1)[-1], frame.f_code.co_name))


def package_calls(function, packages) -> list:
    """("package/file", function name) of every Python function of minidl's ``packages``
    (``"nn"``, ``"ops"``...) entered while ``function()`` runs, in order: the functions of one
    floor of the package, told apart from files of the same name on other floors."""
    def describe(frame, arg):
        path = frame.f_code.co_filename.replace("\\", "/")
        inside = path.rpartition("/minidl/")[2] if "/minidl/" in path else ""
        return inside, frame.f_code.co_name
    return [c for c in _profiled(function, "call", describe) if c[0].split("/")[0] in packages]


def generator_frames(calls) -> list:
    """The generator expressions and comprehensions among ``calls``: a frame each, per call."""
    return [c for c in calls if c[1] in ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")]


def c_calls(function) -> list:
    """The names of the C functions (``np.empty``, ``ndarray.reshape``, ``astype``...) called
    while ``function()`` runs, in order: what a primitive's glue allocates, copies or views."""
    calls = _profiled(function, "c_call", lambda frame, arg: getattr(arg, "__name__", repr(arg)))
    return [c for c in calls if c != "setprofile"]
