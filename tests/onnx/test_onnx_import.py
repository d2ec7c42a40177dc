"""Importing ONNX graphs written the way other exporters write them, and our own exports.

Each graph is built with onnx.helper, run by onnxruntime and by the imported minidl module,
and the two must agree within 1e-5 relative.
"""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import minidl as md
from minidl import nn, optim
from minidl.onnx import OnnxGraphModule, UnsupportedOperatorError, export_onnx, import_model

from onnx_checks import ATOL, RTOL, info, run_onnxruntime, save_graph

rng = np.random.default_rng(2)


def weight(*shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def agree(path, *inputs):
    """minidl's import computes what onnxruntime computes; returns the imported module."""
    module = import_model(path)
    expected = run_onnxruntime(path, inputs)
    actual = module(*[md.tensor(x) for x in inputs])
    actual = actual if isinstance(actual, tuple) else (actual,)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        np.testing.assert_allclose(a.numpy(), e, rtol=RTOL, atol=ATOL)
    return module


def test_gemm_as_pytorch_writes_linear(tmp_path):
    path = save_graph(tmp_path, [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], alpha=1.0, beta=1.0,
                         transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"], transB=1)],
        [info("x", ["N", 5])], [info("y", ["N", 3])],
        [("fc1.weight", weight(7, 5)), ("fc1.bias", weight(7)), ("fc2.weight", weight(3, 7)),
         ("fc2.bias", weight(3))])
    module = agree(path, rng.standard_normal((4, 5)).astype(np.float32))
    assert set(dict(module.named_parameters())) == {"fc1_weight", "fc1_bias", "fc2_weight",
                                                     "fc2_bias"}


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,bias_shape", [
    (0, 0, 1.0, 1.0, (3,)), (1, 0, 0.5, 2.0, (1, 3)), (1, 1, 1.0, 0.25, (4, 3)),
    (0, 1, 2.0, 1.0, None)])
def test_gemm_attributes(tmp_path, trans_a, trans_b, alpha, beta, bias_shape):
    a = weight(5, 4) if trans_a else weight(4, 5)
    b = weight(3, 5) if trans_b else weight(5, 3)
    inits = [("b", b)] + ([("c", weight(*bias_shape))] if bias_shape else [])
    path = save_graph(tmp_path, [helper.make_node(
        "Gemm", ["a", "b"] + (["c"] if bias_shape else []), ["y"], transA=trans_a,
        transB=trans_b, alpha=alpha, beta=beta)], [info("a", list(a.shape))],
        [info("y", [4, 3])], inits)
    agree(path, a)


