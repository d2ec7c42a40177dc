"""Malformed or hostile graphs are refused at import with an error naming the node, before
anything is allocated; graph inputs with an initializer keep their default."""

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import minidl as md
from minidl.onnx import (UnsafeExternalDataError, UnsupportedOperatorError, export_onnx,
                         import_model)

from onnx_checks import info, save_graph



def write(tmp_path, *parts, **options):
    """Write a graph without validating it: these files are meant to be wrong."""
    return save_graph(tmp_path, *parts, check=False, **options)


def test_a_node_without_a_required_attribute_is_refused_naming_it(tmp_path):
    path = write(tmp_path, [helper.make_node("Concat", ["x", "x"], ["y"], name="join")],
                 [info("x", [2, 3])], [info("y", [4, 3])])
    with pytest.raises(ValueError, match=r"g\.onnx.*join.*axis"):
        import_model(path)


def test_a_node_without_a_required_input_is_refused_naming_it(tmp_path):
    path = write(tmp_path, [helper.make_node("Gemm", ["x"], ["y"], name="affine")],
                 [info("x", [2, 3])], [info("y", [2, 3])])
    with pytest.raises(ValueError, match="affine"):
        import_model(path)


def test_a_value_defined_twice_is_refused(tmp_path):
    path = write(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="first"),
                            helper.make_node("Neg", ["x"], ["y"], name="second")],
                 [info("x", [2])], [info("y", [2])])
    with pytest.raises(ValueError, match=r"'y'|\by\b"):
        import_model(path)


def test_a_value_read_before_it_is_defined_is_refused(tmp_path):
    path = write(tmp_path, [helper.make_node("Relu", ["nowhere"], ["y"], name="reader")],
                 [info("x", [2])], [info("y", [2])])
    with pytest.raises(ValueError, match="nowhere"):
        import_model(path)


def expand_graph(tmp_path, target):
    return write(tmp_path, [helper.make_node("Expand", ["x", "shape"], ["y"], name="grow")],
                 [info("x", [1])], [info("y", [f"d{i}" for i in range(len(target))])],
                 [("shape", np.array(target, np.int64))])


def test_an_absurd_constant_expand_is_refused_at_import(tmp_path):
    path = expand_graph(tmp_path, [1 << 20, 1 << 20])  # 2^40 floats: 4 TiB
    with pytest.raises(ValueError, match=r"Expand.*beyond the bound.*max_tensor_bytes"):
        import_model(path)


def test_the_bound_can_be_raised_and_lowered_by_the_user(tmp_path):
    path = expand_graph(tmp_path, [64, 64])
    with pytest.raises(ValueError, match="beyond the bound"):
        import_model(path, max_tensor_bytes=1000)
    module = import_model(path, max_tensor_bytes=64 * 64 * 4)
    assert module(np.ones(1, np.float32)).shape == (64, 64)


def test_an_absurd_size_computed_at_run_time_is_refused_before_allocation(tmp_path):
    # The target comes from the input's values, so only the forward pass can see it.
    path = write(tmp_path, [helper.make_node("Expand", ["x", "shape"], ["y"], name="grow")],
                 [info("x", [1]), info("shape", [2], TensorProto.INT64)], [info("y", ["a", "b"])])
    module = import_model(path)
    with pytest.raises(ValueError, match=r"Expand.*beyond the bound"):
        module(np.ones(1, np.float32), np.array([1 << 30, 1 << 30], np.int64))


def test_an_initializer_that_is_also_an_input_is_an_input_with_a_default(tmp_path):
    path = write(tmp_path, [helper.make_node("Mul", ["x", "scale"], ["y"])],
                 [info("x", [3]), info("scale", [3])], [info("y", [3])],
                 [("scale", np.array([1, 2, 3], np.float32))])
    module = import_model(path)
    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(module(x).numpy(), [1, 2, 3])
    np.testing.assert_array_equal(module(x, np.full(3, 5, np.float32)).numpy(), [5, 5, 5])
    with pytest.raises(TypeError, match="x"):
        module()


def test_an_opset_1_graph_is_converted(tmp_path):
    path = write(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [info("x", [2])],
                 [info("y", [2])], opset=1)
    np.testing.assert_array_equal(import_model(path)(np.array([-1, 2], np.float32)).numpy(),
                                  [0, 2])


