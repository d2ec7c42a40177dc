"""Values that code ported from PyTorch expects: pow of integers, gradients at 0, dtype
promotion, //, %, var/std(correction=), the dim alias, module-level functions, casts.

Each case states PyTorch's documented result; where torch is installed it is also compared."""

import numpy as np
import pytest

import minidl as md

F32, F64, I64, I32 = np.float32, np.float64, np.int64, np.int32


def test_int_tensor_to_a_float_power_is_float32():
    out = md.tensor([4, 9]) ** 0.5
    assert out.dtype == F32
    np.testing.assert_array_equal(out.numpy(), [2.0, 3.0])
    np.testing.assert_allclose((md.tensor([4, 9]) ** 2.5).numpy(), [32.0, 243.0])
    assert (md.tensor([4, 9]) ** 2).dtype == I64  # an integer power stays integer
    assert (2.5 ** md.tensor([1, 2])).dtype == F32


def test_power_gradients_at_zero_are_zero_not_nan():
    x = md.tensor([0.0, 2.0], requires_grad=True)
    (x ** 0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    a = md.tensor([0.0, 3.0], requires_grad=True)
    b = md.tensor([0.0, 0.0], requires_grad=True)
    (a ** b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.0, 0.0])  # torch: 0 at a = b = 0
    np.testing.assert_allclose(b.grad.numpy(), [0.0, np.log(3.0)], rtol=1e-6)


PROMOTIONS = [  # (expression, PyTorch's dtype)
    ("int / int", lambda: md.tensor([1, 2]) / md.tensor([2, 4]), F32),
    ("int / 2", lambda: md.tensor([1, 2]) / 2, F32),
    ("f32 + f64 0-d", lambda: md.tensor([1.0]) + md.tensor(np.float64(2.0)), F32),
    ("f32 + np.float64", lambda: md.tensor([1.0]) + np.float64(2.0), F32),
    ("int64 + f32 0-d", lambda: md.tensor([1]) + md.tensor(np.float32(2.0)), F32),
    ("int32 + int64 0-d", lambda: md.tensor([1], dtype=I32) + md.tensor(5), I32),
    ("int32 + int64", lambda: md.tensor([1], dtype=I32) + md.tensor([5]), I64),
    ("int64 * f32", lambda: md.tensor([1]) * md.tensor([2.0]), F32),
    ("bool * 1.5", lambda: md.tensor([True, False]) * 1.5, F32),
    ("bool + 2", lambda: md.tensor([True]) + 2, I64),
    ("where(c, f32, int64)",
     lambda: md.where(md.tensor([True, False]), md.tensor([1.0, 2.0]), md.tensor([3, 4])), F32),
    ("where(c, int64, 0.5)", lambda: md.where(md.tensor([True]), md.tensor([3]), 0.5), F32),
    ("clamp(int, 0.5)", lambda: md.tensor([0, 1, 2]).clamp(0.5), F32),
    ("clamp(int, 1)", lambda: md.tensor([0, 1, 2]).clamp(1), I64),
    ("f16 + f32 0-d", lambda: md.tensor([1.0], dtype=np.float16) + md.tensor(np.float32(1)),
     np.float16),
    ("md.tensor(float64 array)", lambda: md.tensor(np.array([1.0, 2.0])), F64),
    ("md.tensor(python floats)", lambda: md.tensor([1.0, 2.0]), F32),
    ("int // int", lambda: md.tensor([7, -7]) // 2, I64),
    ("int % 2.0", lambda: md.tensor([7, -7]) % 2.0, F32),
]


@pytest.mark.parametrize("name,expression,dtype", PROMOTIONS, ids=[p[0] for p in PROMOTIONS])
def test_dtype_promotion_follows_torch(name, expression, dtype):
    assert expression().dtype == np.dtype(dtype)


def test_clamp_of_int_at_half_values():
    np.testing.assert_array_equal(md.tensor([0, 1, 2]).clamp(0.5).numpy(), [0.5, 1.0, 2.0])


def test_a_float64_upstream_gradient_is_cast_to_the_graph_dtype():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.backward(md.tensor(np.array([1.0, 0.5])))  # float64
    assert x.grad.dtype == F32
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 1.5])


