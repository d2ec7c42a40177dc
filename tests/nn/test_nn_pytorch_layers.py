"""The layers and activations PyTorch users reach for next (ReLU6 ... Softmin, the padding
layers, PixelShuffle, Unflatten, channel dropout, EmbeddingBag, ParameterList/Dict and
nn.Transformer): each matches PyTorch with copied weights forward and backward, rebuilds from a
saved model file alone, and exports to ONNX where onnxruntime agrees."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn

torch = pytest.importorskip("torch")
T = torch.nn

RTOL, ATOL = 1e-4, 1e-5
rng = np.random.default_rng(0)


def spread(shape):
    """Distinct values 0.1 apart or so, keeping kinks (clamps, ties) out of the comparison."""
    size = int(np.prod(shape))
    values = (rng.permutation(size) - size / 2) * (12.0 / size) + 0.013
    return values.reshape(shape).astype(np.float32)


# name -> (minidl layer, torch layer, input shape)
LAYERS = {
    "ReLU6": (nn.ReLU6, T.ReLU6, (3, 20)),
    "Hardtanh": (lambda: nn.Hardtanh(-2.0, 1.5), lambda: T.Hardtanh(-2.0, 1.5), (3, 20)),
    "SELU": (nn.SELU, T.SELU, (3, 20)),
    "CELU": (lambda: nn.CELU(0.6), lambda: T.CELU(0.6), (3, 20)),
    "GLU": (nn.GLU, T.GLU, (3, 20)),
    "GLU_dim1": (lambda: nn.GLU(1), lambda: T.GLU(1), (3, 4, 5)),
    "LogSigmoid": (nn.LogSigmoid, T.LogSigmoid, (3, 20)),
    "Softsign": (nn.Softsign, T.Softsign, (3, 20)),
    "Softmin": (lambda: nn.Softmin(1), lambda: T.Softmin(1), (3, 4, 5)),
    "Unflatten": (lambda: nn.Unflatten(1, (2, -1)), lambda: T.Unflatten(1, (2, -1)), (3, 8)),
    "ZeroPad2d": (lambda: nn.ZeroPad2d((1, 2, 0, 3)), lambda: T.ZeroPad2d((1, 2, 0, 3)),
                  (2, 3, 4, 5)),
    "ZeroPad2d_crop": (lambda: nn.ZeroPad2d((-1, 2, 1, -2)),
                       lambda: T.ZeroPad2d((-1, 2, 1, -2)), (2, 3, 4, 5)),
    "ConstantPad2d": (lambda: nn.ConstantPad2d(2, 0.5), lambda: T.ConstantPad2d(2, 0.5),
                      (2, 3, 4, 5)),
    "ReflectionPad2d": (lambda: nn.ReflectionPad2d((3, 1, 2, 3)),
                        lambda: T.ReflectionPad2d((3, 1, 2, 3)), (2, 3, 4, 5)),
    "ReplicationPad2d": (lambda: nn.ReplicationPad2d((2, 3, 1, 4)),
                         lambda: T.ReplicationPad2d((2, 3, 1, 4)), (2, 3, 4, 5)),
    "PixelShuffle": (lambda: nn.PixelShuffle(2), lambda: T.PixelShuffle(2), (2, 12, 3, 4)),
}


def copied(reference, layer):
    """``layer`` with ``reference``'s weights, moved off their defaults."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(torch.rand_like(parameter) * 0.5)
    layer.load_state_dict({k: v.detach().numpy().copy()
                           for k, v in reference.state_dict().items()}, strict=True)
    return layer


