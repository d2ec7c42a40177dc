"""Differential test against PyTorch at the edges: every public op on 0, -0, ±inf, NaN,
subnormals, huge values, constant inputs, length-1 and empty axes, transposed (non-contiguous)
views, every integer dtype (uint8 included) and bool, mixed with 0-d tensors and Python numbers.

For each drawn input both libraries run the same expression (``expr(lib, F, *inputs)``, with
``lib, F`` = ``minidl, minidl.nn.functional`` or ``torch, torch.nn.functional``), and minidl must
give PyTorch's answer: the same error-or-not (PyTorch raises => minidl raises), and otherwise the
same shapes, dtypes and values (NaN where NaN, the sign of an infinity) and, for floating inputs,
the same gradients. ``test_ops_torch_differential.py`` draws ordinary float64 values; this file
draws the edges.

Deliberate differences are one allow-list, :data:`ALLOWED`, each entry quoting the bullet of the
README's "Deliberate differences" that explains it; ``test_allow_list_is_the_readme_list`` keeps
the two the same list. The default run draws a few examples per op; ``-m slow`` draws many more.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minidl as md
import minidl.nn.functional as mdF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

README = Path(__file__).resolve().parents[2] / "README.md"


def _settings(examples):
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


QUICK, THOROUGH = _settings(8), _settings(150)

# -- the edge values -------------------------------------------------------------------------------

INF, NAN = math.inf, math.nan
FLOAT_EDGES = {  # per float dtype: its subnormal, its huge value
    np.float32: [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, INF, -INF, NAN, 1e-40, -1e-40, 3e38,
                 -3e38],
    np.float64: [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, INF, -INF, NAN, 5e-324, 1e308, -1e308],
}
INT_EDGES = {np.int64: [0, 1, -1, 2, -3, 7, 2 ** 40, -(2 ** 40)],
             np.int32: [0, 1, -1, 2, -3, 7, 2 ** 30],
             np.int16: [0, 1, -1, 2, -3, 300],
             np.int8: [0, 1, -1, 2, -3, 127, -128],
             np.uint8: [0, 1, 2, 3, 200, 255]}
EDGES = {**FLOAT_EDGES, **INT_EDGES, np.bool_: [False, True]}
ALL_DTYPES = list(EDGES)
FLOATS = list(FLOAT_EDGES)
NUMBERS = [0, 1, -1, 2, -3, 0.5, -0.0, 2.5, INF, -INF, NAN, True, False]


@dataclass
class Leaf:
    """An input tensor: its values, and whether it is passed as a transposed view (the
    tensor built from ``values`` with its first and last axes swapped, then swapped back:
    the strides of a non-contiguous view)."""

    values: np.ndarray
    transposed: bool = False

    def __repr__(self):
        return f"Leaf({self.values.dtype}, {self.values.tolist()!r}, transposed={self.transposed})"


@st.composite
def tensors(draw, dtypes=None, shape=None, min_dims=0, max_dims=3, min_side=0):
    dtype = draw(st.sampled_from(dtypes or ALL_DTYPES))
    if shape is None:
        shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                                      max_side=3))
    constant = draw(st.booleans())
    pool = EDGES[dtype]
    if constant:  # every element the same value
        pool = [draw(st.sampled_from(pool))]
    values = draw(hnp.arrays(dtype, shape, elements=st.sampled_from(pool)))
    return Leaf(values, transposed=len(shape) >= 2 and draw(st.booleans()))


def operands(dtypes=None):
    """A second operand: a tensor that broadcasts, a 0-d tensor or a Python number."""
    return st.one_of(tensors(dtypes, max_dims=2), tensors(dtypes, shape=()),
                     st.sampled_from(NUMBERS))


# -- the cases: one expression each, run with (md, mdF) and with (torch, TF) -------------------

CASES = {}


def case(name, inputs, expr, slow_only=False):
    CASES[name] = (expr, inputs, slow_only)


def one(dtypes=None, **shape):
    return st.tuples(tensors(dtypes, **shape)).map(list)


def two(dtypes=None, second=None):
    # `is None`, not `or`: a strategy's truth value is a draw Hypothesis warns about.
    return st.tuples(tensors(dtypes, max_dims=2),
                     operands(dtypes) if second is None else second).map(list)


def with_dim(dtypes=None):
    return tensors(dtypes, min_dims=1).flatmap(
        lambda leaf: st.tuples(st.just(leaf),
                               st.integers(-leaf.values.ndim, leaf.values.ndim - 1))).map(list)


for _name in ["neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu"]:
    case(_name, one(), lambda lib, F, x, _name=_name: getattr(x, _name)())
for _name in ["gelu", "elu", "silu", "softplus", "leaky_relu", "hardsigmoid", "hardswish",
              "mish"]:
    case(f"F.{_name}", one(), lambda lib, F, x, _name=_name: getattr(F, _name)(x))
case("F.gelu tanh", one(FLOATS), lambda lib, F, x: F.gelu(x, approximate="tanh"))
case("clamp", one(), lambda lib, F, x: x.clamp(-1, 2.5))
case("clamp min", one(), lambda lib, F, x: lib.clamp(x, min=0))

for _name, _expr in {
    "add": lambda lib, F, a, b: a + b, "sub": lambda lib, F, a, b: a - b,
    "mul": lambda lib, F, a, b: a * b, "div": lambda lib, F, a, b: a / b,
    "floor_divide": lambda lib, F, a, b: a // b, "remainder": lambda lib, F, a, b: a % b,
    "pow": lambda lib, F, a, b: a ** b,
    "radd": lambda lib, F, a, b: b + a, "rsub": lambda lib, F, a, b: b - a,
    "rdiv": lambda lib, F, a, b: b / a, "rpow": lambda lib, F, a, b: b ** a,
    "lt": lambda lib, F, a, b: a < b, "le": lambda lib, F, a, b: a <= b,
    "gt": lambda lib, F, a, b: a > b, "ge": lambda lib, F, a, b: a >= b,
    "eq": lambda lib, F, a, b: a == b, "ne": lambda lib, F, a, b: a != b,
}.items():
    case(_name, two(), _expr)
for _name in ["maximum", "minimum"]:
    case(_name, two(second=tensors(max_dims=2)),
         lambda lib, F, a, b, _name=_name: getattr(lib, _name)(a, b))
case("where", st.tuples(tensors([np.bool_], max_dims=2), tensors(max_dims=2),
                        operands()).map(list),
     lambda lib, F, c, a, b: lib.where(c, a, b))
case("logical", two([np.bool_], second=tensors([np.bool_], max_dims=2)),
     lambda lib, F, a, b: (a & b, a | b, ~a))

case("sum", one(), lambda lib, F, x: x.sum())
case("sum dim", with_dim(), lambda lib, F, x, d: x.sum(dim=d, keepdim=True))
case("mean", with_dim(), lambda lib, F, x, d: (x.mean(), x.mean(dim=d)))
case("amax amin", with_dim(), lambda lib, F, x, d: (x.amax(dim=d), x.amin(dim=d)))
case("max min", one(), lambda lib, F, x: (x.max(), x.min()))
case("max dim", with_dim(), lambda lib, F, x, d: tuple(x.max(dim=d)))
case("min dim", with_dim(), lambda lib, F, x, d: tuple(x.min(d, keepdim=True)))
case("argmax argmin", with_dim(), lambda lib, F, x, d: (x.argmax(dim=d), x.argmin(dim=d)))
case("var std", with_dim(FLOATS),
     lambda lib, F, x, d: (x.var(dim=d), x.std(dim=d, correction=0), x.var()))
case("any all", with_dim(), lambda lib, F, x, d: (x.any(dim=d), x.all(), x.any()))

case("reshape flatten", one(), lambda lib, F, x: (x.reshape(-1), x.flatten()))
case("permute transpose", one(min_dims=2),
     lambda lib, F, x: (x.permute(*reversed(range(x.ndim))), x.transpose(0, 1)))
case("unsqueeze squeeze", one(), lambda lib, F, x: x.unsqueeze(0).squeeze(0))
case("getitem", one(min_dims=1, min_side=1),
     lambda lib, F, x: (x[0], x[..., -1:], x[x.shape[0] - 1]))
case("cat stack", st.tuples(tensors(shape=(2, 1)), tensors(shape=(2, 1))).map(list),
     lambda lib, F, a, b: (lib.cat([a, b], dim=1), lib.stack([a, b])))
case("arange", st.tuples(st.sampled_from([(0, 3), (0, 1, 0.25), (2.0, 5), (5, 0, -2)])).map(list),
     lambda lib, F, args: lib.arange(*args))
case("softmax", with_dim(FLOATS),
     lambda lib, F, x, d: (F.softmax(x, dim=d), F.log_softmax(x, dim=d)))
case("layer_norm", one(FLOATS, min_dims=1), lambda lib, F, x: F.layer_norm(x, x.shape[-1:]))
case("batch_norm", one(FLOATS, min_dims=2, min_side=1),
     lambda lib, F, x: F.batch_norm(x, None, None, training=True))
case("group_norm", one(FLOATS, min_dims=2, min_side=1), lambda lib, F, x: F.group_norm(x, 1))
case("mse_loss", st.tuples(tensors(FLOATS, shape=(2, 2)), tensors(FLOATS, shape=(2, 2))).map(list),
     lambda lib, F, a, b: F.mse_loss(a, b))
# Logits and targets of one dtype (the mixed-dtype result follows the target's dtype, a
# test of its own in test_ops_edge_values.py).
case("binary_cross_entropy_with_logits",
     st.sampled_from(FLOATS).flatmap(lambda dtype: st.tuples(
         tensors([dtype], shape=(3,)), tensors([dtype], shape=(3,)))).map(list),
     lambda lib, F, a, b: F.binary_cross_entropy_with_logits(a, b))
case("cross_entropy", st.tuples(tensors(FLOATS, shape=(2, 3))).map(list),
     lambda lib, F, x: F.cross_entropy(x, lib.tensor([0, 2])))
case("max_pool2d avg_pool2d", one(FLOATS, shape=(1, 1, 2, 3)),
     lambda lib, F, x: (F.max_pool2d(x, 2, 1), F.avg_pool2d(x, 2, 1)))
case("adaptive_max_pool2d", one(FLOATS, shape=(1, 1, 3, 3)),
     lambda lib, F, x: F.adaptive_max_pool2d(x, 2))
case("conv1d conv2d", st.tuples(tensors(FLOATS, shape=(1, 2, 4)), tensors(FLOATS, shape=(3, 2, 2)),
                                tensors(FLOATS, shape=(1, 2, 3, 3))).map(list),
     lambda lib, F, x, w, image: (F.conv1d(x, w, padding=1),
                                  F.conv2d(image, w.reshape(3, 2, 1, 2), stride=2)))
case("conv_transpose2d", st.tuples(tensors(FLOATS, shape=(1, 2, 2, 2)),
                                   tensors(FLOATS, shape=(2, 1, 2, 2))).map(list),
     lambda lib, F, x, w: F.conv_transpose2d(x, w, stride=2))
case("pool1d adaptive_avg", one(FLOATS, shape=(1, 2, 5)),
     lambda lib, F, x: (F.max_pool1d(x, 2), F.avg_pool1d(x, 3, 2, 1),
                        F.adaptive_avg_pool2d(x.unsqueeze(0), (1, 2))))
case("instance_norm", one(FLOATS, shape=(2, 1, 3)), lambda lib, F, x: F.instance_norm(x))
case("interpolate", one(FLOATS, shape=(1, 1, 2, 2)),
     lambda lib, F, x: (F.interpolate(x, scale_factor=2),
                        F.interpolate(x, size=(3, 3), mode="bilinear")))
case("embedding", st.tuples(tensors(FLOATS, shape=(3, 2))).map(list),
     lambda lib, F, w: F.embedding(lib.tensor([[0, 2], [2, 1]]), w))
case("nll_loss", st.tuples(tensors(FLOATS, shape=(2, 3))).map(list),
     lambda lib, F, x: (F.nll_loss(x, lib.tensor([0, 2])),
                        F.nll_loss(x, lib.tensor([1, 1]), reduction="none")))
case("prelu", st.tuples(tensors(FLOATS, shape=(2, 3)), tensors(FLOATS, shape=(1,))).map(list),
     lambda lib, F, x, w: F.prelu(x, w) if x.dtype == w.dtype else x)
case("scaled_dot_product_attention", st.tuples(tensors(FLOATS, shape=(1, 2, 2))).map(list),
     lambda lib, F, q: F.scaled_dot_product_attention(q, q, q))
case("casts", one(), lambda lib, F, x: (x.float(), x.double(), x.long(), x.bool(), x.int()))
case("expand clone", one(shape=(1, 2)), lambda lib, F, x: (x.expand(3, 2), x.clone()))
case("in-place", two(), lambda lib, F, a, b: _in_place(a, b))
case("in-place // %", two(), lambda lib, F, a, b: _in_place_division(a, b))
case("setitem", st.tuples(tensors(shape=(2, 3)), operands()).map(list),
     lambda lib, F, x, v: _assign(x, v))
case("clamp tensors", st.tuples(tensors(FLOATS, shape=(2, 2)), tensors(FLOATS, shape=(2,)),
                                tensors(FLOATS, shape=(2, 1))).map(list),
     lambda lib, F, x, low, high: lib.clamp(x, min=low, max=high))
case("F aliases", one(FLOATS), lambda lib, F, x: (F.relu(x), F.sigmoid(x), F.tanh(x)))
case("linear matmul",
     st.tuples(tensors(FLOATS, shape=(2, 3)), tensors(FLOATS, shape=(3, 3))).map(list),
     lambda lib, F, x, w: (x @ w, F.linear(x, w)))


NORMALISATIONS = {"layer_norm", "batch_norm", "group_norm", "instance_norm"}


def _in_place(a, b):
    """a * 1 edited in place by b (the leaf itself cannot be), as the copy's dtype allows."""
    target = a * 1
    target += b
    target *= b
    return target


