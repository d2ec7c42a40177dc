"""Every backend implements every primitive of the contract with the contract's signature and the
contract's behaviour.

Behaviour is checked against values worked out by hand (or from the published Philox test
vectors), never against another backend, so the reference itself is held to the contract too.
Each case crosses to the backend with ``from_numpy`` and back with ``to_numpy``, so it runs
unchanged on the opaque test backend.
"""

from __future__ import annotations

import copy
import inspect
import math

import numpy as np
import pytest

import minidl.backend
import minidl.cuda
from minidl.backend.numba_cpu import NumbaCpuBackend
from minidl.backend.primitives import ALL_PRIMITIVES, Backend, random_blocks, signature
from minidl.backend.reference import ReferenceBackend
from opaque_backend import OpaqueBackend

BACKENDS = {"numpy": ReferenceBackend(), "numba": NumbaCpuBackend(), "opaque": OpaqueBackend()}
if minidl.cuda.is_available():  # a GPU, or numba's simulator (see tests/conftest.py)
    BACKENDS["cuda"] = minidl.backend.get_backend("cuda")


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    return BACKENDS[request.param]


def _inherited_from_a_tested_backend(backend, name) -> bool:
    """Whether ``backend`` takes primitive ``name`` unchanged from another backend tested here.

    Numba's CPU backend replaces a few primitives and inherits the rest from the reference: to
    check those again under its name would only check the reference twice, a case that could
    not fail on its own.
    """
    provider = next(c for c in type(backend).__mro__ if name in vars(c))
    return any(provider is type(other) for other in BACKENDS.values() if other is not backend)


def own_implementations(names):
    """(backend key, primitive) for each primitive of ``names`` that a backend implements itself."""
    return [pytest.param(key, name, id=f"{key}-{name}") for key in sorted(BACKENDS)
            for name in names if not _inherited_from_a_tested_backend(BACKENDS[key], name)]


def test_the_list_is_the_contracts_methods():
    assert len(ALL_PRIMITIVES) == len(set(ALL_PRIMITIVES)) > 60
    assert "conv_output_size" not in ALL_PRIMITIVES  # host arithmetic is not a primitive
    for name in ("where", "setitem_", "assign_", "take", "one_hot", "random_uniform"):
        assert name in ALL_PRIMITIVES
    for name in ALL_PRIMITIVES:
        assert getattr(Backend, name).__doc__, f"{name} is not documented"


def test_a_backend_that_inherits_a_primitive_is_checked_only_for_its_own():
    numba = [name for key, name in (p.values for p in own_implementations(ALL_PRIMITIVES))
             if key == "numba"]
    assert set(numba) == {name for name in vars(NumbaCpuBackend) if name in ALL_PRIMITIVES}
    assert len(own_implementations(ALL_PRIMITIVES)) >= 2 * len(ALL_PRIMITIVES) + len(numba)


@pytest.mark.parametrize("key, name", own_implementations(ALL_PRIMITIVES))
def test_every_primitive_is_implemented_with_the_contracts_signature(key, name):
    backend = BACKENDS[key]
    implementation = getattr(type(backend), name)
    assert implementation is not getattr(Backend, name), f"{name} is not implemented"
    actual = inspect.signature(getattr(backend, name))
    expected = signature(name)
    assert [(p.name, p.kind, p.default) for p in actual.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in expected.parameters.values()], name


def test_the_numba_backend_names_its_base_and_what_it_replaces():
    assert NumbaCpuBackend.__bases__ == (ReferenceBackend,)
    replaced = {name for name in vars(NumbaCpuBackend) if name in ALL_PRIMITIVES}
    assert {"im2col", "adam_update", "random_uniform", "layer_norm_forward"} <= replaced
    assert "matmul" not in replaced and NumbaCpuBackend.matmul is ReferenceBackend.matmul


def test_registering_checks_the_backend():
    class Partial(Backend):
        name = "partial"
        add = staticmethod(lambda a, b: a)

    with pytest.raises(TypeError, match="does not implement"):
        minidl.backend.register_backend("partial", Partial())
    with pytest.raises(TypeError, match="Backend instance"):
        minidl.backend.register_backend("thing", object())
    with pytest.raises(ValueError, match="cpu"):
        minidl.backend.register_backend("cpu", ReferenceBackend())


