"""ONNX export and import.

* :func:`export_onnx` traces a minidl model on an example input and writes an ONNX file that
  onnxruntime (or any ONNX runtime) runs, at any batch size.
* :func:`import_model` reads an ONNX file into an :class:`OnnxGraphModule`: a minidl Module that
  interprets the graph with minidl ops, so it runs, differentiates and trains like any other
  model, and saves with ``minidl.save_model``.

The ``onnx`` package is imported only when one of these functions runs: importing this package
(which ``import minidl`` does) costs nothing beyond registering the OnnxGraphModule layer type, so
that saved imported models load in a fresh process.
"""

from __future__ import annotations

from .errors import UnsafeExternalDataError, UnsupportedOperatorError
from .graph_module import OnnxGraphModule

__all__ = ["export_onnx", "import_model", "OnnxGraphModule", "UnsupportedOperatorError",
           "UnsafeExternalDataError"]


def export_onnx(model, path, example_input, opset=None, dynamic_batch=True, input_names=None,
                output_names=None, external_data_threshold=None, batch_axis=None):
    """Write ``model`` as ONNX, traced on ``example_input`` (see :func:`.export.export_onnx`)."""
    from .export import export_onnx as export

    return export(model, path, example_input, opset=opset, dynamic_batch=dynamic_batch,
                  input_names=input_names, output_names=output_names,
                  external_data_threshold=external_data_threshold, batch_axis=batch_axis)


def import_model(path, max_tensor_bytes=None):
    """Read the ONNX file at ``path`` into a minidl Module (see :func:`.importer.import_model`).

    ``max_tensor_bytes`` bounds any tensor a size read from the file or computed from the
    input may create (default 4 GiB)."""
    from .importer import import_model as load
    from .registry import DEFAULT_MAX_TENSOR_BYTES

    return load(path, DEFAULT_MAX_TENSOR_BYTES if max_tensor_bytes is None else max_tensor_bytes)
