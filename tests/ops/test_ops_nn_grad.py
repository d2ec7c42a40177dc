"""Gradients of the neural-network ops (softmax, losses, dropout, normalisation, embedding)
against finite differences, and their values against direct NumPy formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minidl as md
from minidl.ops import nn_ops
from ops_helpers import FEW, SETTINGS, check_gradients, normal, positive

seeds = st.integers(0, 2**31 - 1)


def f64(array):
    return md.tensor(array, dtype=np.float64)


def log_softmax_np(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3), seed=seeds,
       data=st.data())
def test_softmax_and_log_softmax(op, shape, seed, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    assume(shape[axis] > 0)  # an empty softmax axis: see test_softmax_over_an_empty_axis
    x = normal(seed, shape) * 3
    check_gradients(lambda a: getattr(a, op)(axis), x)
    expected = log_softmax_np(x, axis)
    expected = np.exp(expected) if op == "softmax" else expected
    np.testing.assert_allclose(getattr(f64(x), op)(dim=axis).numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_an_empty_axis(op):
    out = getattr(md.tensor(np.zeros((2, 0))), op)(-1)
    assert out.shape == (2, 0)


def test_softmax_is_stable_for_large_logits():
    x = md.tensor(np.array([[1000.0, 0.0, -1000.0]], np.float32))
    assert np.isfinite(x.softmax(-1).numpy()).all()
    assert np.isfinite(x.log_softmax(-1).numpy()).all()


def cross_entropy_np(logits, targets, reduction, ignore_index, smoothing):
    """(N, C) logits and (N,) targets, following PyTorch's definition."""
    logp = log_softmax_np(logits, 1)
    keep = targets != ignore_index
    safe = np.where(keep, targets, 0)
    nll = -logp[np.arange(len(targets)), safe]
    smooth = -logp.mean(axis=1)
    losses = np.where(keep, (1 - smoothing) * nll + smoothing * smooth, 0.0)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / keep.sum()


@st.composite
def class_targets(draw, n, c, ignore_index):
    choices = st.integers(0, c - 1)
    if ignore_index is not None:
        choices = choices | st.just(ignore_index)
    return np.array(draw(st.lists(choices, min_size=n, max_size=n)), dtype=np.int64)


@SETTINGS
@given(seed=seeds, n=st.integers(1, 4), c=st.integers(1, 4), data=st.data(),
       reduction=st.sampled_from(["mean", "sum", "none"]),
       ignore_index=st.sampled_from([-100, 0, 2]),
       smoothing=st.sampled_from([0.0, 0.1, 0.5]))
def test_cross_entropy_with_class_targets(seed, n, c, data, reduction, ignore_index, smoothing):
    targets = data.draw(class_targets(n, c, ignore_index))
    if reduction == "mean" and not (targets != ignore_index).any():
        targets[0] = (ignore_index + 1) % c  # keep at least one target: the mean of none is nan
    # With a single class that is also ignore_index no target can be kept; nothing to check.
    assume(reduction != "mean" or (targets != ignore_index).any())
    logits = normal(seed, (n, c)) * 2

    def loss(x):
        return nn_ops.cross_entropy(x, md.tensor(targets), reduction=reduction, ignore_index=ignore_index, label_smoothing=smoothing)

    check_gradients(loss, logits)
    np.testing.assert_allclose(
        loss(f64(logits)).numpy(),
        cross_entropy_np(logits, targets, reduction, ignore_index, smoothing), atol=1e-12)


@SETTINGS
@given(seed=seeds, spatial=st.sampled_from([(2,), (2, 3), (1, 1), (0,)]),
       reduction=st.sampled_from(["mean", "sum", "none"]), smoothing=st.sampled_from([0.0, 0.2]))
def test_cross_entropy_with_spatial_dimensions(seed, spatial, reduction, smoothing):
    n, c = 2, 3
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, c, (n,) + spatial)
    logits = normal(seed, (n, c) + spatial)
    if reduction == "mean" and targets.size == 0:
        return
    check_gradients(lambda x: nn_ops.cross_entropy(x, md.tensor(targets), reduction=reduction,
                                                   label_smoothing=smoothing), logits)
    # Same as moving the class axis last and treating every position as a sample.
    flat_logits = np.moveaxis(logits, 1, -1).reshape(-1, c)
    expected = cross_entropy_np(flat_logits, targets.reshape(-1), reduction, -100, smoothing)
    actual = nn_ops.cross_entropy(f64(logits), md.tensor(targets), reduction=reduction,
                                  label_smoothing=smoothing).numpy()
    if reduction == "none":
        expected = expected.reshape(targets.shape)
    np.testing.assert_allclose(actual, expected, atol=1e-12)


@SETTINGS
@given(seed=seeds, shape=st.sampled_from([(3, 4), (2, 3, 2), (4,)]),
       reduction=st.sampled_from(["mean", "sum", "none"]), smoothing=st.sampled_from([0.0, 0.3]))