def test_device_names_are_parsed_apart_from_the_backend_choice():
    parse = minidl.backend.parse_device
    assert parse("cpu") == ("cpu", 0) and parse("CUDA:1") == ("cuda", 1)
    assert minidl.backend.canonical_device("cuda") == "cuda:0"
    assert minidl.backend.canonical_device("cuda:1") == "cuda:1"
    for bad in ("cuda:x", "cpu:1", "cpu:numpy", "tpu"):
        with pytest.raises(ValueError, match=bad.split(":")[0]):
            parse(bad)


# -- behaviour ---------------------------------------------------------------------------------

f32 = np.float32


def a(values, dtype=f32):
    return np.array(values, dtype=dtype)


# The Philox4x32-10 known-answer vector for counter 0 and key 0 (Random123's kat_vectors).
PHILOX_ZERO = [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def _uniform53(high, low):
    return ((high >> 5) * 2**26 + (low >> 6)) * 2.0**-53


# name -> (arguments: NumPy arrays go through from_numpy, anything else as it is; expected)
# An expected tuple means a tuple result; None means "returns None" (in place).
CASES = {
    "zeros": (((2,), f32), a([0, 0])),
    "full": (((2,), 1.5, f32), a([1.5, 1.5])),
    "astype": ((a([1.7, -1.7]), np.int64), a([1, -1], np.int64)),
    "copy": ((a([1, 2]),), a([1, 2])),
    "owns_memory": ((a([1, 2]),), True),
    "add": ((a([1, 2]), 0.5), a([1.5, 2.5])),
    "sub": ((1, a([1, 2])), a([0, -1])),
    "mul": ((a([[1], [2]]), a([3, 4])), a([[3, 4], [6, 8]])),
    "div": ((a([1, 0]), a([4, 0])), a([0.25, np.nan])),
    "floor_divide": ((a([7, -7]), 2.0), a([3, -4])),
    "remainder": ((a([7, -7], np.int64), 3), a([1, 2], np.int64)),
    "power": ((a([2, 3]), 2.0), a([4, 9])),
    # asin outside [-1, 1] is nan, atanh's poles are ±inf (as NumPy), erf(∞) is 1.
    "math_function": ((a([0.5, 2, -1, 1, np.inf]), "atanh"),
                      a([math.atanh(0.5), np.nan, -np.inf, np.inf, np.nan])),
    "sigmoid": ((a([0, -1000, 1000]),), a([0.5, 0, 1])),
    "relu": ((a([-1, 0, 2]),), a([0, 0, 2])),
    "relu_backward": ((a([5, 5, 5]), a([-1, 0, 2])), a([0, 0, 5])),
    "abs": ((a([-1, 2]),), a([1, 2])),
    "maximum": ((a([1, 5]), a([3, 2])), a([3, 5])),
    "minimum": ((a([1, 5]), a([3, 2])), a([1, 2])),
    "where": ((a([True, False], bool), a([1, 2]), 0.0), a([1, 0])),
    "equal": ((a([1, 2]), 2.0), a([False, True], bool)),
    "less": ((a([1, 2]), 2.0), a([True, False], bool)),
    "sum": ((a([[1, 2], [3, 4]]), (0,), True), a([[4, 6]])),
    "max": ((a([[1, 5], [3, 4]]), (1,)), a([5, 4])),
    "argmax": ((a([[1, 5], [7, 4]]), 0), a([1, 0], np.int64)),
    "reshape": ((a([1, 2, 3, 4]), (2, 2)), a([[1, 2], [3, 4]])),
    "transpose": ((a([[1, 2]]), (1, 0)), a([[1], [2]])),
    "broadcast_to": ((a([1, 2]), (2, 2)), a([[1, 2], [1, 2]])),
    "getitem": ((a([[1, 2], [3, 4]]), (a([1, 1, 0], np.int64), slice(0, 1))), a([[3], [3], [1]])),
    "index_add": (((3,), (a([0, 0, 2], np.int64),), a([1, 2, 5]), f32), a([3, 0, 5])),
    "take": ((a([[1, 2], [3, 4]]), a([[1], [0]], np.int64)), a([[[3, 4]], [[1, 2]]])),
    "one_hot": ((a([2, 0], np.int64), 3, f32), a([[0, 0, 1], [1, 0, 0]])),
    "nonzero": ((a([[True, False], [False, True]], bool),),
                (a([0, 1], np.int64), a([0, 1], np.int64))),
    "concatenate": (([a([1]), a([2, 3])], 0), a([1, 2, 3])),
    "matmul": ((a([[1, 2]]), a([[3], [4]])), a([[11]])),
    "random_uniform": (((4,), f32, (0, 0), 0), a([(w >> 8) * 2.0**-24 for w in PHILOX_ZERO])),
    "random_normal": (((1,), np.float64, (0, 0), 0), a([
        math.sqrt(-2 * math.log(1 - _uniform53(*PHILOX_ZERO[:2])))
        * math.cos(2 * math.pi * _uniform53(*PHILOX_ZERO[2:]))], np.float64)),
    "im2col": ((a([[[[1, 2], [3, 4]]]]), (1, 1), (1, 1), (0, 0), (1, 1)), a([[1, 2, 3, 4]])),
    "col2im": ((a([[1, 2, 3, 4]]), (1, 1, 2, 2), (1, 1), (1, 1), (0, 0), (1, 1)),
               a([[[[1, 2], [3, 4]]]])),
    "max_pool2d_forward": ((a([[[[1, 4], [3, 2]]]]), (2, 2), (2, 2), (0, 0), (1, 1), False),
                           (a([[[[4]]]]), a([[[[1]]]], np.int64))),
    "max_pool2d_backward": ((a([[[[5]]]]), a([[[[1]]]], np.int64), (1, 1, 2, 2)),
                            a([[[[0, 5], [0, 0]]]])),
    "avg_pool2d_forward": ((a([[[[1, 4], [3, 2]]]]), (2, 2), (2, 2), (0, 0), False, True),
                           a([[[[2.5]]]])),
    "avg_pool2d_backward": ((a([[[[4]]]]), (1, 1, 2, 2), (2, 2), (2, 2), (0, 0), False, True),
                            a([[[[1, 1], [1, 1]]]])),
    "softmax": ((a([[0, math.log(3)]]), 1), a([[0.25, 0.75]])),
    "log_softmax": ((a([[0, math.log(3)]]), 1), a([[math.log(0.25), math.log(0.75)]])),
    # dot = Σ grad·out = 1/4, so dx = out·(grad - 1/4) = (1/4·3/4, 3/4·-1/4).
    "softmax_backward": ((a([[1, 0]]), a([[0.25, 0.75]]), 1), a([[0.1875, -0.1875]])),
    "softmax_cross_entropy_forward": ((a([[0, math.log(3)], [0, 0]]), a([1, -100], np.int64),
                                       -100, 0.0),
                                      (a([-math.log(0.75), 0]),
                                       a([[math.log(0.25), math.log(0.75)], [math.log(0.5)] * 2]))),
    "softmax_cross_entropy_backward": ((a([2, 1]), a([[math.log(0.25), math.log(0.75)]] * 2),
                                        a([1, -100], np.int64), -100, 0.0),
                                       a([[0.5, -0.5], [0, 0]])),
    "gelu_forward": ((a([0, 10]), "none"), a([0, 10])),
    "gelu_backward": ((a([2, 2]), a([0, 10]), "tanh"), a([1, 2])),
    "layer_norm_forward": ((a([[1, 3]]), None, None, 0.0), (a([[-1, 1]]), a([2]), a([1]))),
    "layer_norm_backward": ((a([[1, 1]]), a([[1, 3]]), a([2]), a([1]), a([1, 1])),
                            (a([[0, 0]]), a([-1, 1]), a([1, 1]))),
    # Channel 0 holds 1 and 3 (mean 2, biased variance 1); a gradient of 1 everywhere is
    # removed by the mean term, leaving dx = 0, dweight = Σ x̂ = 0, dbias = 2.
    "batch_norm_forward": ((a([[[1, 3]]]), None, None, None, None, 0.0),
                           (a([[[-1, 1]]]), a([2]), a([1]), a([1]))),
    "batch_norm_backward": ((a([[[1, 1]]]), a([[[1, 3]]]), a([2]), a([1]), a([1]), True),
                            (a([[[0, 0]]]), a([0]), a([2]))),
    # Saturated gates are exactly 0 or 1: c = f·c_prev + i·g, h = o·tanh(c).
    "lstm_cell_forward": ((a([[1000, 1000, 1000, 1000], [-1000, 1000, 0, 1000]]), a([[0], [3]])),
                          (a([[np.tanh(1)], [np.tanh(3)]]), a([[1], [3]]),
                           a([[1, 1, 1, 1], [0, 1, 0, 1]]))),
    # i = f = o = 1/2, g = 0, tanh(c) = 0: dc = 1 + 1·½ = 1.5, d_f = 1.5·2·¼, d_g = 1.5·½.
    "lstm_cell_backward": ((a([[1]]), a([[1]]), a([[2]]), a([[0]]), a([[0.5, 0.5, 0, 0.5]])),
                           (a([[0, 0.75, 0.75, 0]]), a([[0.75]]))),
    # r = 1, z = 1/2, n = tanh(0) = 0: h = ½·0 + ½·4.
    "gru_cell_forward": ((a([[1000, 0, 0]]), a([[0, 0, 0]]), a([[4]])),
                         (a([[2]]), a([[1, 0.5, 0]]))),
    # dn = ½·1, dz = (4 - 0)·¼, dr = dn·h_n·r(1 - r) = 0; h_prev's direct share is z.
    "gru_cell_backward": ((a([[1]]), a([[0, 0, 2]]), a([[4]]), a([[1, 0.5, 0]])),
                          (a([[0, 1, 0.5]]), a([[0, 1, 0.5]]), a([[0.5]]))),
}

# In-place primitives: (arguments, index of the argument written, its expected value).
IN_PLACE = {
    "assign_": ((a([[1, 2], [3, 4]]), a([5, 6])), 0, a([[5, 6], [5, 6]])),
    "setitem_": ((a([1, 2, 3]), (a([0, 2], np.int64),), 0.0), 0, a([0, 2, 0])),
    "sgd_update": ((a([1, 1]), a([2, -2]), None, 0.5, 0.0, 0.0, 0.0, False, False, False), 0,
                   a([0, 2])),
    # Adam's first step moves each entry by lr in the direction against its gradient.
    "adam_update": ((a([1, 1]), a([3, -0.5]), a([0, 0]), a([0, 0]), None, 1, 0.1, 0.9, 0.999,
                     0.0, 0.0, False, False, False), 0, a([0.9, 1.1])),
    # (1 - 0.5)·running + 0.5·(2·batch)
    "running_average_": ((a([1, 2]), a([3, 5]), 0.5, 2.0), 0, a([3.5, 6])),
    # The group forms: each tensor of the group moves as its one-tensor update would.
    "sgd_update_group": (([a([1, 1]), a([4])], [a([2, -2]), a([2])], [None, None], 0.5, 0.0,
                          0.0, 0.0, False, False, False), 0, [a([0, 2]), a([3])]),
    "adam_update_group": (([a([1, 1]), a([2])], [a([3, -0.5]), a([-1])], [a([0, 0]), a([0])],
                           [a([0, 0]), a([0])], [None, None], 1, 0.1, 0.9, 0.999, 0.0, 0.0,
                           False, False, False), 0, [a([0.9, 1.1]), a([2.1])]),
}


def to_backend(backend, value):
    if isinstance(value, np.ndarray):
        return backend.from_numpy(value)
    if isinstance(value, (tuple, list)):
        return type(value)(to_backend(backend, v) for v in value)
    return value


def from_backend(backend, value):
    if isinstance(value, tuple):
        return tuple(from_backend(backend, v) for v in value)
    if value is None or isinstance(value, bool):
        return value
    return backend.to_numpy(value)


# name -> (arguments, x, the step's result for x, its result for -x with the ReLU fused).
PLAN_STEPS = {
    # Padding 1 around [[1, 2], [3, 4]]; the kernel adds a cell and its lower-right neighbour.
    "plan_conv2d": ((((1, 1, 2, 2)), a([[[[1, 0], [0, 1]]]]), a([0.5]), (1, 1), (1, 1), (1, 1)),
                    a([[[[1, 2], [3, 4]]]]),
                    a([[[[1.5, 2.5, 0.5], [3.5, 5.5, 2.5], [0.5, 3.5, 4.5]]]]),
                    a([[[[0, 0, 0.5], [0, 0, 0], [0.5, 0, 0]]]])),
    "plan_max_pool2d": (((1, 1, 2, 4), f32, (2, 2), (2, 2), (0, 0), (1, 1), False),
                        a([[[[1, 4, -2, -5], [3, 2, -1, -6]]]]), a([[[[4, -1]]]]),
                        a([[[[0, 6]]]])),
    "plan_linear": (((1, 2), a([[1, 1], [1, -1]]), a([0, 0.5])), a([[1, 2]]), a([[3, -0.5]]),
                    a([[0, 1.5]])),
}


def test_every_primitive_has_a_behaviour_case():
    covered = set(CASES) | set(IN_PLACE) | set(PLAN_STEPS) | {"from_numpy", "to_numpy"}
    assert covered == set(ALL_PRIMITIVES)


@pytest.mark.parametrize("key, name", own_implementations(sorted(PLAN_STEPS)))
def test_plan_step_computes_its_op_on_every_call(key, name):
    backend = BACKENDS[key]
    arguments, x, expected, expected_relu_of_negated = PLAN_STEPS[name]
    step = getattr(backend, name)(*to_backend(backend, arguments))
    first = step(backend.from_numpy(x))
    np.testing.assert_allclose(backend.to_numpy(first), expected, rtol=1e-6)
    assert step.fuse_relu()  # every backend here fuses a ReLU into these three
    second = step(backend.from_numpy(-x))
    np.testing.assert_allclose(backend.to_numpy(second), expected_relu_of_negated, rtol=1e-6)
    # Numba's CPU steps own their buffer: every call returns it, rewritten. The composed
    # steps of the other backends return new arrays.
    assert (step.output is not None) == (key == "numba")
    if key == "numba":
        assert first is second is step.output


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                            "ignore:invalid value:RuntimeWarning")  # 1/0 and log 0 are cases
@pytest.mark.parametrize("key, name", own_implementations(sorted(CASES)))
def test_primitive_behaves_as_the_contract_says(key, name):
    backend = BACKENDS[key]
    arguments, expected = CASES[name]
    result = from_backend(backend, getattr(backend, name)(*to_backend(backend, arguments)))
    if not isinstance(expected, tuple):
        result, expected = (result,), (expected,)
    assert len(result) == len(expected)
    for actual, wanted in zip(result, expected):
        if isinstance(wanted, bool):
            assert actual is wanted
            continue
        assert actual.dtype == wanted.dtype, name
        assert actual.shape == wanted.shape, name
        np.testing.assert_allclose(actual, wanted, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("key, name", own_implementations(sorted(IN_PLACE)))
def test_in_place_primitive_writes_its_target(key, name):
    backend = BACKENDS[key]
    arguments, target, expected = copy.deepcopy(IN_PLACE[name])  # the CPU backends write there
    moved = to_backend(backend, arguments)
    assert getattr(backend, name)(*moved) is None
    targets, expected = (moved[target], expected) if isinstance(expected, list) else \
        ([moved[target]], [expected])  # (a group update writes a list of arrays)
    for written, wanted in zip(targets, expected, strict=True):
        np.testing.assert_allclose(backend.to_numpy(written), wanted, rtol=1e-6)


def test_transfers_round_trip_and_copies_own_their_memory(backend):
    values = a([[1, 2], [3, 4]])
    array = backend.from_numpy(values)
    np.testing.assert_array_equal(backend.to_numpy(array), values)
    assert backend.owns_memory(backend.copy(backend.transpose(array, (1, 0))))
    assert not backend.owns_memory(backend.broadcast_to(backend.from_numpy(a([1, 2])), (2, 2)))


@pytest.mark.parametrize("call", [
    lambda b: b.take(b.from_numpy(a([[1, 2]])), b.from_numpy(a([-1], np.int64))),
    lambda b: b.take(b.from_numpy(a([[1, 2]])), b.from_numpy(a([1], np.int64))),
    lambda b: b.one_hot(b.from_numpy(a([3], np.int64)), 3, f32),
])
def test_gathers_reject_indices_out_of_range(backend, call):
    with pytest.raises(IndexError):  # at once, or at the next synchronisation (CUDA's copy back)
        backend.to_numpy(call(backend))


def test_random_draws_advance_by_the_blocks_they_use(backend):
    # A draw of 6 float32 samples from counter 0 uses 2 blocks; the next starts at block 2, so
    # drawing 6 then 2 gives the same numbers as drawing 16 (blocks 0-3) minus the 2 unused words.
    first = backend.to_numpy(backend.random_uniform((6,), f32, (5, 7), 0))
    second = backend.to_numpy(backend.random_uniform((2,), f32, (5, 7), random_blocks(6, f32,
                                                                                     "uniform")))
    whole = backend.to_numpy(backend.random_uniform((16,), f32, (5, 7), 0))
    np.testing.assert_array_equal(np.concatenate([first, second]), np.r_[whole[:6], whole[8:10]])
    for dtype in (np.float16, np.float32, np.float64):
        values = backend.to_numpy(backend.random_uniform((1000,), dtype, (1, 2), 2**64 - 3))
        assert values.dtype == dtype and values.min() >= 0 and values.max() < 1
