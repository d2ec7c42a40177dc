"""Functional ops inside users' modules: each reports itself and becomes ONNX nodes that
onnxruntime runs at other batch sizes with the same results."""

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.onnx import UnsupportedOperatorError, export_onnx

from onnx_checks import export_and_compare

rng = np.random.default_rng(1)


class Lambda(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function
        self.w = nn.Parameter(rng.standard_normal((4,)).astype(np.float32))

    def forward(self, *xs):
        return self.function(self, *xs)


MATRIX = rng.standard_normal((4, 5)).astype(np.float32)
VECTOR = rng.standard_normal((5,)).astype(np.float32)


def data(n):
    return rng.standard_normal((n, 3, 4)).astype(np.float32)


def positive(n):
    return rng.uniform(0.5, 2.0, (n, 3, 4)).astype(np.float32)


OPS = {
    "arithmetic_broadcast": (lambda m, x: (x + m.w) * 2 - x / (m.w.abs() + 1) - 0.5, data),
    "neg_and_reflected": (lambda m, x: 1 - (-x) + 3 / (x * x + 1), data),
    "pow_scalar": (lambda m, x: x ** 3 + x ** 2, data),
    "pow_tensor": (lambda m, x: x ** (m.w.abs() + 0.5), positive),
    "unary": (lambda m, x: x.exp() + x.log() + x.sqrt() + x.tanh() + x.sigmoid() + x.relu()
              + x.abs(), positive),
    "maximum_minimum": (lambda m, x: x.maximum(m.w) + x.minimum(m.w), data),
    "clamp": (lambda m, x: x.clamp(-0.5, 0.5) + x.clamp(min=0.1) + x.clamp(max=-0.1), data),
    "sum_mean": (lambda m, x: x.sum(axis=2) + x.mean(axis=-1) * 2, data),
    "reductions_keepdims": (lambda m, x: x - x.amax(axis=(1, 2), keepdims=True)
                            + x.amin(axis=1, keepdims=True), data),
    "reduce_over_batch_axis": (lambda m, x: x * x.mean(axis=0, keepdims=True), data),
    "reshape_transpose": (lambda m, x: x.reshape(x.shape[0], 4, 3).transpose(1, 2)
                          .reshape(-1, 12), data),
    "reshape_merging_batch": (lambda m, x: (x.reshape(-1, 4) @ m.w.reshape(4, 1)), data),
    "permute": (lambda m, x: x.permute(2, 0, 1), data),
    "unsqueeze_squeeze_flatten": (lambda m, x: x.unsqueeze(1).flatten(2).squeeze(1), data),
    "expand": (lambda m, x: x[:, :1, :].expand(x.shape[0], 3, 4) + x, data),
    "getitem_slices": (lambda m, x: x[:, 1:, ::2] * 2 + x[:, :2, 1:3].sum(), data),
    "getitem_negative_step_and_int": (lambda m, x: x[:, ::-1, 0] + x[..., -1], data),
    "getitem_none": (lambda m, x: x[:, None, 1] + 0, data),
    "getitem_int_array": (lambda m, x: x[:, [2, 0, 2]] + x[:, :, np.array([3, 1])].sum(), data),
    "getitem_negative_bounds": (lambda m, x: x[:, -2, -3:-1] + x[:, -1:, -100:100].sum(), data),
    # Backwards down to and through element 0 (a stop ONNX must not read as "the last").
    "getitem_backwards_through_first": (lambda m, x: x[:, 2::-2, 3:0:-1] + x[:, ::-2, ::-3].sum(),
                                        data),
    "getitem_empty_slice": (lambda m, x: x[:, 2:1] + 0, data),
    "getitem_whole_axes": (lambda m, x: x[:] + x[...], data),
    "getitem_none_before_the_batch_axis": (lambda m, x: x[None, ..., None, 1] + 0, data),
    "getitem_ellipsis_between": (lambda m, x: x[:, ..., ::-1] + x[..., 1:, :].sum(), data),
    "getitem_numpy_scalars": (lambda m, x: x[:, np.int64(1), np.array(2)] + 0, data),
    "getitem_index_tensor_and_int32_array": (
        lambda m, x: x[:, md.tensor([2, 0])] + x[:, :, np.array([3, 1], np.int32)].sum(), data),
    "getitem_two_dimensional_index_array": (lambda m, x: x[:, np.array([[0, 1], [2, 2]])] + 0,
                                            data),
    "getitem_index_array_after_none": (lambda m, x: x[:, None, :, [1, 3]] + 0, data),
    # The index array is computed from the input, so its batch axis becomes the result's.
    "getitem_index_computed_from_the_input": (
        lambda m, x: md.tensor(MATRIX)[x.argmax(axis=-1)] + 0, data),
    "concat": (lambda m, x: md.cat([x, x * 2, x[:, :1]], axis=1), data),
    "stack": (lambda m, x: md.stack([x, x + 1], axis=1), data),
    "where_constant_condition": (lambda m, x: md.where(md.tensor(np.array([True, False, True,
                                                                           False])), x, -x), data),
    "cast": (lambda m, x: (x * 10).to(dtype=np.int64).to(dtype=np.float32), data),
    "matmul": (lambda m, x: x @ md.tensor(MATRIX) @ md.tensor(VECTOR), data),
    "softmax_log_softmax": (lambda m, x: x.softmax(axis=1) + x.log_softmax(dim=-1), data),
    "clone_and_var": (lambda m, x: x.clone() + x.var(axis=2, keepdims=True), data),
    "functional_layers": (lambda m, x: nn.functional.layer_norm(x, (4,), None, None)
                          + nn.functional.gelu(x), data),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op(name, tmp_path):
    function, make = OPS[name]
    export_and_compare(Lambda(function), [make(2)], [[make(5)], [make(1)]], tmp_path)


@pytest.mark.parametrize("index", [
    lambda x: x[:, [0, 1], [1, 2]],          # two index arrays broadcast together
    lambda x: x[:, [0, 1], 1],               # an int beside an array is a second array
    lambda x: x[x > 0],                      # a mask is one index array per axis
], ids=["two_arrays", "array_and_int", "mask"])
def test_getitem_with_several_index_arrays_is_refused(index, tmp_path):
    with pytest.raises(UnsupportedOperatorError, match=r"GetItem\(advanced indexing\)"):
        export_onnx(Lambda(lambda m, x: index(x)), tmp_path / "m.onnx", md.tensor(data(2)))
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("index, batch_axis", [
    (lambda x: x[None, ..., None, 1], 1),                      # None before it moves it right
    (lambda x: x[:, None, 1], 0),                              # ... after it leaves it
    (lambda x: x.permute(1, 0, 2)[1], 0),                      # an int before it moves it left
    (lambda x: x.permute(1, 2, 0)[np.array([[0, 1], [2, 2]])], 3),  # a 2-D array before: right
    (lambda x: md.tensor(MATRIX)[x.argmax(axis=-1)], 0),       # it comes from the index array
    (lambda x: x[:1], None),                                   # sliced to a fixed size: gone
], ids=["none_before", "none_after", "int_before", "array_before", "from_the_index", "sliced"])
def test_getitem_follows_the_batch_axis(index, batch_axis, tmp_path):
    # The file names the output's batch axis "batch", as the input's: where indexing moved it,
    # the declaration must follow, or tools that link inputs to outputs by that name go wrong.
    import onnx

    path = export_and_compare(Lambda(lambda m, x: index(x) + 0), [data(2)], [[data(5)]],
                              tmp_path)
    dims = onnx.load(str(path)).graph.output[0].type.tensor_type.shape.dim
    named = [axis for axis, dim in enumerate(dims) if dim.dim_param == "batch"]
    assert named == ([] if batch_axis is None else [batch_axis])


def test_matmul_between_two_inputs(tmp_path):
    a = lambda n: rng.standard_normal((n, 3, 4)).astype(np.float32)  # noqa: E731
    b = lambda n: rng.standard_normal((n, 4, 2)).astype(np.float32)  # noqa: E731
    export_and_compare(Lambda(lambda m, x, y: x @ y), [a(1), b(1)], [[a(4), b(4)]], tmp_path)


def test_functional_batch_norm_and_conv(tmp_path):
    weight = md.tensor(rng.standard_normal((2, 3, 3, 3)).astype(np.float32))
    mean = md.tensor(rng.standard_normal(3).astype(np.float32))
    var = md.tensor(rng.uniform(0.5, 1.5, 3).astype(np.float32))

    def forward(m, x):
        h = nn.functional.batch_norm(x, mean, var, training=False)
        return nn.functional.conv2d(h, weight, padding=1).relu()

    x = lambda n: rng.standard_normal((n, 3, 5, 5)).astype(np.float32)  # noqa: E731
    export_and_compare(Lambda(forward), [x(1)], [[x(3)]], tmp_path)


def test_output_that_is_an_input_or_repeated(tmp_path):
    export_and_compare(Lambda(lambda m, x: (x, x.relu(), x.relu())), [data(1)], [[data(3)]],
                       tmp_path)


class WithLoss(nn.Module):
    def forward(self, x):
        target = md.tensor(np.zeros(x.shape[0], np.int64))
        return (nn.functional.cross_entropy(x, target)
                + nn.functional.binary_cross_entropy_with_logits(x, x.sigmoid()))


def test_unsupported_ops_are_all_named(tmp_path):
    with pytest.raises(UnsupportedOperatorError) as caught:
        export_onnx(WithLoss(), tmp_path / "m.onnx",
                    md.tensor(rng.standard_normal((2, 3)).astype(np.float32)))
    message = str(caught.value)
    unsupported = ["BinaryCrossEntropyWithLogitsFunction", "SoftmaxCrossEntropyFunction"]
    assert all(name in message for name in unsupported)
    assert caught.value.operators == unsupported
    assert isinstance(caught.value, ValueError)
    assert not (tmp_path / "m.onnx").exists()


def test_batch_norm_without_running_statistics_is_refused(tmp_path):
    with pytest.raises(UnsupportedOperatorError, match="batch statistics"):
        export_onnx(nn.BatchNorm1d(3, track_running_stats=False), tmp_path / "m.onnx",
                    md.tensor(rng.standard_normal((4, 3)).astype(np.float32)))


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError):
        export_onnx(nn.ReLU(), tmp_path / "m.onnx", np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="opset"):
        export_onnx(nn.ReLU(), tmp_path / "m.onnx", md.tensor(np.zeros((1, 2))), opset=9)


def test_where_on_a_mask_built_outside_the_ops_is_refused_not_frozen(tmp_path):
    # The mask is computed in NumPy, so the trace only sees its values: written down, it would be
    # the example's mask at every batch size. (x > 0 itself is traced: see test_onnx_masks.py.)
    def forward(m, x):
        return md.where(md.tensor(x.numpy() > 0), x, x * 0.1)

    with pytest.raises(UnsupportedOperatorError, match="constant condition"):
        export_onnx(Lambda(forward), tmp_path / "m.onnx", md.tensor(data(1)))
    assert not (tmp_path / "m.onnx").exists()


def test_where_on_a_constant_mask_shared_by_every_sample_is_exported(tmp_path):
    # Size 1 at the batch axis broadcasts: the same mask for every sample, whatever the batch.
    mask = md.tensor(rng.standard_normal((1, 3, 4)) > 0)
    export_and_compare(Lambda(lambda m, x: md.where(mask, x, -x)), [data(2)],
                       [[data(5)], [data(1)]], tmp_path)