def test_cross_entropy_with_probability_targets(seed, shape, reduction, smoothing):
    axis = 1 if len(shape) > 1 else 0
    probs = positive(seed + 1, shape)
    probs = probs / probs.sum(axis=axis, keepdims=True)
    logits = normal(seed, shape)
    check_gradients(lambda x, p: nn_ops.cross_entropy(x, p, reduction=reduction,
                                                      label_smoothing=smoothing), logits, probs)
    smoothed = probs * (1 - smoothing) + smoothing / shape[axis]
    losses = -(smoothed * log_softmax_np(logits, axis)).sum(axis=axis)
    expected = {"none": losses, "sum": losses.sum(), "mean": losses.mean()}[reduction]
    actual = nn_ops.cross_entropy(f64(logits), f64(probs), reduction=reduction, label_smoothing=smoothing)
    np.testing.assert_allclose(actual.numpy(), expected, atol=1e-12)


def test_cross_entropy_of_one_sample_without_batch_axis():
    logits = normal(0, (4,))
    check_gradients(lambda x: nn_ops.cross_entropy(x, md.tensor(2)), logits)
    np.testing.assert_allclose(nn_ops.cross_entropy(f64(logits), md.tensor(2)).item(),
                               -log_softmax_np(logits, 0)[2])


def test_cross_entropy_mean_of_only_ignored_targets_is_nan():
    loss = nn_ops.cross_entropy(md.tensor(np.zeros((2, 3))), md.tensor([-100, -100]))
    assert np.isnan(loss.item())


@SETTINGS
@given(seed=seeds, n=st.integers(1, 4), c=st.integers(1, 4), data=st.data(),
       reduction=st.sampled_from(["mean", "sum", "none"]))
def test_nll_loss(seed, n, c, data, reduction):
    targets = data.draw(class_targets(n, c, -100))
    if reduction == "mean" and not (targets != -100).any():
        targets[0] = 0
    logp = log_softmax_np(normal(seed, (n, c)), 1)
    check_gradients(lambda x: nn_ops.nll_loss(x, md.tensor(targets), reduction=reduction), logp)
    # nll_loss of log_softmax is cross_entropy.
    np.testing.assert_allclose(nn_ops.nll_loss(f64(logp), md.tensor(targets), reduction=reduction).numpy(),
                               cross_entropy_np(logp, targets, reduction, -100, 0.0), atol=1e-12)


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3), seed=seeds,
       reduction=st.sampled_from(["mean", "sum", "none"]))
def test_mse_loss(shape, seed, reduction):
    a, b = normal(seed, shape), normal(seed + 1, shape)
    check_gradients(lambda x, y: nn_ops.mse_loss(x, y, reduction), a, b)
    expected = {"none": (a - b) ** 2, "sum": ((a - b) ** 2).sum(), "mean": ((a - b) ** 2).mean()}
    np.testing.assert_allclose(nn_ops.mse_loss(f64(a), f64(b), reduction).numpy(),
                               expected[reduction], atol=1e-12)


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3), seed=seeds,
       reduction=st.sampled_from(["mean", "sum", "none"]))
def test_binary_cross_entropy_with_logits(shape, seed, reduction):
    x = normal(seed, shape) * 3
    y = np.random.default_rng(seed).uniform(0, 1, shape)
    # Gradients reach both the logits and (as in PyTorch) a target that requires them.
    check_gradients(lambda a, t: nn_ops.binary_cross_entropy_with_logits(a, t, reduction=reduction), x, y)
    losses = -(y * np.log(1 / (1 + np.exp(-x))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-x))))
    expected = {"none": losses, "sum": losses.sum(), "mean": losses.mean()}[reduction]
    np.testing.assert_allclose(
        nn_ops.binary_cross_entropy_with_logits(f64(x), f64(y), reduction=reduction).numpy(), expected,
        rtol=1e-10, atol=1e-12)


def test_binary_cross_entropy_with_logits_does_not_overflow():
    x = md.tensor(np.array([1000.0, -1000.0], np.float32), requires_grad=True)
    loss = nn_ops.binary_cross_entropy_with_logits(x, md.tensor([0.0, 1.0]), reduction="sum")
    loss.backward()
    np.testing.assert_allclose(loss.item(), 2000.0)
    np.testing.assert_allclose(x.grad.numpy(), [1.0, -1.0])


@FEW
@given(seed=seeds, p=st.sampled_from([0.0, 0.3, 0.5, 0.9, 1.0]),
       shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
def test_dropout_with_a_fixed_generator_is_a_fixed_linear_map(seed, p, shape):
    def f(x):
        return nn_ops.dropout(x, p, training=True, generator=md.Generator(seed))

    x = normal(seed, shape)
    check_gradients(f, x)
    out = f(f64(x)).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], x[kept] / (1 - p))  # survivors are scaled by 1/(1-p)
    np.testing.assert_array_equal(f(f64(x)).numpy(), out)      # same generator, same mask


