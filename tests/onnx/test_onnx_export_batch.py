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

from onnx_checks import export_and_compare, run_onnxruntime


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
