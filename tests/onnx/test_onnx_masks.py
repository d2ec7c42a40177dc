"""Masks and indices computed from the input (x > 0, argmax) are traced ops: the exported graph
computes them at run time, so it stays right at batch sizes other than the example's, and an
imported graph recomputes (and differentiates around) them too."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import minidl as md
from minidl import nn
from minidl.ops import elementwise as ew
from minidl.onnx import export_onnx, import_model

from onnx_checks import RTOL, export_and_compare, minidl_outputs, run_onnxruntime, validate

rng = np.random.default_rng(7)


def data(n, features=6):
    return rng.standard_normal((n, features)).astype(np.float32)


class LeakyByMask(nn.Module):
    """Leaky ReLU written as a where on a mask of the input, after a Linear."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        h = self.fc(x)
        return md.where(h > 0, h, h * 0.1)


class KeepTheWinner(nn.Module):
    """Each row's class index, and the scores with everything but the winner zeroed."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        scores = self.fc(x)
        winner = scores.argmax(axis=1, keepdims=True)
        one_hot = md.arange(4) == winner
        return scores.argmax(axis=-1), md.where(one_hot, scores, 0.0)


class EveryComparison(nn.Module):
    """All six comparisons, the logical ops, argmin and a flattened argmax, as float sums."""

    def forward(self, x):
        a, b = x > 0.2, x <= -0.3
        masks = [x >= 0.5, x < -0.5, a, b, x == x, x != 0.25,
                 ew.logical_and(a, x < 1.0), ew.logical_or(a, b),
                 ew.logical_not(a)]
        total = sum(md.where(m, x, 0.0) for m in masks)
        first_low = x.argmin(axis=1).to(dtype=np.float32)
        overall = x.argmax(keepdims=True).to(dtype=np.float32)  # index into the whole batch
        return total + first_low.unsqueeze(1), overall


def op_types(nodes):
    return [n.op_type for n in nodes]


def test_leaky_relu_by_mask_runs_at_other_batch_sizes(tmp_path):
    model = LeakyByMask()
    path = export_and_compare(model, [data(2)], [[data(5)], [data(1)]], tmp_path)
    graph = validate(path).graph
    assert "Greater" in op_types(graph.node) and "Where" in op_types(graph.node)
    # No mask was frozen into the file: the only bool values are computed ones.
    assert all(init.data_type != TensorProto.BOOL for init in graph.initializer)


def test_argmax_and_a_mask_from_it_run_at_other_batch_sizes(tmp_path):
    model = KeepTheWinner()
    path = export_and_compare(model, [data(2)], [[data(5)], [data(1)]], tmp_path)
    ops = op_types(validate(path).graph.node)
    assert "ArgMax" in ops and "Equal" in ops
    indices, _ = run_onnxruntime(path, [data(3)])
    assert indices.dtype == np.int64 and indices.shape == (3,)


def test_every_comparison_and_logical_op(tmp_path):
    x = lambda n: np.round(data(n), 1)  # noqa: E731  (rounded: some elements equal 0.25 etc.)
    x2 = x(2)
    x2[0, 0] = 0.25
    export_and_compare(EveryComparison(), [x2], [[x(5)], [x(1)], [x2]], tmp_path)


def test_comparison_of_int_and_bool_tensors(tmp_path):
    class Mixed(nn.Module):
        def forward(self, x):
            counts = (x > 0).sum(axis=1, keepdims=True)  # int64
            positive = (x > 0) == 1  # bool against int64: the batch-carrying side is cast
            return md.where(md.tensor(True) <= counts, x, -x), positive

    path = export_and_compare(Mixed(), [data(2)], [[data(4)]], tmp_path)
    graph = validate(path).graph
    assert "Cast" in op_types(graph.node)  # ONNX compares one type with itself only
    assert graph.output[1].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.parametrize("model_class", [LeakyByMask, KeepTheWinner])
def test_exported_masks_import_back_and_agree(model_class, tmp_path):
    model = model_class()
    path = tmp_path / "m.onnx"
    export_onnx(model, path, md.tensor(data(2)))
    imported = import_model(path)
    for n in (5, 1):
        x = data(n)
        expected = minidl_outputs(model, [x])
        actual = imported(md.tensor(x))
        actual = actual if isinstance(actual, tuple) else (actual,)
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype
            np.testing.assert_allclose(a.numpy(), e, rtol=RTOL, atol=1e-6)


def test_gradient_flows_through_an_imported_where(tmp_path):
    model = LeakyByMask()
    path = tmp_path / "m.onnx"
    export_onnx(model, path, md.tensor(data(2)))
    imported = import_model(path)
    x = md.tensor(data(3), requires_grad=True)
    imported(x).sum().backward()

    h = minidl_outputs(model.fc, [x.numpy()])[0]
    slope = np.where(h > 0, 1.0, 0.1).astype(np.float32)
    expected = slope @ model.fc.weight.numpy()  # d(sum leaky(xWᵀ + b))/dx
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5, atol=1e-6)


def _save(tmp_path, nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "g.onnx"
    path.write_bytes(model.SerializeToString())
    validate(path)
    return path


def test_import_of_logic_and_argmax_as_other_exporters_write_them(tmp_path):
    # ArgMax's own defaults (axis 0, keepdims 1) and select_last_index; Not/And/Or on computed
    # masks; a Where whose condition the graph computes.
    f, b, i = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
    path = _save(tmp_path, [
        helper.make_node("Greater", ["x", "y"], ["gt"]),
        helper.make_node("LessOrEqual", ["x", "y"], ["le"]),
        helper.make_node("Equal", ["x", "y"], ["eq"]),
        helper.make_node("Or", ["gt", "eq"], ["ge"]),
        helper.make_node("Not", ["le"], ["not_le"]),
        helper.make_node("And", ["ge", "not_le"], ["strictly"]),
        helper.make_node("Less", ["x", "y"], ["lt"]),
        helper.make_node("GreaterOrEqual", ["x", "y"], ["ge2"]),
        helper.make_node("Where", ["strictly", "x", "y"], ["w"]),
        helper.make_node("ArgMax", ["x"], ["first_max"]),
        helper.make_node("ArgMax", ["x"], ["last_max"], axis=1, keepdims=0,
                         select_last_index=1),
        helper.make_node("ArgMin", ["x"], ["last_min"], axis=-1, select_last_index=1)],
        [helper.make_tensor_value_info("x", f, ["N", 4]),
         helper.make_tensor_value_info("y", f, ["N", 4])],
        [helper.make_tensor_value_info("w", f, ["N", 4]),
         helper.make_tensor_value_info("lt", b, ["N", 4]),
         helper.make_tensor_value_info("ge2", b, ["N", 4]),
         helper.make_tensor_value_info("first_max", i, [1, 4]),
         helper.make_tensor_value_info("last_max", i, ["N"]),
         helper.make_tensor_value_info("last_min", i, ["N", 1])])
    x = np.array([[1, 3, 3, 0], [2, 2, 0, 0], [5, 1, 1, 5]], np.float32)
    y = np.array([[1, 2, 4, 0], [1, 2, 0, 1], [5, 0, 1, 6]], np.float32)
    expected = run_onnxruntime(path, [x, y])
    actual = import_model(path)(md.tensor(x), md.tensor(y))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_array_equal(a.numpy(), e)