def test_dropout_draws_from_the_global_generator_and_is_identity_in_eval():
    x = md.tensor(np.ones(1000))
    md.manual_seed(3)
    first = nn_ops.dropout(x, 0.5).numpy()
    md.manual_seed(3)
    np.testing.assert_array_equal(nn_ops.dropout(x, 0.5).numpy(), first)
    assert 0.4 < (first == 0).mean() < 0.6
    assert nn_ops.dropout(x, 0.5, training=False) is x


@SETTINGS
@given(seed=seeds, lead=st.sampled_from([(), (2,), (3, 2), (0,)]),
       normalized=st.sampled_from([(3,), (2, 3), (1,)]), affine=st.booleans())
def test_layer_norm(seed, lead, normalized, affine):
    x = normal(seed, lead + normalized)
    w, b = normal(seed + 1, normalized), normal(seed + 2, normalized)
    if affine:
        check_gradients(lambda a, w_, b_: nn_ops.layer_norm(a, normalized, w_, b_), x, w, b)
    else:
        check_gradients(lambda a: nn_ops.layer_norm(a, normalized), x)
    axes = tuple(range(-len(normalized), 0))
    expected = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(
        x.var(axis=axes, keepdims=True) + 1e-5)
    if affine:
        expected = expected * w + b
    actual = nn_ops.layer_norm(f64(x), normalized, f64(w) if affine else None,
                               f64(b) if affine else None)
    np.testing.assert_allclose(actual.numpy(), expected, atol=1e-10)


@SETTINGS
@given(seed=seeds, shape=st.sampled_from([(4, 3), (3, 2, 4), (2, 3, 2, 2), (1, 2, 3)]),
       affine=st.booleans())
def test_batch_norm_in_training(seed, shape, affine):
    x = normal(seed, shape)
    c = shape[1]
    w, b = normal(seed + 1, (c,)), normal(seed + 2, (c,))
    if affine:
        check_gradients(lambda a, w_, b_: nn_ops.batch_norm(a, None, None, w_, b_, True), x, w, b)
    else:
        check_gradients(lambda a: nn_ops.batch_norm(a, None, None, training=True), x)
    axes = (0,) + tuple(range(2, len(shape)))
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    running_mean, running_var = f64(np.zeros(c)), f64(np.ones(c))
    out = nn_ops.batch_norm(f64(x), running_mean, running_var, f64(w) if affine else None,
                            f64(b) if affine else None, training=True, momentum=0.1)
    bshape = (1, c) + (1,) * (len(shape) - 2)
    expected = (x - mean.reshape(bshape)) / np.sqrt(var.reshape(bshape) + 1e-5)
    if affine:
        expected = expected * w.reshape(bshape) + b.reshape(bshape)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-10)
    count = x.size // c
    np.testing.assert_allclose(running_mean.numpy(), 0.1 * mean)
    np.testing.assert_allclose(running_var.numpy(), 0.9 + 0.1 * var * count / (count - 1))


@SETTINGS
@given(seed=seeds, shape=st.sampled_from([(4, 3), (3, 2, 4), (2, 3, 2, 2)]))
def test_batch_norm_in_evaluation(seed, shape):
    c = shape[1]
    x = normal(seed, shape)
    rm, rv = f64(normal(seed + 3, (c,))), f64(positive(seed + 4, (c,)))
    check_gradients(lambda a, w, b: nn_ops.batch_norm(a, rm, rv, w, b, training=False), x,
                    normal(seed + 1, (c,)), normal(seed + 2, (c,)))
    before = rm.numpy().copy(), rv.numpy().copy()
    nn_ops.batch_norm(f64(x), rm, rv, training=False)
    np.testing.assert_array_equal(rm.numpy(), before[0])   # evaluation never moves them
    np.testing.assert_array_equal(rv.numpy(), before[1])


@SETTINGS
@given(seed=seeds, rows=st.integers(1, 4),
       index_shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3),
       data=st.data())
def test_embedding_scatter_adds_into_repeated_rows(seed, rows, index_shape, data):
    indices = np.array(data.draw(hnp.arrays(np.int64, index_shape,
                                            elements=st.integers(0, rows - 1))))
    table = normal(seed, (rows, 3))
    check_gradients(lambda w: nn_ops.embedding(md.tensor(indices), w), table)
    np.testing.assert_array_equal(nn_ops.embedding(indices, f64(table)).numpy(), table[indices])


def test_nll_loss_ignores_minus_infinity_away_from_the_target():
    # A class with probability 0 (log p = -inf) that is not the target must not turn the loss or
    # the gradient into nan (-inf · 0 would).
    log_probs = md.tensor(np.array([[0.0, -np.inf, -1.0], [-2.0, -np.inf, -0.5]], np.float32),
                          requires_grad=True)
    loss = nn_ops.nll_loss(log_probs, md.tensor([0, 2]))
    loss.backward()
    assert loss.item() == pytest.approx(0.25)
    np.testing.assert_array_equal(log_probs.grad.numpy(), [[-0.5, 0, 0], [0, 0, -0.5]])
