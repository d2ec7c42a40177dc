"""Helpers shared by the ONNX tests: export, validate with onnx, run with onnxruntime, compare."""

from __future__ import annotations

import numpy as np

import minidl as md
from minidl.onnx import export_onnx

RTOL, ATOL = 1e-5, 1e-6


def save_graph(tmp_path, nodes, inputs, outputs, initializers=(), opset=17, name="g.onnx",
               check=True):
    """Write a one-graph model built from onnx.helper parts; validate it unless ``check`` is
    False (for files that are meant to be malformed). Returns the path."""
    from onnx import helper, numpy_helper

    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              initializer=[numpy_helper.from_array(a, n)
                                           for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    if check:
        validate(path)
    return path


def info(name, shape, dtype=None):
    """A graph input/output declaration (float32 unless ``dtype`` says otherwise)."""
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT if dtype is None else dtype,
                                         shape)


def validate(path):
    """The checks every exported file must pass: the full checker and strict shape inference."""
    import onnx

    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return model


def run_onnxruntime(path, inputs):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def minidl_outputs(model, inputs):
    """The model's outputs as arrays, nested tuples flattened (as the exporter writes them)."""
    model.eval()
    with md.no_grad():
        out = model(*[md.tensor(x) for x in inputs])

    def flat(value):
        return [a for v in value for a in flat(v)] if isinstance(value, tuple) else [value.numpy()]
    return flat(out)


def export_and_compare(model, example, batches, tmp_path, name="model.onnx", **options):
    """Export ``model`` traced on ``example`` (list of arrays), validate the file, and check that
    onnxruntime matches minidl on each list of arrays in ``batches``. Returns the file path."""
    path = tmp_path / name
    examples = [md.tensor(x) for x in example]
    export_onnx(model, path, examples[0] if len(examples) == 1 else examples, **options)
    validate(path)
    for inputs in batches:
        expected = minidl_outputs(model, inputs)
        actual = run_onnxruntime(path, inputs)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.shape == e.shape
            np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL)
    return path