def test_conv_batch_norm_pools(tmp_path):
    path = save_graph(tmp_path, [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
                         ["b"], epsilon=1e-3),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], ceil_mode=1),
        helper.make_node("Conv", ["p", "dw.w"], ["d"], kernel_shape=[3, 3], group=4,
                         dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("AveragePool", ["d"], ["a"], kernel_shape=[2, 2], strides=[1, 1]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"], axis=1)],
        [info("x", ["N", 3, 10, 10])], [info("y", ["N", 4])],
        [("conv.w", weight(4, 3, 3, 3)), ("conv.b", weight(4)), ("bn.scale", weight(4)),
         ("bn.bias", weight(4)), ("bn.mean", weight(4)),
         ("bn.var", rng.uniform(0.5, 2, 4).astype(np.float32)), ("dw.w", weight(4, 1, 3, 3))])
    module = agree(path, rng.standard_normal((2, 3, 10, 10)).astype(np.float32))
    params = dict(module.named_parameters())
    assert "bn_mean" not in params and "bn_var" not in params  # statistics are buffers
    assert "bn_scale" in params


def test_reshape_with_a_shape_initializer_and_a_dynamic_shape_chain(tmp_path):
    path = save_graph(tmp_path, [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
        # As PyTorch writes x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat.
        helper.make_node("Shape", ["t"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["t", "target"], ["flat"]),
        helper.make_node("Softmax", ["flat"], ["y1"], axis=-1),
        helper.make_node("LogSoftmax", ["flat"], ["y2"], axis=1)],
        [info("x", ["N", 12])], [info("y1", ["N", 12]), info("y2", ["N", 12])],
        [("shape", np.array([0, 3, 4], np.int64)), ("zero", np.array(0, np.int64)),
         ("axes0", np.array([0], np.int64)), ("minus_one", np.array([-1], np.int64))],
        opset=13)
    agree(path, rng.standard_normal((5, 12)).astype(np.float32))


def test_erf_gelu_with_constant_nodes(tmp_path):
    constant = lambda name, value: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32)))
    path = save_graph(tmp_path, [
        constant("sqrt2", math.sqrt(2.0)), constant("one", 1.0),
        helper.make_node("Constant", [], ["half"], value_float=0.5),
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"])],
        [info("x", ["N", 6])], [info("y", ["N", 6])])
    x = rng.standard_normal((4, 6)).astype(np.float32) * 3
    module = agree(path, x)
    assert list(module.parameters()) == []  # Constant nodes hold no weights
    exact = md.nn.functional.gelu(md.tensor(x)).numpy()
    np.testing.assert_allclose(module(md.tensor(x)).numpy(), exact, rtol=RTOL, atol=ATOL)


def test_transformer_pieces(tmp_path):
    path = save_graph(tmp_path, [
        helper.make_node("Gather", ["emb", "tokens"], ["e"], axis=0),
        helper.make_node("LayerNormalization", ["e", "ln.w", "ln.b"], ["n"], axis=-1,
                         epsilon=1e-5),
        helper.make_node("MatMul", ["n", "proj"], ["p"]),
        helper.make_node("Gelu", ["p"], ["g"]),
        helper.make_node("Dropout", ["g"], ["dr"]),
        helper.make_node("ReduceMean", ["dr", "axes1"], ["m"], keepdims=0),
        helper.make_node("Slice", ["m", "starts", "ends", "axes_s", "steps"], ["s"]),
        helper.make_node("Unsqueeze", ["s", "axes1"], ["u"]),
        helper.make_node("Squeeze", ["u", "axes1"], ["q"]),
        helper.make_node("Sigmoid", ["q"], ["sg"]),
        helper.make_node("Tanh", ["sg"], ["th"]),
        helper.make_node("Identity", ["th"], ["y"])],
        [info("tokens", ["N", 7], TensorProto.INT64)], [info("y", ["N", 3])],
        [("emb", weight(10, 8)), ("ln.w", weight(8)), ("ln.b", weight(8)),
         ("proj", weight(8, 6)), ("axes1", np.array([1], np.int64)),
         ("starts", np.array([5], np.int64)), ("ends", np.array([-100], np.int64)),
         ("axes_s", np.array([-1], np.int64)), ("steps", np.array([-2], np.int64))],
        opset=20)
    agree(path, rng.integers(0, 10, (3, 7)).astype(np.int64))


def test_elementwise_zoo(tmp_path):
    path = save_graph(tmp_path, [
        helper.make_node("Sub", ["x", "c"], ["a"]),
        helper.make_node("Pow", ["a", "two"], ["b"]),
        helper.make_node("Sqrt", ["b"], ["c1"]),
        helper.make_node("Add", ["c1", "one"], ["c2"]),
        helper.make_node("Log", ["c2"], ["d"]),
        helper.make_node("Exp", ["d"], ["e"]),
        helper.make_node("Neg", ["e"], ["f"]),
        helper.make_node("Abs", ["f"], ["g"]),
        helper.make_node("Max", ["g", "x", "c"], ["h"]),
        helper.make_node("Min", ["h", "three"], ["i"]),
        helper.make_node("Clip", ["i", "lo", ""], ["j"]),
        helper.make_node("Cast", ["j"], ["k"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["k"], ["l"], to=TensorProto.FLOAT),
        helper.make_node("Expand", ["l", "big"], ["m"]),
        helper.make_node("ReduceSum", ["m", "axes"], ["y"], keepdims=1)],
        [info("x", ["N", 4])], [info("y", [1, "N", 1])],
        [("c", weight(4)), ("two", np.array(2, np.float32)), ("one", np.array(1, np.float32)),
         ("three", np.array(3, np.float32)), ("lo", np.array(-0.5, np.float32)),
         ("big", np.array([2, 1, 4], np.int64)), ("axes", np.array([0, 2], np.int64))])
    agree(path, rng.standard_normal((3, 4)).astype(np.float32))


def test_where_and_concat(tmp_path):
    path = save_graph(tmp_path, [
        helper.make_node("Where", ["mask", "x", "zeros"], ["w"]),
        helper.make_node("Concat", ["w", "x"], ["y"], axis=1)],
        [info("x", ["N", 3])], [info("y", ["N", 6])],
        [("mask", np.array([True, False, True])), ("zeros", np.zeros(3, np.float32))])
    agree(path, rng.standard_normal((2, 3)).astype(np.float32))


def test_unsupported_operators_are_listed_together(tmp_path):
    path = save_graph(tmp_path, [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Det", ["a"], ["b"]),
        helper.make_node("MaxRoiPool", ["x", "rois"], ["c"], pooled_shape=[1, 1]),
        helper.make_node("Add", ["b", "b"], ["y"])],
        [info("x", [1, 1, 4, 4])], [info("y", [1, 1])],
        [("rois", np.zeros((1, 5), np.float32))])
    with pytest.raises(UnsupportedOperatorError) as caught:
        import_model(path)
    for name in ("Det", "MaxRoiPool"):
        assert name in str(caught.value)
    assert caught.value.operators == ["Det", "MaxRoiPool"]
    assert isinstance(caught.value, ValueError)


def test_garbage_is_a_value_error(tmp_path):
    (tmp_path / "junk.onnx").write_bytes(b"\x08\xff\xff\xff")
    with pytest.raises(ValueError, match="junk.onnx"):
        import_model(tmp_path / "junk.onnx")


# -- round trips, training, saving -------------------------------------------------------------

def cnn():
    md.manual_seed(3)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 10))
    model[1].running_var.data[...] = rng.uniform(0.5, 2, 4)
    return model.eval()


