"""Import results that used to be silently wrong, multi-output nodes, and imported graphs in
training mode. Each graph is built with onnx.helper and checked against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import minidl as md
from minidl import nn, optim
from minidl.onnx import import_model
from minidl.ops.conv import conv2d

from onnx_checks import info, run_onnxruntime, save_graph as save

rng = np.random.default_rng(5)


def same_as_onnxruntime(path, *inputs, exact=False, atol=1e-6):
    module = import_model(path)
    expected = run_onnxruntime(path, list(inputs))
    actual = module(*inputs)
    actual = actual if isinstance(actual, tuple) else (actual,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        if exact:
            np.testing.assert_array_equal(a.numpy(), e)
        else:
            np.testing.assert_allclose(a.numpy(), e, rtol=1e-5, atol=atol)
    return module


# -- formerly silent wrong results ---------------------------------------------------------------

@pytest.mark.parametrize("dtype, code", [(np.int32, TensorProto.INT32),
                                         (np.int64, TensorProto.INT64),
                                         (np.uint8, TensorProto.UINT8)])
def test_integer_div_truncates_and_keeps_its_type(tmp_path, dtype, code):
    path = save(tmp_path, [helper.make_node("Div", ["a", "b"], ["y"])],
                [info("a", [6], code), info("b", [6], code)], [info("y", [6], code)])
    signed = np.dtype(dtype).kind == "i"
    a = np.array([-7, 7, -7, 7, 9, 0] if signed else [7, 8, 9, 200, 3, 0], dtype)
    b = np.array([2, 2, -2, -2, 4, 3] if signed else [2, 3, 4, 7, 3, 9], dtype)
    same_as_onnxruntime(path, a, b, exact=True)


def test_shape_arithmetic_chain_stays_integer(tmp_path):
    # PyTorch writes x.view(n, c // 2, ...) as Shape -> Gather -> Div -> Concat -> Reshape.
    path = save(tmp_path, [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Div", ["c", "two"], ["half"]),
        helper.make_node("Concat", ["minus_one", "two_1d", "half"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"])],
        [info("x", ["N", 6])], [info("y", ["N", 2, 3])],
        [("one", np.array([1], np.int64)), ("two", np.array(2, np.int64)),
         ("minus_one", np.array([-1], np.int64)), ("two_1d", np.array([2], np.int64))])
    same_as_onnxruntime(path, rng.standard_normal((3, 6)).astype(np.float32))


def test_average_pool_honours_dilations(tmp_path):
    path = save(tmp_path, [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2],
                                            dilations=[2, 2], strides=[1, 1])],
                [info("x", [1, 2, 5, 6])], [info("y", [1, 2, 3, 4])], opset=19)
    same_as_onnxruntime(path, rng.standard_normal((1, 2, 5, 6)).astype(np.float32))


def test_clip_on_int8_stays_int8(tmp_path):
    code = TensorProto.INT8
    path = save(tmp_path, [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                [info("x", [8], code)], [info("y", [8], code)],
                [("lo", np.array(-3, np.int8)), ("hi", np.array(5, np.int8))])
    same_as_onnxruntime(path, np.arange(-8, 8, 2).astype(np.int8), exact=True)


def dropout_graph(tmp_path, training_mode):
    return save(tmp_path, [helper.make_node("Dropout", ["x", "ratio", "mode"], ["y", "mask"])],
                [info("x", [400])], [info("y", [400]), info("mask", [400], TensorProto.BOOL)],
                [("ratio", np.array(0.25, np.float32)), ("mode", np.array(training_mode))])


def test_dropout_with_training_mode_drops(tmp_path):
    module = import_model(dropout_graph(tmp_path, True))
    x = rng.uniform(1, 2, 400).astype(np.float32)
    y, mask = module(x)
    y, mask = y.numpy(), mask.numpy()
    assert mask.dtype == np.bool_ and 0.15 < 1 - mask.mean() < 0.35
    np.testing.assert_allclose(y[mask], x[mask] / 0.75, rtol=1e-6)
    assert not y[~mask].any()


def test_dropout_follows_the_module_mode(tmp_path):
    module = import_model(dropout_graph(tmp_path, False))
    x = rng.uniform(1, 2, 400).astype(np.float32)
    y, mask = module(x)
    np.testing.assert_array_equal(y.numpy(), x)
    assert mask.numpy().all()
    module.train()
    md.manual_seed(1)
    first = module(x)[0].numpy()
    md.manual_seed(1)
    np.testing.assert_array_equal(module(x)[0].numpy(), first)  # the seeded generator draws
    assert (first == 0).any()


# -- several outputs -----------------------------------------------------------------------------

def test_second_outputs(tmp_path):
    path = save(tmp_path, [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln", "mean", "inv_std"],
                         axis=1),
        helper.make_node("MaxPool", ["x"], ["pooled", "where"], kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("TopK", ["x", "k"], ["top", "top_index"], axis=-1),
        helper.make_node("Split", ["x"], ["left", "right"], axis=3, num_outputs=2)],
        [info("x", [2, 3, 4, 4])],
        [info("ln", [2, 3, 4, 4]), info("mean", [2, 1, 1, 1]), info("inv_std", [2, 1, 1, 1]),
         info("pooled", [2, 3, 2, 2]), info("where", [2, 3, 2, 2], TensorProto.INT64),
         info("top", [2, 3, 4, 2]), info("top_index", [2, 3, 4, 2], TensorProto.INT64),
         info("left", [2, 3, 4, 2]), info("right", [2, 3, 4, 2])],
        [("g", rng.standard_normal((3, 4, 4)).astype(np.float32)),
         ("b", rng.standard_normal((3, 4, 4)).astype(np.float32)),
         ("k", np.array([2], np.int64))], opset=18)
    same_as_onnxruntime(path, rng.standard_normal((2, 3, 4, 4)).astype(np.float32))


# -- convolution and pooling beyond 2-D with symmetric pads ----------------------------------------

@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_conv_and_pools_in_every_dimension_with_awkward_padding(tmp_path, spatial):
    size, kernel = [7, 6, 5][:spatial], [3, 2, 3][:spatial]
    path = save(tmp_path, [
        helper.make_node("Conv", ["x", "w", "bias"], ["c"], strides=[2] * spatial,
                         pads=[1] * spatial + [0] * spatial, dilations=[1] * spatial),
        helper.make_node("Conv", ["x", "w"], ["same"], auto_pad="SAME_UPPER"),
        helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=kernel, auto_pad="SAME_LOWER"),
        helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=kernel,
                         pads=[2, 1, 2][:spatial] + [1] * spatial, ceil_mode=1,
                         strides=[2] * spatial,
                         count_include_pad=1),
        helper.make_node("ConvTranspose", ["x", "wt", "bias"], ["t"], strides=[2] * spatial,
                         pads=[1] * spatial + [0] * spatial, output_padding=[1] * spatial)],
        [info("x", [2, 4] + size)],
        [info(n, [f"{n}{i}" for i in range(2 + spatial)]) for n in ("c", "same", "m", "a", "t")],
        [("w", rng.standard_normal([6, 4] + kernel).astype(np.float32)),
         ("wt", rng.standard_normal([4, 6] + kernel).astype(np.float32)),
         ("bias", rng.standard_normal(6).astype(np.float32))], opset=19)
    # Sums of up to 72 products of order-1 terms: float32 rounding differs by ~1e-6 per term.
    same_as_onnxruntime(path, rng.standard_normal([2, 4] + size).astype(np.float32), atol=2e-5)


# -- older opsets --------------------------------------------------------------------------------

def test_opset_9_graph_is_converted_and_imported(tmp_path):
    path = save(tmp_path, [
        helper.make_node("Unsqueeze", ["x"], ["u"], axes=[1]),
        helper.make_node("Upsample", ["u", "scales"], ["up"], mode="nearest"),
        helper.make_node("Dropout", ["up"], ["d"], ratio=0.3),
        helper.make_node("ReduceSum", ["d"], ["y"], axes=[3], keepdims=0)],
        [info("x", [2, 3, 4])], [info("y", [2, 2, 6])],
        [("scales", np.array([1, 2, 2, 2], np.float32))], opset=9)
    same_as_onnxruntime(path, rng.standard_normal((2, 3, 4)).astype(np.float32))


# -- training an imported graph --------------------------------------------------------------------

def conv_bn_graph(tmp_path):
    mean, var = rng.standard_normal(4).astype(np.float32), rng.uniform(0.5, 2, 4).astype(np.float32)
    return save(tmp_path, [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["y"],
                         epsilon=1e-5, momentum=0.8)],
        [info("x", ["N", 2, 5, 5])], [info("y", ["N", 4, 5, 5])],
        [("w", rng.standard_normal((4, 2, 3, 3)).astype(np.float32)),
         ("gamma", rng.uniform(0.5, 1.5, 4).astype(np.float32)),
         ("beta", rng.standard_normal(4).astype(np.float32)), ("mean", mean), ("var", var)])


def test_batch_norm_trains_with_batch_statistics_and_updates_running_ones(tmp_path):
    module = same_as_onnxruntime(conv_bn_graph(tmp_path),
                                 rng.standard_normal((3, 2, 5, 5)).astype(np.float32))
    buffers = dict(module.named_buffers())
    before_mean, before_var = buffers["mean"].numpy().copy(), buffers["var"].numpy().copy()
    params = dict(module.named_parameters())
    assert {"w", "gamma", "beta"} <= set(params) and "mean" not in params
    x = rng.standard_normal((8, 2, 5, 5)).astype(np.float32)
    module.train()
    y = module(x).numpy()
    # Batch statistics: every channel of the output has mean beta and std gamma.
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), params["beta"].numpy(), atol=1e-4)
    np.testing.assert_allclose(y.std(axis=(0, 2, 3)), params["gamma"].numpy(), rtol=1e-3)
    # Running statistics moved by PyTorch's momentum 1 - 0.8 towards the batch's.
    c = conv2d(md.tensor(x), params["w"], padding=1).numpy()
    np.testing.assert_allclose(buffers["mean"].numpy(),
                               0.8 * before_mean + 0.2 * c.mean(axis=(0, 2, 3)),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(buffers["var"].numpy(),
                               0.8 * before_var + 0.2 * c.var(axis=(0, 2, 3), ddof=1), rtol=1e-4)
    module.eval()
    np.testing.assert_allclose(module(x).numpy(), evaluation_output(module, x),
                               rtol=1e-5, atol=1e-5)


def evaluation_output(module, x):
    """What the evaluation output must be with the module's current running statistics."""
    buffers, params = dict(module.named_buffers()), dict(module.named_parameters())
    c = conv2d(md.tensor(x), params["w"], padding=1).numpy()
    shape = (1, -1, 1, 1)
    normalized = (c - buffers["mean"].numpy().reshape(shape)) / np.sqrt(
        buffers["var"].numpy().reshape(shape) + 1e-5)
    return normalized * params["gamma"].numpy().reshape(shape) + \
        params["beta"].numpy().reshape(shape)


