"""An op class says it is an autograd function, so a graph never prints a layer's name.

``grad_fn`` shows the op class's name: were the op behind ``nn.Conv2d`` also called ``Conv2d``,
``<Conv2d>`` would name the op and the layer alike.  Every op class (every ``Function``
subclass minidl defines) ends in ``Function`` and shares no name with an ``nn`` layer, also
up to case (``Relu`` beside ``nn.ReLU`` reads as the same thing).
"""

import importlib
import inspect
import pkgutil

import minidl as md
import minidl.ops
from minidl import nn
from minidl.autograd.function import Function


def op_classes() -> set[type]:
    """Every Function subclass defined in minidl, after importing each ops module."""
    for module in pkgutil.iter_modules(minidl.ops.__path__):
        importlib.import_module(f"minidl.ops.{module.name}")
    found, pending = set(), [Function]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass.__module__.startswith("minidl.") and subclass not in found:
                found.add(subclass)
                pending.append(subclass)
    return found


def layer_names() -> set[str]:
    return {name for name, value in vars(nn).items()
            if inspect.isclass(value) and issubclass(value, nn.Module)}


def test_every_op_class_is_named_as_an_autograd_function():
    ops = op_classes()
    assert len(ops) > 60  # the scan found the ops, not an empty set
    assert sorted(op.__name__ for op in ops if not op.__name__.endswith("Function")) == []


def test_no_op_class_shares_a_name_with_a_layer():
    layers = {name.lower() for name in layer_names()}
    assert {"conv2d", "layernorm", "linear", "relu"} <= layers
    assert sorted(op.__name__ for op in op_classes() if op.__name__.lower() in layers) == []


def test_grad_fn_tells_the_conv_op_from_the_conv_layer():
    layer = nn.Conv2d(1, 1, kernel_size=1)
    out = layer(md.ones((1, 1, 2, 2)))
    assert out.grad_fn.name != type(layer).__name__
    assert f"grad_fn=<{out.grad_fn.name}>" in repr(out)