def check_forward_backward(layer, reference, inputs, torch_inputs=None):
    ours = [md.tensor(x, requires_grad=x.dtype.kind == "f") for x in inputs]
    theirs = [torch.tensor(x, requires_grad=x.dtype.kind == "f")
              for x in (torch_inputs or inputs)]
    out, expected = layer(*ours), reference(*theirs)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL)
    weights = rng.standard_normal(out.shape).astype(np.float32)
    out.backward(md.tensor(weights))
    expected.backward(torch.tensor(weights))
    for a, b in zip(ours, theirs):
        if b.grad is not None:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=RTOL, atol=ATOL)
    theirs_parameters = dict(reference.named_parameters())
    for name, parameter in layer.named_parameters():
        np.testing.assert_allclose(parameter.grad.numpy(), theirs_parameters[name].grad.numpy(),
                                   rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_pytorch_forward_and_backward(name):
    build, build_torch, shape = LAYERS[name]
    check_forward_backward(build(), build_torch(), [spread(shape)])


def embedding_bags(mode, padding_idx=None):
    reference = T.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx)
    return copied(reference, nn.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx)), \
        reference


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_matches_pytorch_for_rows_and_offsets(mode):
    layer, reference = embedding_bags(mode)
    bags = np.array([[1, 2, 4, 5], [4, 3, 2, 9]])
    check_forward_backward(layer, reference, [bags])
    layer, reference = embedding_bags(mode, padding_idx=2)
    flat, offsets = np.array([1, 2, 4, 5, 4, 3, 2, 9, 2]), np.array([0, 3, 3, 8])
    out = layer(flat, offsets)  # bag 1 is empty, bag 3 holds only padding
    expected = reference(torch.tensor(flat), torch.tensor(offsets))
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL)
    out.sum().backward()
    expected.sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), reference.weight.grad.numpy(),
                               rtol=RTOL, atol=ATOL)


def test_embedding_bag_per_sample_weights_match_pytorch():
    layer, reference = embedding_bags("sum")
    bags, weights = np.array([[1, 2, 4], [4, 3, 9]]), spread((2, 3))
    out = layer(bags, per_sample_weights=md.tensor(weights))
    expected = reference(torch.tensor(bags), per_sample_weights=torch.tensor(weights))
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="mode='sum'"):
        embedding_bags("mean")[0](bags, per_sample_weights=md.tensor(weights))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_matches_pytorch_with_copied_weights(norm_first):
    arguments = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
                     dim_feedforward=16, dropout=0.0, batch_first=True, norm_first=norm_first)
    reference = T.Transformer(**arguments)
    layer = copied(reference, nn.Transformer(**arguments))
    assert list(layer.state_dict()) == list(reference.state_dict())
    src, tgt = rng.standard_normal((2, 5, 8)).astype(np.float32), \
        rng.standard_normal((2, 4, 8)).astype(np.float32)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(mask.numpy(),
                                  T.Transformer.generate_square_subsequent_mask(4).numpy())

    class WithMask:  # the causal target mask passed through, as a seq2seq model does
        def __init__(self, model, mask):
            self.model, self.mask = model, mask

        def __call__(self, source, target):
            return self.model(source, target, tgt_mask=self.mask)

        def named_parameters(self):
            return self.model.named_parameters()

    check_forward_backward(WithMask(layer, mask), WithMask(reference, torch.tensor(mask.numpy())),
                           [src, tgt])


def test_channel_dropout_drops_whole_channels_and_scales_the_rest():
    md.manual_seed(0)
    x = md.tensor(np.ones((40, 6, 3, 3), np.float32))
    out = nn.Dropout2d(0.5)(x).numpy()
    per_channel = out.reshape(40, 6, 9)
    assert set(np.unique(per_channel)) == {0.0, 2.0}
    assert (per_channel.min(-1) == per_channel.max(-1)).all()  # a channel is all kept or not
    assert 0.35 < (per_channel[..., 0] == 0).mean() < 0.65
    sequences = nn.Dropout1d(0.5)(md.tensor(np.ones((30, 4, 5), np.float32))).numpy()
    assert (sequences.min(-1) == sequences.max(-1)).all() and 0 < (sequences == 0).mean() < 1
    layer = nn.Dropout1d(0.3)
    layer.eval()
    np.testing.assert_array_equal(layer(x[:, :, 0]).numpy(), x[:, :, 0].numpy())
    with pytest.raises(ValueError, match="expected 3-d"):
        nn.Dropout2d()(md.tensor(np.ones((2, 3), np.float32)))


