"""The plain-NumPy reference backend.

Every primitive here is the obvious NumPy version: slow where a loop is unavoidable, but easy to
check by eye. The Numba backend extends this class, replacing the kernels that pay, and is tested
against it.

Each primitive is a function of the same name in one of the modules below (``add`` is
:func:`.array_ops.add`, ``im2col`` is :func:`.conv.im2col`); :func:`implemented_by` binds them
to the class, so the list of primitives is written once, in the contract, rather than a second
time here as one-line rebindings.
"""

import inspect

from .. import composed, plan_steps
from ..primitives import ALL_PRIMITIVES, Backend
from . import array_ops, conv, nn_kernels, optim_kernels, pool, random_kernels, rnn_kernels


def _composed_function(name):
    """The function that composes primitive ``name`` from the others: training's in
    :mod:`~minidl.backend.composed`, ``md.compile``'s plan steps in
    :mod:`~minidl.backend.plan_steps`; None if neither has it."""
    return getattr(composed, name, None) or getattr(plan_steps, name, None)


def implemented_by(*modules, composed_primitives=()):
    """Make the decorated backend class implement the contract with ``modules``' functions.

    Every primitive of the contract becomes ``staticmethod(module.<name>)`` of the one module
    that defines a function of that name (its other public functions, such as shared input
    checks, are left alone); each name in ``composed_primitives`` is bound instead to the
    :mod:`~minidl.backend.composed` (or :mod:`~minidl.backend.plan_steps`) function of that
    name, calling the class's own primitives.
    Checked when the class is made: ``TypeError`` naming every primitive no module defines,
    every one two modules define, and every composed name that is not a primitive or has no
    composed function.
    """
    def bind(backend_class):
        implementations = {}
        for module in modules:
            for name, function in vars(module).items():
                if name in ALL_PRIMITIVES and inspect.isfunction(function) \
                        and function.__module__ == module.__name__:
                    implementations.setdefault(name, []).append(module.__name__)
                    setattr(backend_class, name, staticmethod(function))
        problems = [f"{name} is not a primitive of the contract" if name not in ALL_PRIMITIVES
                    else f"minidl.backend.composed has no {name}"
                    for name in composed_primitives
                    if name not in ALL_PRIMITIVES or _composed_function(name) is None]
        for name in composed_primitives:
            implementations.setdefault(name, []).append("composed")
            setattr(backend_class, name,
                    composed.OfTheBackendClass(_composed_function(name), name))
        problems += [f"{name} is implemented by {' and '.join(places)}"
                     for name, places in implementations.items() if len(places) > 1]
        missing = [name for name in ALL_PRIMITIVES if name not in implementations]
        if missing:
            problems.append(f"no module implements {', '.join(missing)}")
        if problems:
            raise TypeError(f"{backend_class.__name__}: {'; '.join(problems)}")
        return backend_class
    return bind


# On the host a loop costs nothing a fused launch would save, and batch norm's running average
# is four NumPy passes either way: these three are composed of the other primitives. So are
# md.compile's plan steps: the op's own primitives, with no buffer of the step's own.
@implemented_by(array_ops, random_kernels, conv, pool, nn_kernels, rnn_kernels, optim_kernels,
                composed_primitives=("running_average_", "sgd_update_group",
                                     "adam_update_group", "plan_conv2d", "plan_max_pool2d",
                                     "plan_linear"))
class ReferenceBackend(Backend):
    """NumPy arrays on the host; every primitive of :class:`~minidl.backend.primitives.Backend`."""

    name = "numpy"
