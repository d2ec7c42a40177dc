"""The operations composed of primitives (minidl.backend.composed) behave as the primitives they
replaced did, on every backend, and the contract stays short.

Each composed operation is checked against values worked out by hand and against NumPy's own
function on the awkward inputs (NaN, -0, the most negative integer, unsigned integers, bools),
bit for bit where the composition does NumPy's arithmetic. The cases cross to the backend with
``from_numpy`` and back with ``to_numpy``, so they run unchanged on the opaque test backend (which
proves the compositions use nothing but primitives) and on CUDA.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from minidl.backend import composed
from minidl.backend.primitives import ALL_PRIMITIVES, MATH_FUNCTIONS, Backend
from minidl.backend.reference import ReferenceBackend, implemented_by
from test_backend_primitive_list import BACKENDS, a, f32, from_backend, to_backend

# Operations that were primitives and are composed now: no backend may define them again.
COMPOSED_NOW = ("neg", "ones", "zeros_like", "ones_like", "fill_", "tanh", "sign", "clip", "not_equal",
                "less_equal", "greater", "greater_equal", "logical_not", "logical_and",
                "logical_or", "min", "argmin", "stack")

# name -> (arguments after the backend, expected), as the primitive list's behaviour cases.
CASES = {
    "ones": (((2,), np.int64), a([1, 1], np.int64)),
    "neg": ((a([1, -2, 0]),), a([-1, 2, -0.0])),
    "zeros_like": ((a([[3, 4]]),), a([[0, 0]])),
    "ones_like": ((a([3, 4], np.int64),), a([1, 1], np.int64)),
    "sign": ((a([-3, 0, 2, -0.0, np.nan]),), a([-1, 0, 1, 0, np.nan])),
    "clip": ((a([-2, 0, 2, np.nan]), None, 1.0), a([-2, 0, 1, np.nan])),
    "not_equal": ((a([1, 2, np.nan]), 2.0), a([True, False, True], bool)),
    "less_equal": ((a([1, 2, 3, np.nan]), 2.0), a([True, True, False, False], bool)),
    "greater": ((a([1, 2, np.nan]), 1.0), a([False, True, False], bool)),
    "greater_equal": ((a([1, 2, np.nan]), 2.0), a([False, True, False], bool)),
    "logical_not": ((a([True, False], bool),), a([False, True], bool)),
    "logical_and": ((a([True, True, False], bool), a([True, False, False], bool)),
                    a([True, False, False], bool)),
    "logical_or": ((a([True, False, False], bool), a([[True], [False]], bool)),
                   a([[True, True, True], [True, False, False]], bool)),
    "min": ((a([[1, 5], [3, 4]]),), a(1)),
    "argmin": ((a([3, 1, 1]),), a(1, np.int64)),
    "stack": (([a([1, 2]), a([3, 4])], 1), a([[1, 3], [2, 4]])),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    return BACKENDS[request.param]


def test_the_contract_is_at_most_seventy_primitives_and_none_is_composed():
    assert len(ALL_PRIMITIVES) <= 70
    assert not set(COMPOSED_NOW) & set(ALL_PRIMITIVES)


@pytest.mark.parametrize("name", COMPOSED_NOW)
def test_no_backend_defines_a_composed_operation(name):
    # A kernel left behind in a backend would be code nobody calls and nobody tests.
    for backend in BACKENDS.values():
        for cls in type(backend).__mro__:
            assert name not in vars(cls), f"{cls.__name__} still defines {name}"


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_composed_operation_behaves_as_the_primitive_did(backend, name):
    arguments, expected = CASES[name]
    result = from_backend(backend, getattr(composed, name)(backend,
                                                           *to_backend(backend, arguments)))
    assert result.dtype == expected.dtype and result.shape == expected.shape, name
    np.testing.assert_array_equal(result, expected, err_msg=name)


def test_fill_writes_in_place_casting_as_an_assignment(backend):
    floats, ints = backend.from_numpy(a([1, 2])), backend.from_numpy(a([1, 2], np.int64))
    assert composed.fill_(backend, floats, 7.0) is None
    composed.fill_(backend, ints, 2.5)  # cast as PyTorch's fill_ casts: 2.5 into integers is 2
    np.testing.assert_array_equal(backend.to_numpy(floats), a([7, 7]))
    np.testing.assert_array_equal(backend.to_numpy(ints), a([2, 2], np.int64))


def test_tanh_is_one_of_the_math_functions(backend):
    assert "tanh" in MATH_FUNCTIONS
    values = a([-2, 0, 0.5, np.inf])
    result = backend.to_numpy(backend.math_function(backend.from_numpy(values), "tanh"))
    assert result.dtype == f32
    np.testing.assert_allclose(result, np.tanh(values), rtol=1e-6)


# -- the same bits as NumPy on awkward values -----------------------------------------------------

AWKWARD = {
    "float32": a([0.5, -0.0, 0.0, np.nan, -np.inf, 3, -3, 0.5]),
    "float64": np.array([-1e300, 0.0, -0.0, 2.5, np.inf], np.float64),
    "int64": np.array([np.iinfo(np.int64).min, -1, 0, 7, np.iinfo(np.int64).max, -1], np.int64),
    "int8": np.array([-128, 5, 127, -128, 0], np.int8),
    "uint8": np.array([255, 0, 7, 0, 200], np.uint8),
    "bool": np.array([True, False, True], bool),
}


def _bits(array):
    # Compare by bit pattern so -0 differs from 0 and NaN equals NaN.
    array = np.ascontiguousarray(array)
    return array.view(f"u{array.dtype.itemsize}") if array.dtype.kind == "f" else array


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("dtype", sorted(AWKWARD))
def test_min_and_argmin_match_numpy_bit_for_bit(backend, dtype):
    values = AWKWARD[dtype]
    array = backend.from_numpy(values)
    for axis, keepdims in ((None, False), (0, True)):
        smallest = backend.to_numpy(composed.min(backend, array, axis=axis, keepdims=keepdims))
        np.testing.assert_array_equal(_bits(smallest),
                                      _bits(np.min(values, axis=axis, keepdims=keepdims)))
        assert smallest.dtype == values.dtype
    where = backend.to_numpy(composed.argmin(backend, array))
    assert where.dtype == np.int64 and where == np.argmin(values)


def test_min_over_rows_picks_each_rows_first_smallest(backend):
    values = a([[3, 1, 1], [np.nan, 0, -5], [2, 2, 2]])
    array = backend.from_numpy(values)
    np.testing.assert_array_equal(backend.to_numpy(composed.argmin(backend, array, axis=1)),
                                  [1, 0, 0])  # the first of equal ones; NaN wins, as NumPy
    np.testing.assert_array_equal(backend.to_numpy(composed.min(backend, array, axis=(1,))),
                                  np.min(values, axis=1))


def test_min_over_an_empty_axis_is_refused(backend):
    with pytest.raises(ValueError):
        backend.to_numpy(composed.min(backend, backend.zeros((0, 2), f32), axis=0))


def _nan_as_nan(array):
    # One NaN for every NaN: neg keeps a NaN's sign bit where NumPy's negative flips it.
    return np.where(np.isnan(array), np.nan, array) if array.dtype.kind == "f" else array


# The CUDA simulator computes each element as a NumPy scalar, which warns where integers wrap.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("name, numpy_function", [("sign", np.sign), ("neg", np.negative)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int8", "uint8"])
def test_sign_and_neg_match_numpy_bit_for_bit(backend, name, numpy_function, dtype):
    values = AWKWARD[dtype]
    result = backend.to_numpy(getattr(composed, name)(backend, backend.from_numpy(values)))
    assert result.dtype == values.dtype
    np.testing.assert_array_equal(_bits(_nan_as_nan(result)),
                                  _bits(_nan_as_nan(numpy_function(values))))


def test_neg_refuses_bools(backend):
    with pytest.raises(TypeError, match="bool"):
        composed.neg(backend, backend.from_numpy(AWKWARD["bool"]))


COMPARISONS = {"not_equal": np.not_equal, "less_equal": np.less_equal, "greater": np.greater,
               "greater_equal": np.greater_equal}


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparisons_match_numpy_with_nan_and_broadcasting(backend, name):
    left = a([[np.nan], [1], [2], [-np.inf]])
    right = a([np.nan, 1, 2, -0.0, np.inf])
    for x, y in ((left, right), (left, 1.0), (2.0, right)):
        result = backend.to_numpy(getattr(composed, name)(backend, *to_backend(backend, (x, y))))
        np.testing.assert_array_equal(result, COMPARISONS[name](x, y), err_msg=name)


def test_clip_matches_numpy_and_never_aliases(backend):
    values = a([-3, -1, 0, 1, 3, np.nan, -0.0])
    array = backend.from_numpy(values)
    for low, high in ((-1.0, 1.0), (None, 0.5), (0.0, None)):
        result = backend.to_numpy(composed.clip(backend, array, low, high))
        # By value: which zero a tie of -0 with a bound 0 keeps is the backend's maximum's
        # choice (NumPy keeps the bound, CUDA the element), as it was for the primitive.
        np.testing.assert_array_equal(result, np.clip(values, low, high))
    unbounded = composed.clip(backend, array, None, None)
    assert unbounded is not array and backend.owns_memory(unbounded)


def test_stack_joins_along_a_new_axis_and_names_a_mismatch(backend):
    parts = [a([[1, 2, 3]]), a([[4, 5, 6]])]
    for axis in (0, 1, 2, -1, -3):
        result = backend.to_numpy(composed.stack(backend, to_backend(backend, parts), axis))
        np.testing.assert_array_equal(result, np.stack(parts, axis))
    with pytest.raises(ValueError, match=r"array 1 has \(1, 2\)"):
        composed.stack(backend, to_backend(backend, [a([[1, 2, 3]]), a([[1, 2]])]), 0)
    with pytest.raises(ValueError, match="axis 3"):
        composed.stack(backend, to_backend(backend, parts), 3)
    with pytest.raises(ValueError, match="at least one"):
        composed.stack(backend, [], 0)


# -- the reference backend is generated from its modules -----------------------------------------

def _module(name, **functions):
    # A stand-in module: functions defined "in" it, as the real modules' own functions are.
    module = type(inspect)(name)
    for key, function in functions.items():
        function.__module__ = name
        setattr(module, key, function)
    return module


def test_the_reference_backend_binds_each_primitive_to_its_module_function():
    from minidl.backend.reference import array_ops, conv
    assert ReferenceBackend.add is array_ops.add and ReferenceBackend.im2col is conv.im2col
    assert set(ALL_PRIMITIVES) <= set(vars(ReferenceBackend))


def test_a_primitive_no_module_implements_is_named_when_the_class_is_made():
    from minidl.backend.reference import array_ops, conv, nn_kernels, optim_kernels, pool, \
        random_kernels, rnn_kernels
    modules = (array_ops, conv, nn_kernels, optim_kernels, pool, random_kernels)  # no RNN cells
    with pytest.raises(TypeError, match=r"Partial: no module implements lstm_cell_forward, "
                                        r"lstm_cell_backward, gru_cell_forward"):
        implemented_by(*modules, composed_primitives=("running_average_", "sgd_update_group",
                                                      "adam_update_group"))(
            type("Partial", (Backend,), {}))
    twice = _module("second_copy", add=lambda a, b: None)
    with pytest.raises(TypeError, match=r"add is implemented by .*array_ops and second_copy"):
        implemented_by(*modules, rnn_kernels, twice)(type("Twice", (Backend,), {}))
    with pytest.raises(TypeError, match="softmax_grad is not a primitive of the contract"):
        implemented_by(*modules, rnn_kernels, composed_primitives=("softmax_grad",))(
            type("Extra", (Backend,), {}))
    with pytest.raises(TypeError, match="minidl.backend.composed has no softmax;"):
        implemented_by(*modules, rnn_kernels, composed_primitives=("softmax",))(
            type("Unwritten", (Backend,), {}))

