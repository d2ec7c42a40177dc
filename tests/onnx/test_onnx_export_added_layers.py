"""The added layers exported alone and in a small model, validated by onnx and run by
onnxruntime at batch sizes other than the example's."""

import numpy as np
import onnx
import pytest

import minidl as md
from minidl import nn

from onnx_checks import export_and_compare

rng = np.random.default_rng(0)


def images(n, c=4, h=6, w=7):
    return rng.standard_normal((n, c, h, w)).astype(np.float32) * 3


def positive_images(n):
    # Interpolation mixes neighbours; positive values keep float32 cancellation out of the
    # comparison with onnxruntime's own summation order.
    return rng.uniform(0.5, 2.0, (n, 4, 6, 7)).astype(np.float32)


def sequences(n, c=4, length=10):
    return rng.standard_normal((n, c, length)).astype(np.float32) * 3


def tracked_instance_norm():
    layer = nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
    layer.running_mean.data[...] = rng.standard_normal(4)
    layer.running_var.data[...] = rng.uniform(0.5, 2.0, 4)
    return layer


def shifted(layer):
    for parameter in layer.parameters():
        parameter.data[...] += rng.uniform(0.1, 0.5, parameter.shape).astype(np.float32)
    return layer


# name -> (layer, input maker, an ONNX op the file must use)
LAYERS = {
    "leaky_relu": (lambda: nn.LeakyReLU(0.2), images, "LeakyRelu"),
    "elu": (lambda: nn.ELU(0.5), images, "Elu"),
    "softplus": (lambda: nn.Softplus(), images, "Softplus"),
    "softplus_beta_threshold": (lambda: nn.Softplus(2.0, 3.0), images, "Softplus"),
    "silu": (lambda: nn.SiLU(), images, "Sigmoid"),
    "mish": (lambda: nn.Mish(), images, "Mish"),
    "hardswish": (lambda: nn.Hardswish(), images, "HardSwish"),
    "hardsigmoid": (lambda: nn.Hardsigmoid(), images, "HardSigmoid"),
    "prelu": (lambda: shifted(nn.PReLU(4)), images, "PRelu"),
    "prelu_shared": (lambda: nn.PReLU(), images, "PRelu"),
    "group_norm": (lambda: shifted(nn.GroupNorm(2, 4)), images, "InstanceNormalization"),
    "instance_norm": (lambda: nn.InstanceNorm2d(4), images, "InstanceNormalization"),
    "instance_norm_affine": (lambda: shifted(nn.InstanceNorm1d(4, affine=True)), sequences,
                             "InstanceNormalization"),
    "instance_norm_tracked": (tracked_instance_norm, images, "BatchNormalization"),
    "conv1d": (lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), sequences, "Conv"),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                    output_padding=1, groups=2), images,
                         "ConvTranspose"),
    "max_pool1d": (lambda: nn.MaxPool1d(3, 2, 1), sequences, "MaxPool"),
    "avg_pool1d": (lambda: nn.AvgPool1d(2), sequences, "AveragePool"),
    "adaptive_max_pool_global": (lambda: nn.AdaptiveMaxPool2d(1), images, "GlobalMaxPool"),
    "adaptive_max_pool_uneven": (lambda: nn.AdaptiveMaxPool2d((4, 3)), images, "ReduceMax"),
    "upsample_nearest": (lambda: nn.Upsample(scale_factor=2), images, "Resize"),
    "upsample_nearest_size": (lambda: nn.Upsample(size=(9, 4)), images, "Resize"),
    "upsample_bilinear": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), positive_images,
                          "Resize"),
    "upsample_bilinear_size": (lambda: nn.Upsample(size=(9, 11), mode="bilinear"), positive_images,
                               "Resize"),
    "upsample_bilinear_corners": (lambda: nn.Upsample(scale_factor=2, mode="bilinear",
                                                      align_corners=True), positive_images,
                                  "Resize"),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_added_layer_alone(name, tmp_path):
    make, data, op = LAYERS[name]
    md.manual_seed(1)
    layer = make()
    path = export_and_compare(layer, [data(1)], [[data(3)], [data(1)], [data(5)]], tmp_path)
    assert op in {node.op_type for node in onnx.load(str(path)).graph.node}


