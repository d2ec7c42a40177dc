"""Every built-in layer alone, and composite models, exported and run by onnxruntime at batch
sizes other than the example's."""

import numpy as np
import pytest

import minidl as md
from minidl import nn

from minidl.onnx import export_onnx
from onnx_checks import export_and_compare

rng = np.random.default_rng(0)


def images(n, c=3, h=9, w=9):
    return rng.standard_normal((n, c, h, w)).astype(np.float32)


def rows(n, features=6):
    return rng.standard_normal((n, features)).astype(np.float32)


def randomize_batch_norm(bn):
    bn.running_mean.data[...] = rng.standard_normal(bn.num_features)
    bn.running_var.data[...] = rng.uniform(0.5, 2.0, bn.num_features)
    bn.weight.data[...] = rng.standard_normal(bn.num_features)
    bn.bias.data[...] = rng.standard_normal(bn.num_features)
    return bn


LAYERS = {
    "linear": (lambda: nn.Linear(6, 4), rows),
    "linear_no_bias": (lambda: nn.Linear(6, 4, bias=False), rows),
    "linear_3d": (lambda: nn.Linear(6, 4),
                  lambda n: rng.standard_normal((n, 5, 6)).astype(np.float32)),
    "conv": (lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), images),
    "conv_grouped_dilated": (lambda: nn.Conv2d(3, 6, 3, padding=2, dilation=2, groups=3), images),
    "conv_no_bias": (lambda: nn.Conv2d(3, 2, (3, 1), bias=False), images),
    "maxpool": (lambda: nn.MaxPool2d(2), images),
    "maxpool_ceil_padded": (lambda: nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), images),
    "maxpool_dilated": (lambda: nn.MaxPool2d(2, stride=1, dilation=2), images),
    # ceil mode where PyTorch drops a last window that ONNX's own ceil mode would keep
    "maxpool_ceil_dropped_window": (lambda: nn.MaxPool2d(2, stride=3, padding=1, ceil_mode=True),
                                    lambda n: images(n, h=8, w=10)),
    "avgpool_ceil_dropped_window": (lambda: nn.AvgPool2d(2, stride=3, ceil_mode=True), images),
    "avgpool_ceil_padded": (lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True),
                            lambda n: images(n, h=8, w=10)),
    "avgpool": (lambda: nn.AvgPool2d(2), images),
    "avgpool_ceil": (lambda: nn.AvgPool2d(2, ceil_mode=True), images),
    "avgpool_pad_excluded": (lambda: nn.AvgPool2d(3, stride=2, padding=1,
                                                  count_include_pad=False), images),
    "avgpool_pad_included": (lambda: nn.AvgPool2d(3, stride=2, padding=1), images),
    "adaptive_avgpool_global": (lambda: nn.AdaptiveAvgPool2d(1), images),
    "adaptive_avgpool_3": (lambda: nn.AdaptiveAvgPool2d(3), images),
    "batchnorm2d": (lambda: randomize_batch_norm(nn.BatchNorm2d(3)), images),
    "batchnorm1d": (lambda: randomize_batch_norm(nn.BatchNorm1d(6)), rows),
    "batchnorm1d_3d": (lambda: randomize_batch_norm(nn.BatchNorm1d(3)),
                       lambda n: rng.standard_normal((n, 3, 5)).astype(np.float32)),
    "layernorm": (lambda: nn.LayerNorm(6), rows),
    "layernorm_2d_shape": (lambda: nn.LayerNorm((9, 9)), images),
    "layernorm_no_affine": (lambda: nn.LayerNorm(6, elementwise_affine=False), rows),
    "layernorm_no_bias": (lambda: nn.LayerNorm(6, bias=False), rows),
    "gelu": (lambda: nn.GELU(), rows),
    "gelu_tanh": (lambda: nn.GELU("tanh"), rows),
    "relu": (lambda: nn.ReLU(), rows),
    "tanh": (lambda: nn.Tanh(), rows),
    "sigmoid": (lambda: nn.Sigmoid(), rows),
    "softmax": (lambda: nn.Softmax(dim=1), images),
    "log_softmax": (lambda: nn.LogSoftmax(), rows),
    "flatten": (lambda: nn.Flatten(), images),
    "flatten_partial": (lambda: nn.Flatten(2), images),
    "dropout": (lambda: nn.Dropout(0.5), rows),
    "identity": (lambda: nn.Identity(), rows),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_alone(name, tmp_path):
    make, data = LAYERS[name]
    md.manual_seed(1)
    layer = make()
    export_and_compare(layer, [data(1)], [[data(3)], [data(1)], [data(7)]], tmp_path)