def test_parameter_containers_register_their_parameters_as_pytorchs():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([np.ones(3, np.float32), np.zeros(2, np.float32)])
            self.named = nn.ParameterDict({"a": np.ones(2, np.float32)})

        def forward(self, x):
            return x * self.scales[0] + self.named["a"].sum()

    class TorchModel(T.Module):
        def __init__(self):
            super().__init__()
            self.scales = T.ParameterList([T.Parameter(torch.ones(3)),
                                           T.Parameter(torch.zeros(2))])
            self.named = T.ParameterDict({"a": T.Parameter(torch.ones(2))})

    model = Model()
    assert list(model.state_dict()) == list(TorchModel().state_dict())
    model.scales.append(np.ones(1, np.float32))
    model.named["b"] = np.ones(1, np.float32)
    assert len(list(model.parameters())) == 5 and "b" in model.named
    model(md.tensor(np.ones(3, np.float32))).sum().backward()
    np.testing.assert_array_equal(model.scales[0].grad.numpy(), np.ones(3))
    with pytest.raises(IndexError, match="out of range"):
        model.scales[7]


SAVED = [
    nn.ReLU6, lambda: nn.Hardtanh(-0.5, 2.0), nn.SELU, lambda: nn.CELU(0.3), lambda: nn.GLU(1),
    nn.LogSigmoid, nn.Softsign, lambda: nn.Softmin(0), lambda: nn.Unflatten(-1, (2, 2)),
    lambda: nn.Dropout1d(0.2), lambda: nn.Dropout2d(0.3), lambda: nn.ZeroPad2d(1),
    lambda: nn.ConstantPad2d((1, 0, 2, 1), -1.0), lambda: nn.ReflectionPad2d(1),
    lambda: nn.ReplicationPad2d((0, 1, 1, 0)), lambda: nn.PixelShuffle(2),
    lambda: nn.EmbeddingBag(7, 3, mode="max", padding_idx=0),
    lambda: nn.Embedding(7, 3, padding_idx=0),  # its zeroed row broke loading: fixed here
    lambda: nn.ParameterList([np.ones((2, 3), np.float32)]),
    lambda: nn.ParameterDict({"w": np.ones(4, np.float64)}),
    lambda: nn.Transformer(8, 2, 1, 1, 16, dropout=0.0),
    nn.L1Loss, lambda: nn.SmoothL1Loss("sum", 0.5), lambda: nn.HuberLoss(delta=2.0),
    lambda: nn.BCELoss(weight=[0.5, 2.0]), lambda: nn.KLDivLoss("batchmean", log_target=True),
    lambda: nn.CosineEmbeddingLoss(0.1), lambda: nn.MarginRankingLoss(0.2),
    lambda: nn.TripletMarginLoss(0.5, p=1.0, swap=True), lambda: nn.GaussianNLLLoss(full=True),
    lambda: nn.CTCLoss(blank=2, zero_infinity=True),
]


@pytest.mark.parametrize("index", range(len(SAVED)))
def test_each_layer_rebuilds_from_a_saved_model_file(index, tmp_path):
    layer = SAVED[index]()
    for parameter in layer.parameters():
        parameter.data[...] = rng.standard_normal(parameter.shape).astype(parameter.dtype)
    md.save_model(layer, tmp_path / "layer.mdl")
    loaded = md.load_model(tmp_path / "layer.mdl")
    assert type(loaded) is type(layer) and loaded.get_config() == layer.get_config()
    for (name, value), expected in zip(loaded.state_dict().items(), layer.state_dict().values()):
        np.testing.assert_array_equal(value, expected, err_msg=name)


