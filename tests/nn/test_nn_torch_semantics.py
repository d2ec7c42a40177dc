"""Layer and loss semantics that code ported from PyTorch relies on: Embedding's padding_idx,
conv padding='same'/'valid', adaptive pooling to any size, the losses' weight/pos_weight,
broadcasting and spatial forms."""

import warnings

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.nn import functional as F


def test_embedding_padding_row_is_returned_as_stored_and_gets_no_gradient():
    emb = nn.Embedding(4, 3, padding_idx=1)
    with md.no_grad():
        emb.weight[1] = md.tensor([5.0, float("inf"), -2.0])
    idx = md.tensor([[1, 2], [1, 1]])
    out = emb(idx)
    np.testing.assert_array_equal(out.detach().numpy()[0, 0], [5.0, np.inf, -2.0])
    (out * out.detach().clip(-1, 1)).sum().backward()
    assert not np.isnan(emb.weight.grad.numpy()).any()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[1], [0.0, 0.0, 0.0])
    assert np.abs(emb.weight.grad.numpy()[2]).sum() > 0


def test_embedding_padding_matches_torch():
    torch = pytest.importorskip("torch")
    weight = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    idx = np.array([[0, 3, 3], [4, 0, 1]])
    ours = md.tensor(weight, requires_grad=True)
    theirs = torch.tensor(weight, requires_grad=True)
    F.embedding(md.tensor(idx), ours, padding_idx=3).pow(2).sum().backward()
    torch.nn.functional.embedding(torch.tensor(idx), theirs, padding_idx=3).pow(2).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


def _pair(torch, array, dtype=np.float64):
    return (md.tensor(array.astype(dtype), requires_grad=True),
            torch.tensor(array.astype(dtype), requires_grad=True))


@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 2), (4,)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_and_nll_with_class_weights_match_torch(shape, reduction, smoothing):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(shape)
    classes = shape[1] if len(shape) > 1 else shape[0]
    targets = rng.integers(0, classes, (shape[0],) + shape[2:] if len(shape) > 1 else ())
    if len(shape) > 1:
        targets.reshape(-1)[0] = -100  # one ignored target
    weight = rng.uniform(0.5, 2.0, classes)
    ours, theirs = _pair(torch, logits)
    mine = F.cross_entropy(ours, md.tensor(targets), md.tensor(weight), reduction=reduction,
                           label_smoothing=smoothing)
    ref = torch.nn.functional.cross_entropy(theirs, torch.tensor(targets), torch.tensor(weight),
                                            reduction=reduction, label_smoothing=smoothing)
    assert mine.shape == tuple(ref.shape)
    np.testing.assert_allclose(mine.detach().numpy(), ref.detach().numpy(), rtol=1e-10)
    mine.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-12)

    ours, theirs = _pair(torch, logits)
    mine = F.nll_loss(ours.log_softmax(dim=1 if len(shape) > 1 else 0), md.tensor(targets),
                      weight=md.tensor(weight), reduction=reduction)
    ref = torch.nn.functional.nll_loss(theirs.log_softmax(dim=1 if len(shape) > 1 else 0),
                                       torch.tensor(targets), torch.tensor(weight),
                                       reduction=reduction)
    np.testing.assert_allclose(mine.detach().numpy(), ref.detach().numpy(), rtol=1e-10)
    mine.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_unbatched_cross_entropy_none_is_0d():
    out = F.cross_entropy(md.tensor([1.0, 2.0, 0.5]), md.tensor(1), reduction="none")
    assert out.shape == ()  # PyTorch: a 0-d loss for unbatched (C,) logits


def test_nll_loss_with_every_target_ignored_has_a_zero_gradient():
    # PyTorch: the mean of nothing is nan, but no element took part, so the gradient is 0.
    x = md.tensor(np.zeros((2, 3), np.float32), requires_grad=True)
    loss = F.nll_loss(x.log_softmax(dim=1), md.tensor([-100, -100]))
    assert np.isnan(loss.item())
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits_pos_weight_and_weight_match_torch(reduction):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    logits, target = rng.standard_normal((4, 3)) * 5, rng.uniform(0, 1, (4, 3))
    pos_weight, weight = rng.uniform(0.5, 3.0, 3), rng.uniform(0.5, 2.0, (4, 1))
    ours, theirs = _pair(torch, logits)
    ours_t, theirs_t = _pair(torch, target)
    ours_p, theirs_p = md.tensor(pos_weight), torch.tensor(pos_weight)  # torch: no grad
    mine = F.binary_cross_entropy_with_logits(ours, ours_t, md.tensor(weight),
                                              reduction=reduction, pos_weight=ours_p)
    ref = torch.nn.functional.binary_cross_entropy_with_logits(
        theirs, theirs_t, torch.tensor(weight), reduction=reduction, pos_weight=theirs_p)
    np.testing.assert_allclose(mine.detach().numpy(), ref.detach().numpy(), rtol=1e-10)
    mine.sum().backward()
    ref.sum().backward()
    for a, b in ((ours, theirs), (ours_t, theirs_t)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-12)
    module = nn.BCEWithLogitsLoss(reduction=reduction, pos_weight=pos_weight)
    np.testing.assert_allclose(module(md.tensor(logits), md.tensor(target)).numpy(),
                               torch.nn.BCEWithLogitsLoss(
                                   reduction=reduction, pos_weight=torch.tensor(pos_weight))(
                                   torch.tensor(logits), torch.tensor(target)).numpy(),
                               rtol=1e-10)