def test_round_trip_through_our_exporter(tmp_path):
    model = cnn()
    export_onnx(model, tmp_path / "m.onnx", md.tensor(np.zeros((1, 1, 8, 8), np.float32)))
    imported = md.load_model(tmp_path / "m.onnx")  # md.load_model dispatches .onnx files here
    assert isinstance(imported, OnnxGraphModule) and not imported.training
    x = rng.standard_normal((6, 1, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(imported(md.tensor(x)).numpy(), model(md.tensor(x)).numpy(),
                               rtol=RTOL, atol=ATOL)
    assert {"0_weight", "5_bias"} <= set(imported.state_dict())


def test_round_trip_with_two_inputs_and_outputs(tmp_path):
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.norm = nn.Embedding(9, 4), nn.LayerNorm(4)

        def forward(self, tokens, x):
            h = nn.functional.gelu(self.norm(self.embed(tokens))).mean(axis=1)
            return h + x, (h * x).sum(axis=1)

    md.manual_seed(4)
    model = Two()
    tokens = lambda n: rng.integers(0, 9, (n, 5)).astype(np.int64)  # noqa: E731
    x = lambda n: rng.standard_normal((n, 4)).astype(np.float32)  # noqa: E731
    export_onnx(model, tmp_path / "two.onnx", [md.tensor(tokens(1)), md.tensor(x(1))])
    imported = import_model(tmp_path / "two.onnx")
    t, v = tokens(3), x(3)
    for a, e in zip(imported(md.tensor(t), md.tensor(v)), model(md.tensor(t), md.tensor(v))):
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=RTOL, atol=ATOL)


def test_imported_model_trains(tmp_path):
    export_onnx(cnn(), tmp_path / "m.onnx", md.tensor(np.zeros((1, 1, 8, 8), np.float32)))
    model = import_model(tmp_path / "m.onnx")
    x = md.tensor(rng.standard_normal((16, 1, 8, 8)).astype(np.float32))
    y = md.tensor(rng.integers(0, 10, 16).astype(np.int64))
    opt = optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[1] < losses[0] and losses[2] < losses[1]
    assert all(p.grad is not None for p in model.parameters())


def test_erf_gradient_matches_its_formula():
    from minidl.ops.math_functions import erf
    x = md.tensor(np.linspace(-2, 2, 9), requires_grad=True)
    erf(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 / np.sqrt(np.pi) * np.exp(-x.numpy() ** 2),
                               rtol=1e-6)
    np.testing.assert_allclose(erf(x).numpy(), [math.erf(v) for v in x.numpy()], rtol=1e-6)


def test_save_model_and_load_model(tmp_path):
    export_onnx(cnn(), tmp_path / "m.onnx", md.tensor(np.zeros((1, 1, 8, 8), np.float32)))
    model = import_model(tmp_path / "m.onnx")
    md.save_model(model, tmp_path / "m.mdl")
    again = md.load_model(tmp_path / "m.mdl")
    assert isinstance(again, OnnxGraphModule)
    x = md.tensor(rng.standard_normal((2, 1, 8, 8)).astype(np.float32))
    np.testing.assert_array_equal(again(x).numpy(), model(x).numpy())
    config = again.get_config()
    assert {n["op_type"] for n in config["nodes"]} >= {"Conv", "Gemm", "Flatten"}


def test_loading_refuses_op_types_outside_the_table(tmp_path):
    export_onnx(cnn(), tmp_path / "m.onnx", md.tensor(np.zeros((1, 1, 8, 8), np.float32)))
    config = import_model(tmp_path / "m.onnx").get_config()
    config["nodes"][0]["op_type"] = "os.system"
    with pytest.raises(UnsupportedOperatorError, match="os.system"):
        OnnxGraphModule(**config)
    config["nodes"][0]["op_type"] = "Conv"
    config["nodes"][0]["inputs"] = ["not_defined_anywhere"]
    with pytest.raises(ValueError, match="not_defined_anywhere"):
        OnnxGraphModule(**config)
