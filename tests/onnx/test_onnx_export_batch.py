"""A file that declares a dynamic batch must compute the same thing at every batch size.

Tracing sees numbers: a Python int read from ``x.shape[0]``, or a reshape that merges the batch
axis and splits it again, would be baked into the file. Export traces a second time at another
batch size and refuses, naming the op, when the graph changes; sizes that merely grow with the
batch are declared symbolic.
"""

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.onnx import export_onnx

from onnx_checks import export_and_compare, minidl_outputs, run_onnxruntime


class Lambda(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x)


def example(n=2):
    return md.tensor(np.arange(4 * n, dtype=np.float32).reshape(n, 4))


def test_a_reshape_that_merges_and_splits_the_batch_is_refused_naming_it(tmp_path):
    model = Lambda(lambda x: (x.reshape(-1) * 2).reshape(x.shape[0], -1))
    with pytest.raises(ValueError, match=r"Reshape.*batch size.*dynamic_batch=False"):
        export_onnx(model, tmp_path / "m.onnx", example())
    assert not (tmp_path / "m.onnx").exists()


def test_a_constant_sized_from_x_shape_0_is_refused_naming_the_op(tmp_path):
    model = Lambda(lambda x: md.cat([x, md.zeros(x.shape[0], 3)], axis=1))
    with pytest.raises(ValueError, match=r"Concat.*batch size"):
        export_onnx(model, tmp_path / "m.onnx", example())


def test_the_same_models_export_with_a_fixed_batch(tmp_path):
    model = Lambda(lambda x: md.cat([x, md.zeros(x.shape[0], 3)], axis=1))
    export_onnx(model, tmp_path / "m.onnx", example(), dynamic_batch=False)
    x = example().numpy()
    np.testing.assert_array_equal(run_onnxruntime(tmp_path / "m.onnx", [x])[0],
                                  model(md.tensor(x)).numpy())


def test_an_output_merged_with_the_batch_gets_a_symbolic_size(tmp_path):
    model = Lambda(lambda x: x.reshape(-1) * 2)
    path = export_and_compare(model, [example(2).numpy()],
                              [[example(n).numpy()] for n in (1, 3, 5)], tmp_path)
    import onnx
    (dim,) = onnx.load(str(path)).graph.output[0].type.tensor_type.shape.dim
    assert dim.dim_param and not dim.HasField("dim_value")


def seq_first(seq=5, batch=2, features=16):
    rng = np.random.default_rng(0)
    return rng.standard_normal((seq, batch, features)).astype(np.float32)


def seq_first_models():
    md.manual_seed(0)
    return {"transformer": nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0),
            "lstm": nn.LSTM(16, 8, num_layers=2),
            "gru": Lambda(nn.GRU(16, 8, bidirectional=True)),
            "attention": Lambda(lambda x, a=nn.MultiheadAttention(16, 4): a(x, x, x)[0])}


@pytest.mark.parametrize("name", sorted(seq_first_models()))
def test_seq_first_models_export_with_the_batch_on_axis_1(tmp_path, name):
    """batch_first=False (PyTorch's default) used to bake the batch into the file: onnxruntime
    refused another batch size, and minidl's own re-import failed to broadcast."""
    import onnx

    model = seq_first_models()[name]
    # A layer says it is sequence-first; a function of the input says so with batch_axis=.
    options = {"batch_axis": 1} if isinstance(model, Lambda) else {}
    path = export_and_compare(model, [seq_first(batch=2)],
                              [[seq_first(batch=2)], [seq_first(batch=3)]], tmp_path, **options)
    declared = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in declared] == [5, "batch", 16]
    # minidl's own import of the file runs at the other batch size too.
    imported = md.load_model(path)
    for got, expected in zip(minidl_outputs(imported, [seq_first(batch=3)]),
                             minidl_outputs(model, [seq_first(batch=3)])):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_bare_lstm_exports_its_nested_outputs_flattened(tmp_path):
    """nn.LSTM returns (out, (h, c)): exported as three outputs, as PyTorch's exporter does."""
    import onnx

    md.manual_seed(0)
    model = nn.LSTM(16, 8, batch_first=True)
    x = np.ones((2, 5, 16), np.float32)
    path = export_onnx(model, tmp_path / "m.onnx", md.tensor(x))
    assert [o.name for o in onnx.load(path).graph.output] == ["output_0", "output_1", "output_2"]
    out, (h, c) = model(md.tensor(x))
    for got, expected in zip(run_onnxruntime(path, [x]), (out, h, c)):
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_an_output_that_is_not_tensors_is_refused_naming_where(tmp_path):
    model = Lambda(lambda x: (x, {"h": x}))
    with pytest.raises(TypeError, match=r"output\[1\].*dict"):
        export_onnx(model, tmp_path / "m.onnx", example())