def test_imported_graph_takes_sgd_steps_through_new_operators(tmp_path):
    path = save(tmp_path, [
        helper.make_node("ConvTranspose", ["x", "wt"], ["t"], strides=[2, 2]),
        helper.make_node("HardSwish", ["t"], ["h"]),
        helper.make_node("Resize", ["h", "", "scales"], ["r"], mode="linear"),
        helper.make_node("Pad", ["r", "pads"], ["p"], mode="reflect"),
        helper.make_node("InstanceNormalization", ["p", "s", "b"], ["i"]),
        helper.make_node("LeakyRelu", ["i"], ["l"], alpha=0.1),
        helper.make_node("ReduceMean", ["l"], ["y"], axes=[2, 3], keepdims=0)],
        [info("x", ["N", 2, 3, 3])], [info("y", ["N", 3])],
        [("wt", rng.standard_normal((2, 3, 2, 2)).astype(np.float32)),
         ("scales", np.array([1, 1, 0.5, 0.5], np.float32)),
         ("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
         ("s", np.ones(3, np.float32)), ("b", np.zeros(3, np.float32))])
    module = same_as_onnxruntime(path, rng.standard_normal((2, 2, 3, 3)).astype(np.float32))
    module.train()
    x = md.tensor(rng.standard_normal((4, 2, 3, 3)).astype(np.float32))
    target = md.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    opt = optim.SGD(module.parameters(), lr=0.5)
    losses = []
    for _ in range(3):
        loss = nn.functional.mse_loss(module(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[2] < losses[0]
    assert all(p.grad is not None and np.abs(p.grad.numpy()).sum() > 0
               for p in module.parameters())


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_both_directions_with_lengths_and_initial_states(tmp_path, kind):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    steps, batch, size, hidden = 5, 3, 4, 6
    inputs = ["x", "w", "r", "b", "lengths", "h0"] + (["c0", "p"] if kind == "LSTM" else [])
    outputs = ["y", "y_h"] + (["y_c"] if kind == "LSTM" else [])
    extra = {"linear_before_reset": 1} if kind == "GRU" else {}
    tensors = [("w", weight(2, gates * hidden, size)), ("r", weight(2, gates * hidden, hidden)),
               ("b", weight(2, 2 * gates * hidden)), ("h0", weight(2, batch, hidden))]
    if kind == "LSTM":
        tensors += [("c0", weight(2, batch, hidden)), ("p", weight(2, 3 * hidden))]
    path = save(tmp_path, [helper.make_node(kind, inputs, outputs, hidden_size=hidden,
                                            direction="bidirectional", **extra)],
                [info("x", [steps, batch, size]), info("lengths", [batch], TensorProto.INT32)],
                [info("y", [steps, 2, batch, hidden])] +
                [info(n, [2, batch, hidden]) for n in outputs[1:]], tensors)
    same_as_onnxruntime(path, rng.standard_normal((steps, batch, size)).astype(np.float32),
                        np.array([5, 2, 4], np.int32), atol=1e-5)


def weight(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


@pytest.mark.parametrize("mode, padding, align", [
    ("linear", "zeros", 0), ("cubic", "reflection", 1), ("nearest", "border", 0)])
def test_grid_sample(tmp_path, mode, padding, align):
    path = save(tmp_path, [helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                                            padding_mode=padding, align_corners=align)],
                [info("x", [2, 3, 5, 4]), info("grid", [2, 6, 7, 2])], [info("y", [2, 3, 6, 7])],
                opset=20)
    # Points inside, on and beyond the edges: every padding rule is exercised.
    grid = rng.uniform(-1.4, 1.4, (2, 6, 7, 2)).astype(np.float32)
    same_as_onnxruntime(path, rng.standard_normal((2, 3, 5, 4)).astype(np.float32), grid,
                        atol=1e-5)