def test_mse_loss_broadcasts_with_torchs_warning():
    prediction, target = md.tensor([1.0, 2.0, 3.0]), md.tensor([[1.0], [2.0], [3.0]])
    with pytest.warns(UserWarning, match="different to the input size"):
        loss = F.mse_loss(prediction, target)
    expected = ((np.array([1.0, 2.0, 3.0]) - np.array([[1.0], [2.0], [3.0]])) ** 2).mean()
    assert loss.item() == pytest.approx(expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.mse_loss(prediction, prediction)  # same shapes: no warning
    with pytest.raises(ValueError, match="mse_loss"):
        F.mse_loss(prediction, md.tensor([1.0, 2.0]))


# PyTorch warns that it copies the input for an even kernel with padding='same'.
@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("kernel,dilation", [((3, 3), 1), ((2, 4), 1), ((3, 2), (2, 3))])
def test_conv2d_same_and_valid_padding_match_torch(kernel, dilation):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3) + kernel)
    for padding in ("same", "valid"):
        ours, theirs = _pair(torch, x)
        ow, tw = _pair(torch, w)
        mine = F.conv2d(ours, ow, padding=padding, dilation=dilation)
        ref = torch.nn.functional.conv2d(theirs, tw, padding=padding, dilation=dilation)
        assert mine.shape == tuple(ref.shape)
        if padding == "same":
            assert mine.shape[2:] == x.shape[2:]
        np.testing.assert_allclose(mine.detach().numpy(), ref.detach().numpy(), rtol=1e-10,
                                   atol=1e-12)
        (mine * mine).sum().backward()
        (ref * ref).sum().backward()
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(ow.grad.numpy(), tw.grad.numpy(), rtol=1e-9, atol=1e-10)


def test_conv2d_layer_same_padding_keeps_the_size_and_rejects_strides():
    layer = nn.Conv2d(2, 3, 4, padding="same")
    assert layer(md.randn(1, 2, 5, 5)).shape == (1, 3, 5, 5)
    assert layer.get_config()["padding"] == "same"
    with pytest.raises(ValueError, match="stride 1"):
        nn.Conv2d(2, 3, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding"):
        F.conv2d(md.randn(1, 2, 5, 5), md.randn(3, 2, 3, 3), padding="full")


@pytest.mark.parametrize("size", [(3, 5), (4, 4), 1, (None, 2), (5, 7)])
def test_adaptive_avg_pool_to_any_size_matches_torch(size):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).standard_normal((2, 3, 7, 10))
    ours, theirs = _pair(torch, x)
    mine = nn.AdaptiveAvgPool2d(size)(ours)
    ref = torch.nn.AdaptiveAvgPool2d(size)(theirs)
    assert mine.shape == tuple(ref.shape)
    np.testing.assert_allclose(mine.detach().numpy(), ref.detach().numpy(), rtol=1e-12)
    (mine * mine).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10)


@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2)])
def test_cross_entropy_probability_targets_with_class_weights_match_torch(shape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    logits, probs = rng.standard_normal(shape), rng.uniform(0.1, 1.0, shape)
    probs /= probs.sum(axis=1, keepdims=True)
    weight = rng.uniform(0.5, 2.0, shape[1])
    ours, theirs = _pair(torch, logits)
    mine = F.cross_entropy(ours, md.tensor(probs), md.tensor(weight), label_smoothing=0.1)
    ref = torch.nn.functional.cross_entropy(theirs, torch.tensor(probs), torch.tensor(weight),
                                            label_smoothing=0.1)
    np.testing.assert_allclose(mine.item(), ref.item(), rtol=1e-12)
    mine.backward()
    ref.backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10)