def test_what_the_converter_cannot_convert_is_refused_naming_the_opset(tmp_path, monkeypatch):
    from onnx import version_converter

    def cannot(model, target):
        raise RuntimeError("adapter for Relu 5 -> 6 is missing")

    monkeypatch.setattr(version_converter, "convert_version", cannot)
    path = write(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [info("x", [2])],
                 [info("y", [2])], opset=5)
    with pytest.raises(UnsupportedOperatorError, match=r"opset 5 cannot be converted.*Relu 5"):
        import_model(path)


def test_external_data_through_a_hardlink_is_refused(tmp_path):
    model = md.nn.Sequential(md.nn.Linear(6, 32), md.nn.ReLU(), md.nn.Linear(32, 3))
    inside = tmp_path / "models"
    inside.mkdir()
    export_onnx(model, inside / "m.onnx", md.tensor(np.zeros((1, 6), np.float32)),
                external_data_threshold=256)
    assert import_model(inside / "m.onnx") is not None
    # A second name for the same bytes outside the folder: a hardlink escapes it silently.
    os.link(inside / "m.onnx.data", tmp_path / "secret")
    with pytest.raises(UnsafeExternalDataError, match="hard links"):
        import_model(inside / "m.onnx")


def test_an_imported_graph_with_new_kinds_of_nodes_saves_and_loads(tmp_path):
    path = save_graph(tmp_path, [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["fill"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("Add", ["x", "fill"], ["shifted"]),
        helper.make_node("TopK", ["shifted", "k"], ["top", "where"], axis=1),
        helper.make_node("Mul", ["top", "scale"], ["y"])],
        [info("x", ["N", 4]), info("scale", [2])],
        [info("y", ["N", 2]), info("where", ["N", 2], TensorProto.INT64)],
        [("k", np.array([2], np.int64)), ("scale", np.array([1, -1], np.float32))])
    module = import_model(path)
    md.save_model(module, tmp_path / "m.mdl")
    again = md.load_model(tmp_path / "m.mdl")
    x = np.array([[1, 4, 2, 3], [0, -1, 5, 2]], np.float32)
    for a, e in zip(again(x), module(x)):
        np.testing.assert_array_equal(a.numpy(), e.numpy())
    np.testing.assert_array_equal(again(x)[0].numpy(), [[4.5, -3.5], [5.5, -2.5]])
    np.testing.assert_array_equal(again(x)[1].numpy(), [[1, 3], [2, 3]])


def test_weights_listed_as_inputs_come_after_the_data_and_can_be_named(tmp_path):
    # Old exporters list every weight as a graph input, sometimes before the data.
    path = save_graph(tmp_path, [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
                      [info("w", [2, 3]), info("b", [2]), info("x", ["N", 3])],
                      [info("y", ["N", 2])],
                      [("w", np.ones((2, 3), np.float32)), ("b", np.zeros(2, np.float32))])
    module = import_model(path)
    assert module.input_names == ["x", "w", "b"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(module(x).numpy(), [[3, 3], [12, 12]])
    np.testing.assert_array_equal(module(x=x, b=np.ones(2, np.float32)).numpy(),
                                  [[4, 4], [13, 13]])
    with pytest.raises(TypeError, match="unexpected"):
        module(x, z=x)


def relu_graph(tmp_path, shape=(7, 3), dtype=None, opset=17, outputs=("y",)):
    return write(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [info("x", list(shape), dtype)],
                 [info(name, list(shape), dtype) for name in outputs], opset=opset)


def test_inputs_are_checked_against_the_declared_type_and_rank_at_call_time(tmp_path):
    """A graph declared float32[7,3] used to run on an int64[4] input."""
    module = import_model(relu_graph(tmp_path))
    with pytest.raises(TypeError, match=r"input 'x'.*float32.*int64"):
        module(np.arange(4))
    with pytest.raises(ValueError, match=r"input 'x'.*\[7, 3\].*\(4,\)"):
        module(np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"input 'x'.*\[7, 3\].*\(7, 4\)"):
        module(np.ones((7, 4), np.float32))
    assert module(np.ones((7, 3), np.float32)).shape == (7, 3)


def test_dynamic_dimensions_take_any_size(tmp_path):
    module = import_model(relu_graph(tmp_path, shape=("batch", 3)))
    for batch in (1, 5):
        assert module(np.ones((batch, 3), np.float32)).shape == (batch, 3)
    with pytest.raises(ValueError, match=r"input 'x'.*\['batch', 3\]"):
        module(np.ones((5, 3, 1), np.float32))


def test_the_declared_types_survive_a_save_and_load(tmp_path):
    module = import_model(relu_graph(tmp_path, shape=("n", 3)))
    md.save_model(module, tmp_path / "m.mdl")
    loaded = md.load_model(tmp_path / "m.mdl")
    with pytest.raises(TypeError, match="input 'x'"):
        loaded(np.ones((2, 3), np.float64))
    assert loaded(np.ones((2, 3), np.float32)).shape == (2, 3)


def test_an_opset_newer_than_the_onnx_package_knows_is_refused(tmp_path):
    import onnx

    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(UnsupportedOperatorError, match=f"opset 99.*{newest}"):
        import_model(relu_graph(tmp_path, opset=99))


def test_duplicate_graph_output_names_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"output 'y'.*twice"):
        import_model(relu_graph(tmp_path, outputs=("y", "y")))


def test_a_matrix_product_beyond_the_bound_is_refused_before_it_is_computed(tmp_path):
    """Expand + MatMul used to be bounded only by the operating system."""
    path = write(tmp_path, [helper.make_node("Expand", ["x", "rows"], ["column"]),
                            helper.make_node("Expand", ["x", "cols"], ["row"]),
                            helper.make_node("MatMul", ["column", "row"], ["y"], name="outer")],
                 [info("x", [1, 1])], [info("y", [3000, 3000])],
                 [("rows", np.array([3000, 1], np.int64)), ("cols", np.array([1, 3000], np.int64))])
    module = import_model(path, max_tensor_bytes=1 << 20)
    with pytest.raises(ValueError, match=r"MatMul.*\[3000, 3000\].*beyond the bound"):
        module(np.ones((1, 1), np.float32))
    assert import_model(path, max_tensor_bytes=36 << 20)(np.ones((1, 1), np.float32)).shape \
        == (3000, 3000)


@pytest.mark.parametrize("op_type", ["Add", "Mul", "Where"])
def test_a_broadcast_beyond_the_bound_is_refused_before_it_is_computed(tmp_path, op_type):
    inputs = ["c", "a", "b"] if op_type == "Where" else ["a", "b"]
    path = write(tmp_path, [helper.make_node(op_type, inputs, ["y"])],
                 [info("a", [2000, 1]), info("b", [1, 2000])]
                 + ([info("c", [1], TensorProto.BOOL)] if op_type == "Where" else []),
                 [info("y", [2000, 2000])])
    module = import_model(path, max_tensor_bytes=1 << 20)
    given = {"a": np.ones((2000, 1), np.float32), "b": np.ones((1, 2000), np.float32)}
    if op_type == "Where":
        given["c"] = np.ones(1, bool)
    with pytest.raises(ValueError, match=rf"{op_type}.*\[2000, 2000\].*beyond the bound"):
        module(**given)


def test_a_transposed_convolution_with_a_huge_stride_is_refused_before_it_is_computed(tmp_path):
    path = write(tmp_path, [helper.make_node("ConvTranspose", ["x", "w"], ["y"],
                                             strides=[1 << 20, 1 << 20])],
                 [info("x", [1, 1, 2, 2])], [info("y", [1, 1, "h", "w"])],
                 [("w", np.ones((1, 1, 1, 1), np.float32))])
    with pytest.raises(ValueError, match=r"ConvTranspose.*beyond the bound"):
        import_model(path)(np.ones((1, 1, 2, 2), np.float32))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_named_like_a_model_is_refused_without_blocking(tmp_path):
    from minidl.testing.deadline import outcome_within

    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    error = outcome_within(lambda: import_model(fifo),
                           unblock=lambda: os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)))
    assert isinstance(error, ValueError) and "not a regular file" in str(error)