def test_floor_division_and_remainder_follow_python_signs():
    a, b = md.tensor([7, -7, 7, -7]), md.tensor([2, 2, -2, -2])
    np.testing.assert_array_equal((a // b).numpy(), [3, -4, -4, 3])
    np.testing.assert_array_equal((a % b).numpy(), [1, 1, -1, -1])
    np.testing.assert_array_equal((7 // md.tensor([2, -2])).numpy(), [3, -4])
    np.testing.assert_allclose((md.tensor([5.5, -5.5]) % 2).numpy(), [1.5, 0.5])


def test_remainder_gradients():
    a = md.tensor([5.5, -5.5], dtype=F64, requires_grad=True)
    b = md.tensor([2.0, 2.0], dtype=F64, requires_grad=True)
    (a % b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [-2.0, 3.0])  # -floor(a / b)
    x = md.tensor([3.0], requires_grad=True)
    (x // 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0])


def test_var_and_std_take_correction_and_unbiased():
    data = np.array([[1.0, 2.0, 4.0, 7.0], [0.0, 0.0, 1.0, 1.0]])
    x = md.tensor(data)
    for correction in (0, 1, 2):
        np.testing.assert_allclose(x.var(dim=1, correction=correction).numpy(),
                                   data.var(axis=1, ddof=correction))
        np.testing.assert_allclose(md.std(x, 1, correction=correction).numpy(),
                                   data.std(axis=1, ddof=correction))
    np.testing.assert_allclose(x.var(unbiased=False).numpy(), data.var())
    np.testing.assert_allclose(x.std(dim=0, keepdim=True).numpy(),
                               data.std(axis=0, ddof=1, keepdims=True))
    with np.errstate(divide="ignore"):  # divisor 0: inf, as torch (which warns too)
        assert np.isinf(md.tensor([1.0, 3.0]).var(correction=2).item())


def test_dim_is_accepted_wherever_axis_is():
    x = md.tensor(np.arange(6.0).reshape(2, 3))
    assert x.argmax(dim=1).tolist() == [2, 2]
    assert md.argmin(x, dim=0, keepdim=True).shape == (1, 3)
    assert x.sum(dim=0).shape == (3,) and x.mean(dim=(0, 1)).shape == ()
    assert x.unsqueeze(dim=0).shape == (1, 2, 3) and x.unsqueeze(dim=0).squeeze(dim=0).shape == (2, 3)
    assert x.softmax(dim=0).shape == (2, 3) and md.softmax(x, dim=1).shape == (2, 3)
    assert md.cat([x, x], dim=1).shape == (2, 6)
    with pytest.raises(TypeError, match="not both"):
        x.sum(axis=0, dim=1)


def test_module_level_functions():
    x = md.tensor([[1.0, -2.0], [3.0, 0.5]])
    assert md.max(x).item() == 3.0
    values, indices = md.max(x, 1)
    assert values.tolist() == [1.0, 3.0] and indices.tolist() == [0, 0]
    assert md.min(x, dim=0).indices.tolist() == [0, 0]
    assert md.sum(x).item() == 2.5 and md.mean(x, dim=0).tolist() == [2.0, -0.75]
    assert md.argmax(x).item() == 2
    np.testing.assert_allclose(md.matmul(x, x).numpy(), x.numpy() @ x.numpy())
    np.testing.assert_allclose(md.relu(x).numpy(), np.maximum(x.numpy(), 0))
    np.testing.assert_allclose(md.exp(x).numpy(), np.exp(x.numpy()), rtol=1e-6)
    for name in ("log", "sqrt", "tanh", "sigmoid", "abs", "neg", "amax", "amin", "var", "std",
                 "clamp", "pow", "maximum", "minimum", "reshape", "transpose", "permute",
                 "flatten", "log_softmax", "floor_divide", "remainder", "index_put"):
        assert callable(getattr(md, name)), name


def test_casts_and_type():
    x = md.tensor([1.7, -2.2, 0.0])
    assert x.type() == "minidl.FloatTensor"
    assert x.long().tolist() == [1, -2, 0] and x.long().type() == "minidl.LongTensor"
    assert x.int().dtype == I32 and x.double().dtype == F64 and x.half().dtype == np.float16
    assert x.bool().tolist() == [True, True, False] and x.long().float().dtype == F32
    assert x.type(md.float64).dtype == F64 and x.type("torch.IntTensor").dtype == I32
    with pytest.raises(ValueError, match="unknown tensor type"):
        x.type("minidl.ComplexTensor")


def test_inference_mode_records_no_graph():
    w = md.tensor([1.0], requires_grad=True)
    with md.inference_mode():
        assert not (w * 2).requires_grad
    with md.inference_mode(False):
        assert (w * 2).requires_grad

    @md.inference_mode()
    def predict():
        return w * 2

    assert not predict().requires_grad and (w * 2).requires_grad


def test_set_num_threads():
    import numba
    before = md.get_num_threads()
    try:
        md.set_num_threads(1)
        assert md.get_num_threads() == 1 and numba.get_num_threads() == 1
    finally:
        md.set_num_threads(before)
    with pytest.raises(ValueError, match="positive"):
        md.set_num_threads(0)


def test_any_and_all():
    x = md.tensor([[0, 1], [0, 0]])
    assert x.any().item() and not x.all().item()
    assert x.any(dim=1).tolist() == [True, False]
    assert md.all(x == 0, dim=0, keepdim=True).tolist() == [[True, False]]
    assert md.zeros(0).all().item() and not md.zeros(2, 0).any(dim=1).tolist()[0]