def test_embedding(tmp_path):
    md.manual_seed(1)
    layer = nn.Embedding(11, 4)
    indices = lambda n: rng.integers(0, 11, (n, 5)).astype(np.int64)  # noqa: E731
    export_and_compare(layer, [indices(1)], [[indices(4)], [indices(2)]], tmp_path)


def test_gelu_is_written_with_erf_before_opset_20(tmp_path):
    import onnx
    path = export_and_compare(nn.GELU(), [rows(1)], [[rows(4)]], tmp_path, opset=18)
    assert "Erf" in {n.op_type for n in onnx.load(str(path)).graph.node}
    path = export_and_compare(nn.GELU("tanh"), [rows(1)], [[rows(4)]], tmp_path, opset=18)
    assert "Gelu" not in {n.op_type for n in onnx.load(str(path)).graph.node}


@pytest.mark.parametrize("opset", [18, 21, 26])
def test_opsets(opset, tmp_path):
    md.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 7 * 7, 5),
                          nn.GELU(), nn.LayerNorm(5), nn.LogSoftmax())
    export_and_compare(model, [images(1)], [[images(3)]], tmp_path, opset=opset)


# -- composite models ---------------------------------------------------------------------------

def test_mlp(tmp_path):
    md.manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 16),
                          nn.Tanh(), nn.Linear(16, 3), nn.Softmax())
    export_and_compare(model, [rows(1)], [[rows(8)], [rows(2)]], tmp_path)


def test_cnn_with_batch_norm_grouped_dilated_conv_and_ceil_pools(tmp_path):
    md.manual_seed(4)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), randomize_batch_norm(nn.BatchNorm2d(8)), nn.ReLU(),
        nn.MaxPool2d(2, ceil_mode=True),
        nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4),
        randomize_batch_norm(nn.BatchNorm2d(8)),
        nn.ReLU(), nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False),
        nn.Flatten(), nn.Linear(8 * 3 * 3, 10))
    model.train()
    model[5].eval()  # a mixed mode, which export must give back exactly
    export_onnx(model, tmp_path / "first.onnx", md.tensor(images(2)))
    assert [m.training for m in model.modules()] == [True] * 6 + [False] + [True] * 4
    export_and_compare(model, [images(2)], [[images(5)], [images(1)]], tmp_path)


class TokenClassifier(nn.Module):
    """Embedding + layer norm + GELU + mean over the sequence."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 8)
        self.act = nn.GELU()
        self.head = nn.Linear(8, 3)

    def forward(self, tokens):
        h = self.act(self.proj(self.norm(self.embed(tokens))))
        return self.head(h.mean(axis=1))


def test_embedding_layer_norm_gelu(tmp_path):
    md.manual_seed(5)
    tokens = lambda n: rng.integers(0, 20, (n, 6)).astype(np.int64)  # noqa: E731
    export_and_compare(TokenClassifier(), [tokens(1)], [[tokens(4)], [tokens(9)]], tmp_path)


class TwoInTwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                   nn.Flatten())
        self.table = nn.Linear(6, 4)
        self.head = nn.Linear(8, 2)

    def forward(self, picture, features):
        joined = md.cat([self.image(picture), self.table(features).relu()], axis=1)
        return self.head(joined), joined.sum(axis=1, keepdims=True) * 0.5


def test_two_inputs_two_outputs(tmp_path):
    import onnx
    md.manual_seed(6)
    path = export_and_compare(TwoInTwoOut(), [images(1), rows(1)],
                              [[images(3), rows(3)], [images(6), rows(6)]], tmp_path,
                              input_names=["picture", "features"],
                              output_names=["logits", "summary"])
    graph = onnx.load(str(path)).graph
    assert [i.name for i in graph.input] == ["picture", "features"]
    assert [o.name for o in graph.output] == ["logits", "summary"]
    for value in list(graph.input) + list(graph.output):
        assert value.type.tensor_type.shape.dim[0].dim_param == "batch"


def test_weights_keep_their_state_dict_names(tmp_path):
    import onnx
    md.manual_seed(7)
    model = nn.Sequential(nn.Linear(6, 4), randomize_batch_norm(nn.BatchNorm1d(4)))
    path = export_and_compare(model, [rows(1)], [[rows(3)]], tmp_path)
    names = {t.name for t in onnx.load(str(path)).graph.initializer}
    assert {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
            "1.running_var"} <= names


def test_static_batch(tmp_path):
    import onnx
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 9 * 9, 2))
    path = export_and_compare(model, [images(2)], [[images(2)]], tmp_path, dynamic_batch=False)
    dim = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_value == 2