def _in_place_division(a, b):
    target = a * 1
    target //= b
    target %= b
    return target


def _assign(x, value):
    """x * 1 with a row, a column and an integer-and-array selection assigned ``value``."""
    target = x * 1
    target[0] = value
    target[:, -1] = value
    target[1, [0, 2]] = value
    return target


# -- deliberate differences ----------------------------------------------------------------------

@dataclass
class Difference:
    """A deliberate difference: where ``cases`` differ from PyTorch in one of ``aspects``
    ("gradient", "value") and ``applies(inputs)`` holds, the difference is expected. ``readme``
    is a phrase of the README bullet that explains it (entries without cases are differences
    outside the ops' values: they are listed so that the README's list is this list)."""

    readme: str
    cases: tuple = ()
    aspects: tuple = ("gradient",)
    applies: object = None


def _has(predicate):
    def check(inputs):
        return any(isinstance(i, Leaf) and i.values.dtype.kind == "f" and
                   bool(np.any(predicate(i.values))) for i in inputs)
    return check


def _squares_overflow(values):
    finite = np.abs(values[np.isfinite(values)])
    return finite.size and finite.max() > np.sqrt(np.finfo(values.dtype).max) / 4


def _huge(values):
    finite = np.abs(values[np.isfinite(values)])
    return finite.size and finite.max() > 1e18


