"""A hook for observers of the forward pass, such as the ONNX exporter.

While a tracer is active, every ``Function.apply`` and every ``Module.__call__`` reports to it.
A tracer is any object with two methods:

* ``on_module(module, args, kwargs, run)``: called instead of the module's forward; ``run()``
  runs it. A tracer that maps the whole layer to one node calls ``run`` inside
  :func:`suspended` (so the ops inside are not reported) and records the layer; otherwise it just
  returns ``run()`` and the inner ops report themselves.
* ``on_function(function_class, inputs, attrs, output)``: called after an op ran.

When no tracer is active (always, outside export) the cost is one global lookup per op.
"""

from __future__ import annotations

import contextlib

active = None  # the tracer currently observing, if any (module-global: tracing is single-threaded)


@contextlib.contextmanager
def tracing(tracer):
    """Report the forward passes run inside the block to ``tracer``."""
    global active
    previous, active = active, tracer
    try:
        yield tracer
    finally:
        active = previous


@contextlib.contextmanager
def suspended():
    """Run a block without reporting to the active tracer (e.g. inside a layer mapped whole)."""
    global active
    previous, active = active, None
    try:
        yield
    finally:
        active = previous
