"""module_to_spec / module_from_spec: every built-in layer round-trips, and bad descriptions are
rejected with the place that is wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.nn.registry import unregister_module


def built_in_layers():
    return {
        "Linear": nn.Linear(3, 4, bias=False),
        "Conv2d": nn.Conv2d(4, 6, kernel_size=(3, 2), stride=2, padding=(1, 0), dilation=(1, 2),
                            groups=2),
        "MaxPool2d": nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
        "AvgPool2d": nn.AvgPool2d(2, stride=1, padding=1, count_include_pad=False),
        "AdaptiveAvgPool2d": nn.AdaptiveAvgPool2d(1),
        "BatchNorm1d": nn.BatchNorm1d(5, eps=1e-3, momentum=None),
        "BatchNorm2d": nn.BatchNorm2d(5, affine=False),
        "LayerNorm": nn.LayerNorm((2, 3), elementwise_affine=True, bias=False),
        "Dropout": nn.Dropout(0.25),
        "Embedding": nn.Embedding(7, 3, padding_idx=2),
        "Flatten": nn.Flatten(0, -2),
        "Identity": nn.Identity(),
        "ReLU": nn.ReLU(), "GELU": nn.GELU("tanh"), "Tanh": nn.Tanh(), "Sigmoid": nn.Sigmoid(),
        "Softmax": nn.Softmax(dim=0), "LogSoftmax": nn.LogSoftmax(1),
        "CrossEntropyLoss": nn.CrossEntropyLoss(ignore_index=3, label_smoothing=0.1),
        "NLLLoss": nn.NLLLoss(reduction="sum"), "MSELoss": nn.MSELoss("none"),
        "BCEWithLogitsLoss": nn.BCEWithLogitsLoss(),
        "Sequential": nn.Sequential(nn.Linear(2, 2), nn.ReLU()),
        "ModuleList": nn.ModuleList([nn.ReLU(), nn.Linear(1, 1)]),
        "ModuleDict": nn.ModuleDict({"act": nn.Tanh(), "fc": nn.Linear(1, 2)}),
        "LeakyReLU": nn.LeakyReLU(0.2), "ELU": nn.ELU(0.5), "Softplus": nn.Softplus(2.0, 4.0),
        "SiLU": nn.SiLU(), "Mish": nn.Mish(), "Hardswish": nn.Hardswish(),
        "Hardsigmoid": nn.Hardsigmoid(), "PReLU": nn.PReLU(3, 0.1),
        "GroupNorm": nn.GroupNorm(2, 4, affine=False),
        "InstanceNorm1d": nn.InstanceNorm1d(3, affine=True),
        "InstanceNorm2d": nn.InstanceNorm2d(3, track_running_stats=True),
        "Conv1d": nn.Conv1d(2, 4, 3, padding=1, groups=2),
        "ConvTranspose2d": nn.ConvTranspose2d(2, 4, 3, stride=2, output_padding=1),
        "MaxPool1d": nn.MaxPool1d(2), "AvgPool1d": nn.AvgPool1d(3, 1, 1),
        "AdaptiveMaxPool2d": nn.AdaptiveMaxPool2d((2, None)),
        "Upsample": nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
        "MultiheadAttention": nn.MultiheadAttention(8, 2, kdim=3, vdim=5, batch_first=True),
        "TransformerEncoderLayer": nn.TransformerEncoderLayer(8, 2, 16, activation="gelu",
                                                              norm_first=True),
        "TransformerDecoderLayer": nn.TransformerDecoderLayer(8, 2, 16, bias=False),
        "TransformerEncoder": nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2,
                                                    norm=nn.LayerNorm(8)),
        "TransformerDecoder": nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 3),
        "RNN": nn.RNN(3, 4, num_layers=2, nonlinearity="relu", batch_first=True),
        "LSTM": nn.LSTM(3, 4, bidirectional=True, dropout=0.2, num_layers=2),
        "GRU": nn.GRU(3, 4, bias=False),
        "RNNCell": nn.RNNCell(3, 4, nonlinearity="relu"), "LSTMCell": nn.LSTMCell(3, 4),
        "GRUCell": nn.GRUCell(3, 4, bias=False),
        **more_pytorch_layers(),
    }


def more_pytorch_layers():
    return {
        "L1Loss": nn.L1Loss("sum"), "SmoothL1Loss": nn.SmoothL1Loss(beta=0.5),
        "HuberLoss": nn.HuberLoss(delta=2.0), "BCELoss": nn.BCELoss([1.0, 2.0]),
        "KLDivLoss": nn.KLDivLoss("batchmean", log_target=True),
        "CosineEmbeddingLoss": nn.CosineEmbeddingLoss(0.3),
        "MarginRankingLoss": nn.MarginRankingLoss(0.1),
        "TripletMarginLoss": nn.TripletMarginLoss(2.0, p=1.0, swap=True),
        "GaussianNLLLoss": nn.GaussianNLLLoss(full=True), "CTCLoss": nn.CTCLoss(blank=3),
        "ReLU6": nn.ReLU6(), "Hardtanh": nn.Hardtanh(-2.0, 2.0), "SELU": nn.SELU(),
        "CELU": nn.CELU(0.5), "GLU": nn.GLU(1), "LogSigmoid": nn.LogSigmoid(),
        "Softsign": nn.Softsign(), "Softmin": nn.Softmin(0),
        "Unflatten": nn.Unflatten(1, (2, 3)), "Dropout1d": nn.Dropout1d(0.1),
        "Dropout2d": nn.Dropout2d(0.2), "ZeroPad2d": nn.ZeroPad2d((1, 0, 2, 0)),
        "ConstantPad2d": nn.ConstantPad2d(1, 0.5), "ReflectionPad2d": nn.ReflectionPad2d(2),
        "ReplicationPad2d": nn.ReplicationPad2d(1), "PixelShuffle": nn.PixelShuffle(3),
        "EmbeddingBag": nn.EmbeddingBag(6, 2, mode="sum", padding_idx=1),
        "ParameterList": nn.ParameterList([np.zeros((2, 2), np.float32)]),
        "ParameterDict": nn.ParameterDict({"scale": np.ones(3, np.float32)}),
        "Transformer": nn.Transformer(8, 2, 1, 2, 16, norm_first=True),
    }


def shape_tree(module):
    return [(name, type(m).__name__) for name, m in module.named_modules()], \
        {k: (v.shape, v.dtype) for k, v in module.state_dict().items()}


@pytest.mark.parametrize("name", sorted(built_in_layers()))
def test_every_built_in_layer_round_trips(name):
    module = built_in_layers()[name]
    spec = module_spec = nn.module_to_spec(module)
    assert json.loads(json.dumps(spec)) == spec  # plain data only
    rebuilt = nn.module_from_spec(module_spec)
    assert type(rebuilt) is type(module)
    assert nn.module_to_spec(rebuilt) == spec
    assert shape_tree(rebuilt) == shape_tree(module)


def test_every_registered_built_in_is_covered():
    assert set(built_in_layers()) <= set(nn.registered_names())
    missing = {n for n in nn.registered_names() if n not in built_in_layers()}
    # OnnxGraphModule (a graph imported from ONNX) has its round trips tested in tests/onnx.
    assert not missing - {"_user_layer_for_tests", "OnnxGraphModule"}


def test_nested_model_round_trips_and_computes_the_same_with_the_same_weights():
    md.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    rebuilt = nn.module_from_spec(nn.module_to_spec(model))
    rebuilt.load_state_dict(model.state_dict())
    x = md.tensor(np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32))
    model.eval(), rebuilt.eval()
    np.testing.assert_array_equal(model(x).numpy(), rebuilt(x).numpy())


def test_sequential_keeps_ordered_dict_names():
    from collections import OrderedDict
    model = nn.Sequential(OrderedDict([("features", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    rebuilt = nn.module_from_spec(nn.module_to_spec(model))
    assert [n for n, _ in rebuilt.named_children()] == ["features", "act"]


class Scale(nn.Module):
    def __init__(self, factor: float = 2.0):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor

    def get_config(self):
        return {"factor": self.factor}


@pytest.fixture
def registered_scale():
    nn.register_module(Scale, name="_user_layer_for_tests")
    yield Scale
    unregister_module("_user_layer_for_tests")


def test_unregistered_user_class_is_rejected():
    with pytest.raises(TypeError, match="register_module"):
        nn.module_to_spec(nn.Sequential(Scale()))
    spec = {"type": "Scale", "args": {}, "children": []}
    with pytest.raises(KeyError, match="Scale"):
        nn.module_from_spec(spec)


def test_registered_user_class_round_trips(registered_scale):
    model = nn.Sequential(nn.Linear(2, 2), registered_scale(3.0))
    spec = nn.module_to_spec(model)
    assert spec["children"][1][1] == {"type": "_user_layer_for_tests", "args": {"factor": 3.0},
                                      "children": []}
    rebuilt = nn.module_from_spec(spec)
    assert isinstance(rebuilt[1], Scale) and rebuilt[1].factor == 3.0


def test_a_name_cannot_be_registered_twice_for_different_classes(registered_scale):
    class Other(Scale):
        pass

    with pytest.raises(ValueError, match="already registered"):
        nn.register_module(Other, name="_user_layer_for_tests")
    with pytest.raises(TypeError):
        nn.register_module(object)


BAD_SPECS = [
    ("not a dict", [1, 2], ValueError, "model"),
    ("extra key", {"type": "ReLU", "args": {}, "children": [], "code": "x"}, ValueError, "model"),
    ("type not str", {"type": 3, "args": {}, "children": []}, TypeError, "model.type"),
    ("unknown type", {"type": "os.system", "args": {}, "children": []}, KeyError, "os.system"),
    ("args not dict", {"type": "ReLU", "args": [], "children": []}, TypeError, "model.args"),
    ("bad arg name", {"type": "Linear", "args": {"in_features": 2, "out_features": 2,
                                                 "evil": 1}, "children": []}, ValueError,
     "model"),
    ("bad arg value", {"type": "Dropout", "args": {"p": 3.0}, "children": []}, ValueError,
     "Dropout"),
    ("non-plain arg", {"type": "Dropout", "args": {"p": object()}, "children": []}, TypeError,
     "model.args"),
    ("children not list", {"type": "Sequential", "args": {}, "children": {}}, TypeError,
     "model.children"),
    ("child not pair", {"type": "Sequential", "args": {}, "children": [["0"]]}, ValueError,
     "children[0]"),
    ("bad child", {"type": "Sequential", "args": {},
                   "children": [["0", {"type": "ReLU", "args": {"x": 1}, "children": []}]]},
     ValueError, "model.0"),
    ("duplicate children", {"type": "Sequential", "args": {}, "children": [
        ["a", {"type": "ReLU", "args": {}, "children": []}],
        ["a", {"type": "ReLU", "args": {}, "children": []}]]}, ValueError, "duplicate"),
    ("leaf with children", {"type": "ReLU", "args": {}, "children": [
        ["0", {"type": "ReLU", "args": {}, "children": []}]]}, ValueError, "model"),
    ("module list names", {"type": "ModuleList", "args": {}, "children": [
        ["x", {"type": "ReLU", "args": {}, "children": []}]]}, ValueError, "model"),
]


@pytest.mark.parametrize("label, spec, exception, where", BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_bad_specs_are_rejected_naming_the_place(label, spec, exception, where):
    with pytest.raises(exception) as info:
        nn.module_from_spec(spec)
    assert where in str(info.value)


def test_too_deep_a_tree_is_rejected():
    spec = {"type": "ReLU", "args": {}, "children": []}
    for _ in range(100):
        spec = {"type": "Sequential", "args": {}, "children": [["0", spec]]}
    with pytest.raises(ValueError, match="deeper"):
        nn.module_from_spec(spec)