def _ties_or_nans(inputs):
    """Whether an input holds a NaN or two equal values, or equals a value of another."""
    values = np.concatenate([i.values.ravel() for i in inputs if isinstance(i, Leaf)])
    return values.size and (np.isnan(values).any() or len(np.unique(values)) < values.size)


ALLOWED = [
    Difference("Ties in `max`/`min` split the gradient evenly", ("max dim", "min dim",
                                                                 "clamp tensors"),
               applies=_ties_or_nans),
    Difference("ReLU's gradient is 0 at 0 and at NaN", ("relu",), applies=_has(np.isnan)),
    Difference("`a ** b`'s gradient in `b`", ("pow", "rpow"),
               applies=lambda inputs: True),
    Difference("`//` has a zero gradient", ("floor_divide", "in-place // %"),
               applies=lambda inputs: True),
    Difference("Normalising values whose squares overflow", ("layer_norm", "batch_norm",
                                                             "group_norm", "instance_norm"),
               aspects=("value", "gradient"), applies=_has(_squares_overflow)),
    Difference("Near the end of the float range", ("linear matmul", "conv1d conv2d",
                                                   "conv_transpose2d", "interpolate", "rdiv",
                                                   "F.gelu tanh", "F.hardswish", "var std"),
               aspects=("value", "gradient"), applies=_has(_huge)),
    Difference("float32 constants in some float64 gradients", ("F.hardsigmoid", "F.hardswish"),
               applies=lambda inputs: inputs[0].values.dtype == np.float64),
    Difference("`inference_mode` is `no_grad`"),
    Difference("`md.set_num_threads` is the one thread budget of the CPU"),
    Difference("A module called on a NumPy array takes it as `md.tensor` would"),
    Difference("`var`/`std` with `correction` greater than the number of elements",
               ("var std",), applies=lambda inputs: inputs[0].values.size <= 1 or
               inputs[0].values.shape[inputs[1]] <= 1),
]


