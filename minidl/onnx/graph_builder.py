"""GraphBuilder: the ONNX graph an export accumulates while the forward pass runs.

It remembers which ONNX value each traced Tensor became (by object identity, keeping the tensors
alive so an id is never reused), turns tensors it has never seen into initializers (constants:
weights, or scalars like the 2 in ``x * 2``), and tracks for every value which axis, if any, is
the batch axis. That last part is what lets an export traced at batch size 1 run at any batch
size: shapes written into the graph (Reshape targets, Expand shapes) say "whatever the batch is"
at that axis instead of the example's number.
"""

from __future__ import annotations

import re

import numpy as np

from .dtypes import onnx_code


class GraphBuilder:
    """Collects nodes and initializers; maps traced Tensors (and their arrays) to ONNX names."""

    def __init__(self, opset: int, state_names: dict | None = None):
        self.opset = opset
        self.nodes = []                 # onnx NodeProto, in execution order
        self.initializers = {}          # name -> NumPy array
        self.batch_axis = {}            # value name -> axis holding the batch, or None
        self.unsupported = set()        # names of ops met that have no ONNX mapping
        self.reduced_shapes = {}        # reduction output -> shape of what it reduced
        self.reduced_axes = {}          # reduction output -> the axes it reduced (() = all)
        self._name_of_tensor = {}       # id(Tensor) -> value name
        self._name_of_array = {}        # id(ndarray) -> value name (arrays passed as op attrs)
        self._alive = []                # keeps traced objects alive so their ids stay unique
        self._used_names = set()
        # id(parameter or buffer) -> its state_dict name, so weights keep their names.
        self._state_names = state_names or {}

    # -- names -------------------------------------------------------------------------------------

    def fresh_name(self, hint: str) -> str:
        """A value name not used yet, built from ``hint``."""
        base = re.sub(r"[^A-Za-z0-9_.:/-]", "_", hint) or "value"
        name, counter = base, 1
        while name in self._used_names:
            counter += 1
            name = f"{base}_{counter}"
        self._used_names.add(name)
        return name

    def bind(self, tensor, name: str, batch_axis) -> str:
        """Record that ``tensor`` is the ONNX value ``name`` (batch at ``batch_axis``)."""
        self._name_of_tensor[id(tensor)] = name
        self._name_of_array[id(tensor.data)] = name
        self._alive.append(tensor)
        self.batch_axis[name] = batch_axis
        return name

    def known(self, tensor) -> bool:
        return id(tensor) in self._name_of_tensor

    def name_of(self, tensor) -> str:
        """The ONNX value of a traced tensor; a tensor never seen before becomes an initializer."""
        name = self._name_of_tensor.get(id(tensor))
        if name is not None:
            return name
        hint = self._state_names.get(id(tensor)) or self._state_names.get(id(tensor.data))
        name = self.constant(tensor.numpy(), hint or "const")
        return self.bind(tensor, name, None)

    def name_of_array(self, array, hint: str = "const") -> str:
        """Like :meth:`name_of` for a raw array passed to an op as an attribute (an index
        array, batch norm's running statistics)."""
        name = self._name_of_array.get(id(array))
        if name is not None:
            return name
        hint = self._state_names.get(id(array)) or hint
        name = self.constant(np.asarray(array), hint)
        self._name_of_array[id(array)] = name
        self._alive.append(array)
        return name

    def constant(self, array, hint: str = "const") -> str:
        """A new initializer holding ``array``."""
        array = np.asarray(array)
        onnx_code(array.dtype)  # refuse dtypes ONNX cannot hold, with a clear message
        name = self.fresh_name(hint)
        # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
        self.initializers[name] = array if array.flags.c_contiguous else array.copy(order="C")
        self.batch_axis[name] = None
        return name

    def int64s(self, values, hint: str = "shape") -> str:
        """A 1-D int64 initializer (shapes, axes, slice bounds are int64 inputs in ONNX)."""
        return self.constant(np.asarray(list(values), dtype=np.int64).reshape(-1), hint)

    # -- nodes -------------------------------------------------------------------------------------

    def add_node(self, op_type: str, inputs, hint: str | None = None, outputs: int = 1,
                 **attributes) -> str | list:
        """Append a node; returns its output name (or names when ``outputs`` > 1)."""
        from onnx import helper

        names = [self.fresh_name(f"{hint or op_type.lower()}") for _ in range(outputs)]
        attributes = {k: v for k, v in attributes.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), names,
                                           name=self.fresh_name(f"node_{op_type}"), **attributes))
        for name in names:
            self.batch_axis.setdefault(name, None)
        return names[0] if outputs == 1 else names

    def emit(self, op_type: str, inputs, output, batch_axis, **attributes) -> str:
        """Append a node computing the traced tensor ``output`` and bind it."""
        name = self.add_node(op_type, inputs, hint=op_type.lower(), **attributes)
        return self.bind(output, name, batch_axis)

    def alias(self, output, name: str, batch_axis) -> str:
        """``output`` is the same value as ``name`` (an op that changed nothing)."""
        return self.bind(output, name, batch_axis)