def images(n):
    return spread((n, 4, 4, 6))


# name -> (layer, input maker, an ONNX op the file must use)
EXPORTED = {
    "relu6": (nn.ReLU6, images, "Clip"),
    "hardtanh": (lambda: nn.Hardtanh(-1.0, 2.0), images, "Clip"),
    "selu": (nn.SELU, images, "Elu"),
    "celu": (lambda: nn.CELU(0.5), images, "Elu"),
    "glu": (lambda: nn.GLU(1), images, "Sigmoid"),
    "logsigmoid": (nn.LogSigmoid, images, "Log"),
    "softsign": (nn.Softsign, images, "Abs"),
    "softmin": (lambda: nn.Softmin(1), images, "Softmax"),
    "unflatten": (lambda: nn.Unflatten(1, (2, 2)), images, "Reshape"),
    "dropout2d": (lambda: nn.Dropout2d(0.5), images, None),
    "zero_pad": (lambda: nn.ZeroPad2d((1, 2, 0, 1)), images, "Where"),
    "constant_pad": (lambda: nn.ConstantPad2d(1, 3.0), images, "Where"),
    "reflection_pad": (lambda: nn.ReflectionPad2d((2, 1, 1, 2)), images, "Gather"),
    "replication_pad": (lambda: nn.ReplicationPad2d(2), images, "Gather"),
    "pixel_shuffle": (lambda: nn.PixelShuffle(2), images, "Transpose"),
    "embedding_bag": (lambda: nn.EmbeddingBag(10, 3, mode="mean"),
                      lambda n: rng.integers(0, 10, (n, 4)), "Gather"),
}


def check_onnx_export(layer, make, tmp_path, op=None):
    """Export ``layer`` traced on ``make(2)`` (a list of inputs), validate the file, and check
    that onnxruntime matches minidl at batch sizes 2 and 3."""
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime as ort
    from minidl.onnx import export_onnx

    layer.eval()
    path = tmp_path / "layer.onnx"
    examples = [md.tensor(x) for x in make(2)]
    export_onnx(layer, path, examples[0] if len(examples) == 1 else examples)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    if op is not None:
        assert op in {node.op_type for node in model.graph.node}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (2, 3):
        inputs = make(batch)
        with md.no_grad():
            expected = layer(*[md.tensor(x) for x in inputs]).numpy()
        (got,) = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_layer_exports_to_onnx_and_onnxruntime_agrees(name, tmp_path):
    build, make, op = EXPORTED[name]
    check_onnx_export(build(), lambda n: [make(n)], tmp_path, op)


def test_transformer_exports_to_onnx_and_onnxruntime_agrees(tmp_path):
    md.manual_seed(0)
    model = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)
    check_onnx_export(model, lambda n: [spread((n, 5, 8)), spread((n, 3, 8))], tmp_path)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="even"):
        nn.GLU()(md.tensor(np.ones((2, 3), np.float32)))
    with pytest.raises(ValueError, match="reflect padding"):
        nn.ReflectionPad2d(4)(md.tensor(np.ones((1, 1, 4, 4), np.float32)))
    with pytest.raises(ValueError, match="padding"):
        nn.ZeroPad2d((1, 2, 3))
    with pytest.raises(ValueError, match="upscale_factor"):
        nn.PixelShuffle(2)(md.tensor(np.ones((1, 3, 2, 2), np.float32)))
    with pytest.raises(ValueError, match="mode"):
        nn.EmbeddingBag(3, 2, mode="median")
    with pytest.raises(ValueError, match="offsets"):
        nn.EmbeddingBag(3, 2)(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="custom_encoder"):
        nn.Transformer(8, 2, custom_encoder=nn.Identity())
    with pytest.raises(ValueError, match="d_model=8"):
        nn.Transformer(8, 2, 1, 1, 16)(md.zeros(3, 2, 6), md.zeros(3, 2, 6))