def test_a_small_unet_like_model(tmp_path):
    md.manual_seed(2)
    model = nn.Sequential(
        nn.Conv2d(4, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.SiLU(), nn.MaxPool2d(2),
        nn.ConvTranspose2d(8, 4, 2, stride=2), nn.InstanceNorm2d(4, affine=True), nn.Mish(),
        nn.Upsample(scale_factor=2, mode="bilinear"), nn.Hardswish(), nn.AdaptiveMaxPool2d(1),
        nn.Flatten(), nn.Linear(4, 3), nn.PReLU())
    export_and_compare(model, [images(2, h=8, w=8)], [[images(4, h=8, w=8)]], tmp_path)


@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_layers_as_matmul_softmax_graphs(batch_first, tmp_path):
    # The exported batch axis is the samples' axis: 0 with batch_first, 1 otherwise.
    md.manual_seed(3)
    encoder = nn.TransformerEncoderLayer(8, 2, 16, batch_first=batch_first, norm_first=True)
    data = lambda n: rng.standard_normal((n, 5, 8) if batch_first else (3, n, 8)) \
        .astype(np.float32)  # noqa: E731
    path = export_and_compare(encoder, [data(2)], [[data(4)], [data(1)]], tmp_path)
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert {"MatMul", "Softmax", "LayerNormalization"} <= ops


def test_multihead_attention_with_a_causal_mask(tmp_path):
    md.manual_seed(4)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = nn.MultiheadAttention(8, 4, batch_first=True)

        def forward(self, x):
            return self.attention(x, x, x, is_causal=True, need_weights=False)[0]

    data = lambda n: rng.standard_normal((n, 6, 8)).astype(np.float32)  # noqa: E731
    export_and_compare(CausalSelfAttention(), [data(2)], [[data(3)]], tmp_path)


class SequenceModel(nn.Module):
    """A recurrent layer whose output and final states all reach the graph's outputs."""

    def __init__(self, layer, with_states):
        super().__init__()
        self.layer, self.with_states = layer, with_states

    def forward(self, x, *states):
        if not self.with_states:
            out, final = self.layer(x)
        else:
            out, final = self.layer(x, tuple(states) if len(states) == 2 else states[0])
        finals = final if isinstance(final, tuple) else (final,)
        return (out, *finals)


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("options", [{}, {"num_layers": 2, "bidirectional": True},
                                     {"batch_first": True, "num_layers": 2}])
def test_recurrent_layers_as_onnx_recurrent_nodes(mode, options, tmp_path):
    md.manual_seed(5)
    layer = getattr(nn, mode)(3, 4, **options)
    batch_first = options.get("batch_first", False)
    data = (lambda n: rng.standard_normal((n, 6, 3)).astype(np.float32)) if batch_first else \
        (lambda n: rng.standard_normal((n, 2, 3)).astype(np.float32))  # axis 0 varies
    path = export_and_compare(SequenceModel(layer, False), [data(2)], [[data(5)], [data(1)]],
                              tmp_path)
    assert mode in {node.op_type for node in onnx.load(str(path)).graph.node}


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_recurrent_layers_with_initial_states(mode, tmp_path):
    md.manual_seed(6)
    layer = getattr(nn, mode)(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    count = 2 if mode == "LSTM" else 1

    def inputs(n):
        return [rng.standard_normal((n, 6, 3)).astype(np.float32)] + \
            [rng.standard_normal((4, n, 4)).astype(np.float32) for _ in range(count)]

    # The states' first axis is layers × directions, not the batch: a fixed-size graph.
    export_and_compare(SequenceModel(layer, True), inputs(2), [inputs(2)], tmp_path,
                       dynamic_batch=False)


def test_transformer_decoder_layer_with_memory(tmp_path):
    md.manual_seed(7)
    decoder = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True, activation="gelu")

    def inputs(n):
        return [rng.standard_normal((n, 5, 8)).astype(np.float32),
                rng.standard_normal((n, 7, 8)).astype(np.float32)]

    export_and_compare(decoder, inputs(2), [inputs(3), inputs(1)], tmp_path)


ROUND_TRIPS = {name: (make, data) for name, (make, data, _) in LAYERS.items()}
ROUND_TRIPS.update({
    "lstm": (lambda: SequenceModel(nn.LSTM(3, 4, num_layers=2, bidirectional=True,
                                           batch_first=True), False),
             lambda n: rng.standard_normal((n, 6, 3)).astype(np.float32)),
    "gru": (lambda: SequenceModel(nn.GRU(3, 4, batch_first=True), False),
            lambda n: rng.standard_normal((n, 6, 3)).astype(np.float32)),
    "rnn_relu": (lambda: SequenceModel(nn.RNN(3, 4, nonlinearity="relu"), False),
                 lambda n: rng.standard_normal((n, 2, 3)).astype(np.float32)),
    "encoder": (lambda: nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
                lambda n: rng.standard_normal((n, 5, 8)).astype(np.float32)),
})


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_added_layer_round_trips_through_minidls_onnx_import(name, tmp_path):
    make, data = ROUND_TRIPS[name]
    md.manual_seed(8)
    model = make()
    model.eval()
    path = tmp_path / "model.onnx"
    md.export_onnx(model, path, example_input=md.tensor(data(2)))
    imported = md.load_model(path)
    x = md.tensor(data(3))
    expected, got = model(x), imported(x)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
