"""Differential test against PyTorch: every op, on hypothesis-drawn shapes and values, gives
PyTorch's output (values, shape, dtype) and PyTorch's gradients for every float input.

Each case is one expression written once and run twice, as ``expr(lib, F, *inputs)`` with
``lib, F`` = ``minidl, minidl.nn.functional`` and ``torch, torch.nn.functional`` (the APIs
agree, which is itself part of what is tested). Inputs are float64 so that rounding does not
hide a wrong rule; the gradient is that of ``Σ out · w`` for a fixed random ``w``. Values are
drawn where the op is smooth unless the case is about a kink that both define the same way
(relu/abs at 0, ties in amax/maximum split evenly); ``max(dim)`` and pooling draw distinct
values, since PyTorch then routes the gradient to one index where minidl splits it (see the
README's list of deliberate differences). Skipped without torch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minidl as md
import minidl.nn.functional as mdF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

DIFFERENTIAL = settings(max_examples=15, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.too_slow,
                                               HealthCheck.data_too_large])


def shapes(min_dims=0, max_dims=3, min_side=1, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def floats(shape, low=-3.0, high=3.0, unique=False):
    return hnp.arrays(np.float64, shape, unique=unique,
                      elements=st.floats(low, high, allow_nan=False, width=64))


def nonzero(shape, low=0.5, high=2.0):
    """Values of either sign, away from 0 (divisors)."""
    return st.tuples(floats(shape, low, high), hnp.arrays(np.bool_, shape)).map(
        lambda pair: np.where(pair[1], -pair[0], pair[0]))


def draw_broadcastable(draw, count=2):
    result = draw(hnp.mutually_broadcastable_shapes(num_shapes=count, min_dims=0, max_dims=3,
                                                    min_side=1, max_side=3))
    return result.input_shapes


CASES = {}


def case(name, inputs):
    """Register ``expr`` under ``name``; ``inputs`` draws the list of input arrays."""
    def register(expr):
        CASES[name] = (expr, inputs)
        return expr
    return register


def unary(low=-3.0, high=3.0, unique=False):
    return st.builds(lambda a: [a], shapes().flatmap(lambda s: floats(s, low, high, unique)))


@st.composite
def binary(draw, low=-3.0, high=3.0, second=None):
    sa, sb = draw_broadcastable(draw)
    return [draw(floats(sa, low, high)), draw(second(sb) if second else floats(sb, low, high))]


@st.composite
def with_axis(draw, unique=False, min_dims=1, low=-3.0, high=3.0, min_side=1):
    shape = draw(shapes(min_dims=min_dims, min_side=min_side))
    return [draw(floats(shape, low, high, unique)), draw(st.integers(-len(shape), len(shape) - 1))]


# -- elementwise -----------------------------------------------------------------------------

for _name, _expr in {
    "add": lambda lib, F, a, b: a + b, "sub": lambda lib, F, a, b: a - b,
    "mul": lambda lib, F, a, b: a * b, "maximum": lambda lib, F, a, b: lib.maximum(a, b),
    "minimum": lambda lib, F, a, b: lib.minimum(a, b),
    "scalar arithmetic": lambda lib, F, a, b: (2.5 - a) * 3 + b / 4 - 1.5 ** a,
}.items():
    case(_name, binary())(_expr)

case("div", binary(second=nonzero))(lambda lib, F, a, b: a / b)
case("rdiv and rpow", binary(second=nonzero))(lambda lib, F, a, b: 2.0 / b + 0.5 ** b)
case("pow", binary(0.5, 2.0))(lambda lib, F, a, b: a ** b)
case("pow scalar", unary())(lambda lib, F, a: a ** 2 + a ** 3 - a ** 0 + (a * a + 1) ** 0.5)
# PyTorch cannot differentiate floor_divide (minidl gives its zero gradient): values only.
case("floor_divide", binary(second=nonzero).map(lambda ab: [Const(ab[0]), Const(ab[1])]))(
    lambda lib, F, a, b: a // b)
case("remainder", binary(second=nonzero))(lambda lib, F, a, b: a % b)
@st.composite
def integer_pair(draw):
    sa, sb = draw_broadcastable(draw)
    ints = st.integers(-9, 9).filter(bool)
    return [Const(draw(hnp.arrays(np.int64, sa, elements=ints))),
            Const(draw(hnp.arrays(np.int64, sb, elements=ints))),
            draw(floats((), 0.0, 2.0))]


# dtype promotion: integer tensors with integer and float operands (values and dtypes).
case("integer promotion", integer_pair())(
    lambda lib, F, a, b, x: (a / b, a // b, a % b, a * 1.5, a.abs() ** 0.5, a.clamp(0.5), a + b,
                             lib.where(a > b, a, x), (a > 0) * 2.5, a.float() + x))
case("neg abs", unary())(lambda lib, F, a: -a.abs())
case("exp", unary())(lambda lib, F, a: a.exp())
case("log sqrt", unary(0.1, 5.0))(lambda lib, F, a: a.log() + a.sqrt())
case("tanh sigmoid", unary(-8.0, 8.0))(lambda lib, F, a: a.tanh() * a.sigmoid())
case("relu", unary())(lambda lib, F, a: F.relu(a) + a.relu())
case("gelu", unary(-5.0, 5.0))(
    lambda lib, F, a: F.gelu(a) + F.gelu(a, approximate="tanh"))
case("clamp", unary())(lambda lib, F, a: a.clamp(-1.0, 1.5) + a.clamp(min=0.25) + lib.clamp(a, max=-0.5))
case("comparisons", binary())(
    lambda lib, F, a, b: lib.stack([(a < b), (a <= b), (a > b), (a >= b), (a == b), (a != b)]))
case("where", binary())(lambda lib, F, a, b: lib.where(a > b, a, b * 2))


# -- reductions ------------------------------------------------------------------------------

case("sum mean", with_axis())(
    lambda lib, F, a, d: a.sum(dim=d) + a.mean(dim=d) + a.sum() * a.mean(dim=d, keepdim=True).sum())
case("amax amin (ties split evenly in both)", with_axis(low=-1.0, high=1.0))(
    lambda lib, F, a, d: a.amax(dim=d) - a.amin(dim=d, keepdim=True).sum() + a.max() + a.min())
case("max min along a dim", with_axis(unique=True))(
    lambda lib, F, a, d: (a.max(d).values, a.max(dim=d).indices, a.min(d, keepdim=True).values,
                          a.min(dim=d).indices))
case("argmax argmin", with_axis())(
    lambda lib, F, a, d: (a.argmax(dim=d), a.argmin(dim=d, keepdim=True), a.argmax()))
@st.composite
def spread_with_axis(draw):
    """Distinct values on a grid of 1/8 (no slice has a vanishing spread, where the two
    libraries' std gradients differ only by how they round a denormal)."""
    shape = draw(shapes(min_dims=1, min_side=2))
    grid = hnp.arrays(np.int64, shape, unique=True, elements=st.integers(-40, 40))
    return [draw(grid) / 8.0, draw(st.integers(-len(shape), len(shape) - 1))]


case("var std", spread_with_axis())(
    lambda lib, F, a, d: (a.var(dim=d, correction=0), a.std(dim=d, keepdim=True), a.var(),
                          a.std(dim=d, correction=2) if a.shape[d] > 2 else a.sum()))


# -- shape and indexing ----------------------------------------------------------------------

@st.composite
def matrix_and_index(draw):
    a = draw(floats(draw(shapes(min_dims=2, max_dims=3, min_side=2))))
    rows = draw(hnp.arrays(np.int64, draw(st.integers(1, 4)),
                           elements=st.integers(-a.shape[0], a.shape[0] - 1)))
    return [a, rows]


case("reshape permute transpose", shapes(min_dims=2).flatmap(floats).map(lambda a: [a]))(
    lambda lib, F, a: a.permute(*reversed(range(a.ndim))).transpose(0, 1).reshape(-1)[1:] * 2
    + a.flatten()[:-1].unsqueeze(0).squeeze(0))
case("getitem", matrix_and_index())(
    lambda lib, F, a, i: a[i] * 2 + a[i, ..., :1] + a[1:, None][0].sum())
case("index_put", matrix_and_index())(
    lambda lib, F, a, i: lib.index_put(a * 1.0, (i,), a[0] * 3, accumulate=True))
case("item assignment", matrix_and_index())(
    lambda lib, F, a, i: _assign(a * 1.0, i, a[1] * 2.0))


def _assign(target, index, value):
    target[index[:1]] = value
    target[:, 0] = 7.0
    return target


case("cat stack", binary())(
    lambda lib, F, a, b: lib.cat([lib.stack([a + b, b * a]), lib.stack([a - b, a + b])], dim=0))


# -- linear algebra, convolution, pooling ----------------------------------------------------

@st.composite
def matmul_inputs(draw):
    n, k, m = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    batch = draw(st.sampled_from([(), (2,), (3, 1)]))
    return [draw(floats(batch + (n, k))), draw(floats((k, m))), draw(floats((m,)))]


case("matmul linear", matmul_inputs())(
    lambda lib, F, a, b, bias: lib.matmul(a, b) + F.linear(a, b.T, bias) + (a @ b))


@st.composite
def conv_inputs(draw):
    groups = draw(st.sampled_from([1, 2]))
    c, o = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(kh + 2, 7)), draw(st.integers(kw + 2, 7))
    return [draw(floats((2, c, h, w))), draw(floats((o, c // groups, kh, kw))),
            draw(floats((o,))), {"groups": groups,
                                 "stride": draw(st.sampled_from([1, 2, (1, 2)])),
                                 "padding": draw(st.sampled_from([0, 1, (1, 0)])),
                                 "dilation": draw(st.sampled_from([1, (1, 2)]))}]


case("conv2d", conv_inputs())(lambda lib, F, x, w, b, options: F.conv2d(x, w, b, **options))


@st.composite
def same_conv_inputs(draw):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    return [draw(floats((1, 2, draw(st.integers(kh, 6)), draw(st.integers(kw, 6))))),
            draw(floats((3, 2, kh, kw))), draw(st.sampled_from(["same", "valid"]))]


case("conv2d same/valid", same_conv_inputs())(
    lambda lib, F, x, w, padding: F.conv2d(x, w, padding=padding))


@st.composite
def pool_inputs(draw, unique):
    k = draw(st.integers(1, 3))
    shape = (2, 2, draw(st.integers(k, 7)), draw(st.integers(k, 7)))
    return [draw(floats(shape, unique=unique)),
            {"kernel_size": k, "stride": draw(st.sampled_from([None, 1, 2])),
             "padding": draw(st.integers(0, k // 2)), "ceil_mode": draw(st.booleans())}]


case("max_pool2d", pool_inputs(unique=True))(lambda lib, F, x, options: F.max_pool2d(x, **options))
case("avg_pool2d", pool_inputs(unique=False))(
    lambda lib, F, x, options: F.avg_pool2d(x, **options)
    + F.avg_pool2d(x, count_include_pad=False, **options))


@st.composite
def adaptive_inputs(draw):
    x = draw(floats((1, 2, draw(st.integers(1, 9)), draw(st.integers(1, 9)))))
    return [x, (draw(st.integers(1, 5)), draw(st.integers(1, 5)))]


case("adaptive_avg_pool2d", adaptive_inputs())(
    lambda lib, F, x, size: F.adaptive_avg_pool2d(x, size))


# -- nn: softmax, normalisation, embedding, losses -------------------------------------------

case("softmax log_softmax", with_axis(low=-20.0, high=20.0))(
    lambda lib, F, a, d: F.softmax(a, dim=d) * 3 + F.log_softmax(a, dim=d) + a.softmax(dim=d))


@st.composite
def norm_inputs(draw):
    shape = draw(shapes(min_dims=2, max_dims=4, min_side=2))
    return [draw(floats(shape, unique=True)), draw(floats(shape[-1:], 0.5, 2.0)),
            draw(floats(shape[-1:])), draw(floats(shape[1:2], 0.5, 2.0)),
            draw(floats(shape[1:2]))]


case("layer_norm", norm_inputs())(
    lambda lib, F, x, w, b, bw, bb: F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5))
case("batch_norm", norm_inputs())(
    lambda lib, F, x, w, b, bw, bb: F.batch_norm(x, None, None, bw, bb, training=True))


@st.composite
def embedding_inputs(draw):
    rows = draw(st.integers(2, 6))
    return [draw(floats((rows, 3))),
            draw(hnp.arrays(np.int64, draw(shapes(1, 2, 1, 4)), elements=st.integers(0, rows - 1))),
            draw(st.sampled_from([None, 0, rows - 1]))]


case("embedding", embedding_inputs())(
    lambda lib, F, w, i, padding_idx: F.embedding(i, w, padding_idx=padding_idx))


@st.composite
def classification_inputs(draw):
    n, c = draw(st.integers(1, 4)), draw(st.integers(2, 4))
    spatial = draw(st.sampled_from([(), (2,), (2, 3)]))
    logits = draw(floats((n, c) + spatial, -5.0, 5.0))
    targets = draw(hnp.arrays(np.int64, (n,) + spatial, elements=st.sampled_from(
        list(range(c)) + [-100])))
    return [logits, targets, Const(draw(floats((c,), 0.2, 2.0))),
            {"reduction": draw(st.sampled_from(["mean", "sum", "none"])),
             "label_smoothing": draw(st.sampled_from([0.0, 0.1]))},
            draw(st.booleans())]


def _cross_entropy(lib, F, logits, targets, weight, options, weighted):
    if options["reduction"] == "mean" and not (targets != -100).any():
        options = dict(options, reduction="sum")  # both return nan; nan gradients differ
    return F.cross_entropy(logits, targets, weight if weighted else None, **options)


case("cross_entropy", classification_inputs())(_cross_entropy)


def _nll(lib, F, logits, targets, weight, options, weighted):
    reduction = options["reduction"]
    if reduction == "mean" and not (targets != -100).any():
        reduction = "sum"
    return F.nll_loss(F.log_softmax(logits, dim=1), targets, weight if weighted else None,
                      reduction=reduction)


case("nll_loss", classification_inputs())(_nll)


@st.composite
def regression_inputs(draw):
    shape = draw(shapes(min_dims=1, max_dims=3))
    return [draw(floats(shape, -8.0, 8.0)), draw(floats(shape, 0.0, 1.0)),
            Const(draw(floats(shape[-1:], 0.2, 3.0))),
            draw(st.sampled_from(["mean", "sum", "none"]))]


case("mse_loss", regression_inputs())(
    lambda lib, F, x, y, pw, reduction: F.mse_loss(x, y, reduction=reduction))
case("binary_cross_entropy_with_logits", regression_inputs())(
    lambda lib, F, x, y, pw, reduction: F.binary_cross_entropy_with_logits(
        x, y, reduction=reduction) + F.binary_cross_entropy_with_logits(
        x, y, reduction=reduction, pos_weight=pw))


# -- the test --------------------------------------------------------------------------------

class Const:
    """An input array passed as a tensor that does not require grad."""

    def __init__(self, array):
        self.array = array

    def __repr__(self):
        return f"Const({self.array!r})"


def _to(lib, value, grads):
    if isinstance(value, Const):
        return md.tensor(value.array) if lib is md else torch.tensor(value.array)
    if isinstance(value, np.ndarray):
        if lib is md:
            tensor = md.tensor(value, requires_grad=value.dtype.kind == "f")
        else:
            tensor = torch.tensor(value, requires_grad=value.dtype.kind == "f")
        if value.dtype.kind == "f":
            grads.append(tensor)
        return tensor
    return value


def _run(lib, F, expr, inputs):
    grads = []
    args = [_to(lib, value, grads) for value in inputs]
    out = expr(lib, F, *args)
    outs = list(out) if isinstance(out, tuple) else [out]
    total = None
    for k, o in enumerate(outs):
        if o.dtype in (torch.float64, np.float64) and o.requires_grad:
            weights = np.random.default_rng(k).uniform(0.5, 1.5, tuple(o.shape))
            w = md.tensor(weights) if lib is md else torch.tensor(weights)
            term = (o * w).sum()
            total = term if total is None else total + term
    if total is not None:
        total.backward()
    return outs, [None if t.grad is None else t.grad for t in grads]


def _numpy(value):
    return value.detach().numpy() if hasattr(value, "detach") else np.asarray(value)


# PyTorch warns that it copies the input for an even kernel with padding='same'.
@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    expr, inputs = CASES[name]

    @DIFFERENTIAL
    @given(inputs)
    def check(values):
        ours, our_grads = _run(md, mdF, expr, values)
        theirs, their_grads = _run(torch, TF, expr, values)
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            expected = _numpy(t)
            actual = _numpy(o)
            assert actual.shape == expected.shape, (actual.shape, expected.shape)
            assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
            np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-11)
        for o, t in zip(our_grads, their_grads):
            if t is None:
                assert o is None or not np.any(_numpy(o))
                continue
            np.testing.assert_allclose(_numpy(o), _numpy(t), rtol=1e-8, atol=1e-10)

    with np.errstate(all="ignore"):
        check()