def _allowed(name, aspect, inputs):
    return any(name in d.cases and aspect in d.aspects and d.applies(inputs) for d in ALLOWED)


# -- running a case in one library ---------------------------------------------------------------

class Raised:
    def __init__(self, error):
        self.error = error

    def __repr__(self):
        return f"Raised({type(self.error).__name__}: {self.error})"


def _leaf_tensor(lib, leaf: Leaf):
    values = np.swapaxes(leaf.values, 0, -1).copy() if leaf.transposed else leaf.values
    grad = values.dtype.kind == "f"
    tensor = lib.tensor(values, requires_grad=grad) if lib is md else \
        torch.tensor(values, requires_grad=grad)
    return tensor, (tensor.transpose(0, -1) if leaf.transposed else tensor)


def _run(lib, F, expr, inputs):
    """(outputs as NumPy arrays, gradients of the leaves) or Raised."""
    leaves, args = [], []
    for value in inputs:
        if isinstance(value, Leaf):
            leaf, arg = _leaf_tensor(lib, value)
            leaves.append(leaf)
            args.append(arg)
        else:
            args.append(value)
    try:
        out = expr(lib, F, *args)
        outs = list(out) if isinstance(out, tuple) else [out]
        arrays = [o.detach().numpy().copy() for o in outs]
    except Exception as error:  # noqa: BLE001 - any error is compared with PyTorch's
        return Raised(error)
    grads = None
    differentiable = [o for o in outs if o.dtype in (md.float32, md.float64, torch.float32,
                                                     torch.float64) and o.requires_grad]
    if differentiable:
        try:
            total = sum((o * (lib.tensor(np.ones(tuple(o.shape), _numpy_dtype(o))))).sum()
                        for o in differentiable)
            total.backward()
            grads = [None if t.grad is None else t.grad.numpy().copy() for t in leaves
                     if t.requires_grad]
        except Exception as error:  # noqa: BLE001
            grads = Raised(error)
    return arrays, grads


