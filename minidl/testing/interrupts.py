"""A Ctrl-C at any chosen bytecode, deterministically.

A real ``KeyboardInterrupt`` arrives between two bytecodes of whatever Python code runs when
the signal comes; a timer finds a fragile spot once in thousands of tries. Here the interrupt
is raised from a trace function (``sys.settrace`` with per-opcode events) just before the
``n``-th bytecode that runs in the chosen source files, so a test can walk ``n`` over every
bytecode of an operation and check what each interruption leaves behind::

    total = count_bytecodes(lambda: opt.load_state_dict(snapshot))
    for n in range(total):
        with pytest.raises(KeyboardInterrupt):
            call_interrupted(n, lambda: opt.load_state_dict(snapshot))
        ...  # the optimizer must still work

The count covers frames whose source file lies under one of ``roots`` (minidl's own package by
default), so the walk spends no time inside NumPy or the standard library. Tracing slows the
traced code a hundredfold: keep the walked operation small.
"""

from __future__ import annotations

import os
import sys

# minidl/ itself: this file is minidl/testing/interrupts.py (found by path, so that a helper for
# tests imports nothing from the floors above it).
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tracer(roots: tuple[str, ...], on_bytecode):
    def trace(frame, event, arg):
        if not frame.f_code.co_filename.startswith(roots):
            return None  # neither this frame's lines nor its opcodes are traced
        frame.f_trace_opcodes = True
        if event == "opcode":
            on_bytecode()
        return trace
    return trace


def _run_traced(tracer, operation):
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        return operation()
    finally:
        sys.settrace(previous)


def count_bytecodes(operation, roots=(PACKAGE_ROOT,)) -> int:
    """How many bytecodes of files under ``roots`` ``operation()`` runs."""
    count = [0]

    def on_bytecode():
        count[0] += 1
    _run_traced(_tracer(tuple(roots), on_bytecode), operation)
    return count[0]


def call_interrupted(n: int, operation, roots=(PACKAGE_ROOT,), exception=KeyboardInterrupt):
    """Call ``operation()`` with ``exception`` raised just before its ``n``-th bytecode (from
    0) in files under ``roots``; returns its result when it runs fewer bytecodes than that.

    Python stops tracing once a trace function raises, so exactly one interruption happens:
    the code that handles it (a rollback) runs untraced, as after a real Ctrl-C.
    """
    seen = [0]

    def on_bytecode():
        seen[0] += 1
        if seen[0] == n + 1:
            raise exception()
    return _run_traced(_tracer(tuple(roots), on_bytecode), operation)


__all__ = ["count_bytecodes", "call_interrupted", "PACKAGE_ROOT"]