def _numpy_dtype(tensor):
    return np.dtype(str(tensor.dtype).removeprefix("torch."))


def _assert_same(actual, expected, what, precision=8):
    """Equal shapes and dtypes, and values to the rounding of the least precise float
    involved (``precision``: its size in bytes; NaN matches NaN, infinities match exactly)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype.kind == "f":
        tolerance = {2: 1e-3, 4: 2e-5, 8: 1e-12}[min(actual.dtype.itemsize, precision)]
        # A normalisation divides by sqrt(var + eps) ≈ 1/316 for a constant input, which
        # magnifies a last-bit difference of the mean (x - mean is then 1 ulp or 0) as much.
        scale = 1e3 if what.split(" ")[0] in NORMALISATIONS else 1e-2
        np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance * scale,
                                   equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def compare(name, expr, inputs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ours = _run(md, mdF, expr, inputs)
        theirs = _run(torch, TF, expr, inputs)
    if isinstance(theirs, Raised):
        assert isinstance(ours, Raised), f"{name}: PyTorch raises {theirs}, minidl gives {ours}"
        return
    assert not isinstance(ours, Raised), f"{name}: minidl raises {ours}, PyTorch computes"
    (our_outs, our_grads), (their_outs, their_grads) = ours, theirs
    precision = min([i.values.dtype.itemsize for i in inputs
                     if isinstance(i, Leaf) and i.values.dtype.kind == "f"] + [8])
    assert len(our_outs) == len(their_outs), name
    for k, (a, e) in enumerate(zip(our_outs, their_outs)):
        try:
            _assert_same(a, e, f"{name} output {k}", precision)
        except AssertionError:
            if not _allowed(name, "value", inputs):
                raise
    if their_grads is None or isinstance(their_grads, Raised):
        if not _allowed(name, "gradient", inputs):
            assert our_grads is None or isinstance(our_grads, Raised) or all(
                g is None or not np.any(g) for g in our_grads), f"{name}: gradients"
        return
    assert not isinstance(our_grads, Raised), f"{name}: minidl's backward raises {our_grads}"
    for k, (a, e) in enumerate(zip(our_grads, their_grads)):
        try:
            if e is None:
                assert a is None or not np.any(a), f"{name}: gradient {k}"
            else:
                _assert_same(a, e, f"{name} gradient {k}", precision)
        except AssertionError:
            if not _allowed(name, "gradient", inputs):
                raise


def _check(name, examples):
    expr, inputs, _ = CASES[name]

    @examples
    @given(inputs)
    def run(values):
        compare(name, expr, values)

    run()


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if not c[2]))
def test_edges_match_torch(name):
    _check(name, QUICK)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_edges_match_torch_thoroughly(name):
    _check(name, THOROUGH)


def test_allow_list_is_the_readme_list():
    text = README.read_text(encoding="utf-8")
    section = text.split("Deliberate differences:", 1)[1].split("\n## ", 1)[0]
    bullets = [b for b in re.split(r"\n(?=- )", section.strip()) if b.startswith("- ")]
    assert bullets, "the README has no list of deliberate differences"
    for difference in ALLOWED:
        matching = [b for b in bullets if difference.readme in " ".join(b.split())]
        assert len(matching) == 1, \
            f"allow-list entry {difference.readme!r} is not one README bullet"
    for bullet in bullets:
        assert any(d.readme in " ".join(bullet.split()) for d in ALLOWED), \
            f"README difference without an allow-list entry: {bullet[:80]!r}"
