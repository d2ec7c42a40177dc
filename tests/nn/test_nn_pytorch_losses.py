"""The losses PyTorch users reach for next, module and functional forms, against PyTorch:
value and gradients of every input, for every reduction; CTC's forward-backward in log space
included."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn

torch = pytest.importorskip("torch")
T, F = torch.nn, torch.nn.functional
rng = np.random.default_rng(0)
REDUCTIONS = ("mean", "sum", "none")


def normal(*shape):
    return rng.standard_normal(shape)


def signs(n):
    return np.where(rng.random(n) < 0.5, -1.0, 1.0)


# name -> (minidl module, torch module, inputs: float64 arrays get gradients, and the
# indices of the inputs that are differentiable in both)
CASES = {
    "L1Loss": (nn.L1Loss, lambda r: T.L1Loss(reduction=r),
               lambda: [normal(4, 3), normal(4, 3)], (0, 1)),
    "SmoothL1Loss": (lambda r: nn.SmoothL1Loss(r, beta=0.7),
                     lambda r: T.SmoothL1Loss(reduction=r, beta=0.7),
                     lambda: [normal(4, 3), normal(4, 3)], (0, 1)),
    "SmoothL1Loss_beta0": (lambda r: nn.SmoothL1Loss(r, beta=0.0),
                           lambda r: T.SmoothL1Loss(reduction=r, beta=0.0),
                           lambda: [normal(4, 3), normal(4, 3)], (0, 1)),
    "HuberLoss": (lambda r: nn.HuberLoss(r, delta=0.6),
                  lambda r: T.HuberLoss(reduction=r, delta=0.6),
                  lambda: [normal(4, 3), normal(4, 3)], (0, 1)),
    "BCELoss": (lambda r: nn.BCELoss(reduction=r),
                lambda r: T.BCELoss(reduction=r),
                lambda: [rng.uniform(0.05, 0.95, (4, 3)), rng.uniform(0, 1, (4, 3))], (0, 1)),
    "BCELoss_weight": (lambda r: nn.BCELoss(weight=[0.5, 1.0, 2.0], reduction=r),
                       lambda r: T.BCELoss(weight=torch.tensor([0.5, 1.0, 2.0],
                                                               dtype=torch.float64),
                                           reduction=r),
                       lambda: [rng.uniform(0.05, 0.95, (4, 3)), rng.uniform(0, 1, (4, 3))],
                       (0, 1)),
    "KLDivLoss": (lambda r: nn.KLDivLoss(r), lambda r: T.KLDivLoss(reduction=r),
                  lambda: [np.log(rng.dirichlet(np.ones(5), 4)),
                           np.where(rng.random((4, 5)) < 0.2, 0.0, rng.random((4, 5)))],
                  (0,)),  # in the target, PyTorch's gradient is nan where it is 0; ours is 0
    "KLDivLoss_log_target": (lambda r: nn.KLDivLoss(r, log_target=True),
                             lambda r: T.KLDivLoss(reduction=r, log_target=True),
                             lambda: [normal(4, 5), normal(4, 5)], (0, 1)),
    "GaussianNLLLoss": (lambda r: nn.GaussianNLLLoss(reduction=r),
                        lambda r: T.GaussianNLLLoss(reduction=r),
                        lambda: [normal(4, 3), normal(4, 3), rng.uniform(0.1, 2, (4, 3))],
                        (0, 1, 2)),
    "GaussianNLLLoss_full_per_sample_var": (
        lambda r: nn.GaussianNLLLoss(full=True, eps=0.3, reduction=r),
        lambda r: T.GaussianNLLLoss(full=True, eps=0.3, reduction=r),
        lambda: [normal(4, 3), normal(4, 3), rng.uniform(0.1, 2, (4,))], (0, 1, 2)),
    "CosineEmbeddingLoss": (lambda r: nn.CosineEmbeddingLoss(0.2, r),
                            lambda r: T.CosineEmbeddingLoss(0.2, reduction=r),
                            lambda: [normal(6, 4), normal(6, 4), signs(6)], (0, 1)),
    "MarginRankingLoss": (lambda r: nn.MarginRankingLoss(0.3, r),
                          lambda r: T.MarginRankingLoss(0.3, reduction=r),
                          lambda: [normal(6), normal(6), signs(6)], (0, 1)),
    "TripletMarginLoss": (lambda r: nn.TripletMarginLoss(1.5, reduction=r),
                          lambda r: T.TripletMarginLoss(1.5, reduction=r),
                          lambda: [normal(5, 4), normal(5, 4), normal(5, 4)], (0, 1, 2)),
    "TripletMarginLoss_p1_swap": (
        lambda r: nn.TripletMarginLoss(0.8, p=1.0, swap=True, reduction=r),
        lambda r: T.TripletMarginLoss(0.8, p=1.0, swap=True, reduction=r),
        lambda: [normal(5, 4), normal(5, 4), normal(5, 4)], (0, 1, 2)),
}


def compare(loss, reference, inputs, differentiable, atol=1e-10):
    ours = [md.tensor(x, requires_grad=i in differentiable) for i, x in enumerate(inputs)]
    theirs = [torch.tensor(x, requires_grad=i in differentiable) for i, x in enumerate(inputs)]
    out, expected = loss(*ours), reference(*theirs)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=atol)
    upstream = rng.standard_normal(out.shape)
    out.backward(md.tensor(upstream))
    expected.backward(torch.tensor(upstream))
    for i in differentiable:
        np.testing.assert_allclose(ours[i].grad.numpy(), theirs[i].grad.numpy(), rtol=1e-9,
                                   atol=atol, err_msg=f"gradient of input {i}")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_matches_pytorch_value_and_gradients(name, reduction):
    build, build_torch, make, differentiable = CASES[name]
    compare(build(reduction), build_torch(reduction), make(), differentiable)


def test_kl_div_batchmean_and_the_functional_forms_match_pytorch():
    log_q, p = np.log(rng.dirichlet(np.ones(5), 4)), rng.dirichlet(np.ones(5), 4)
    compare(nn.KLDivLoss("batchmean"), T.KLDivLoss(reduction="batchmean"), [log_q, p], (0, 1))
    x, y = normal(4, 3), normal(4, 3)
    pairs = [
        (nn.functional.l1_loss, F.l1_loss), (nn.functional.smooth_l1_loss, F.smooth_l1_loss),
        (nn.functional.huber_loss, F.huber_loss), (nn.functional.kl_div, F.kl_div),
        (nn.functional.softsign, F.softsign), (nn.functional.logsigmoid, F.logsigmoid),
    ]
    for ours, theirs in pairs:
        arguments = (x,) if ours in (nn.functional.softsign, nn.functional.logsigmoid) else (x, y)
        np.testing.assert_allclose(ours(*[md.tensor(a) for a in arguments]).numpy(),
                                   theirs(*[torch.tensor(a) for a in arguments]).numpy(),
                                   rtol=1e-12)
    probabilities, labels = rng.uniform(0.05, 0.95, (4, 3)), (y > 0).astype(np.float64)
    np.testing.assert_allclose(
        nn.functional.binary_cross_entropy(md.tensor(probabilities), md.tensor(labels)).numpy(),
        F.binary_cross_entropy(torch.tensor(probabilities), torch.tensor(labels)).numpy(),
        rtol=1e-12)


def test_bce_of_a_certain_wrong_prediction_is_large_but_finite_as_in_pytorch():
    p, y = np.array([0.0, 1.0, 1.0]), np.array([1.0, 0.0, 1.0])
    ours = nn.BCELoss(reduction="none")(md.tensor(p), md.tensor(y)).numpy()
    np.testing.assert_array_equal(ours, F.binary_cross_entropy(torch.tensor(p), torch.tensor(y),
                                                               reduction="none").numpy())
    assert ours.tolist() == [100.0, 100.0, 0.0]


def ctc_case():
    steps, batch, classes = 12, 4, 5
    logits = rng.standard_normal((steps, batch, classes))
    targets = np.array([[1, 2, 2, 0], [3, 1, 4, 4], [2, 0, 0, 0], [1, 1, 1, 1]])
    input_lengths = np.array([12, 9, 5, 6])
    target_lengths = np.array([3, 4, 1, 4])  # sample 3 needs 7 steps (blanks between the 1s)
    return logits, targets, input_lengths, target_lengths


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_matches_pytorch_on_logits_value_and_gradient(reduction, zero_infinity):
    logits, targets, input_lengths, target_lengths = ctc_case()
    if not zero_infinity:  # an impossible target makes the loss inf and its gradient nan
        logits, targets = logits[:, :3], targets[:3]
        input_lengths, target_lengths = input_lengths[:3], target_lengths[:3]

    def ours(x):
        return nn.CTCLoss(reduction=reduction, zero_infinity=zero_infinity)(
            x.log_softmax(-1), targets, input_lengths, target_lengths)

    def theirs(x):
        return T.CTCLoss(reduction=reduction, zero_infinity=zero_infinity)(
            x.log_softmax(-1), torch.tensor(targets), torch.tensor(input_lengths),
            torch.tensor(target_lengths))

    compare(ours, theirs, [logits], (0,))


def test_ctc_takes_concatenated_targets_and_unbatched_input_like_pytorch():
    logits, targets, input_lengths, target_lengths = ctc_case()
    lp = torch.tensor(logits).log_softmax(-1)
    flat = np.concatenate([t[:n] for t, n in zip(targets[:3], target_lengths[:3])])
    ours = nn.functional.ctc_loss(md.tensor(lp.numpy()[:, :3]), flat, input_lengths[:3],
                                  target_lengths[:3], reduction="none")
    expected = F.ctc_loss(lp[:, :3], torch.tensor(flat), torch.tensor(input_lengths[:3]),
                          torch.tensor(target_lengths[:3]), reduction="none")
    np.testing.assert_allclose(ours.numpy(), expected.numpy(), rtol=1e-10)
    single = nn.functional.ctc_loss(md.tensor(lp.numpy()[:, 0]), targets[0, :3], [12], [3])
    np.testing.assert_allclose(single.numpy(), F.ctc_loss(
        lp[:, 0], torch.tensor(targets[0, :3]), torch.tensor([12]), torch.tensor([3])).numpy(),
        rtol=1e-10)


def test_ctc_stays_finite_for_long_inputs_where_probabilities_underflow():
    steps = 400  # a product of 400 probabilities near 1/20 is ~1e-520: zero in float64
    lp = torch.tensor(rng.standard_normal((steps, 1, 20)) * 3).log_softmax(-1)
    targets = rng.integers(1, 20, (1, 30))
    ours = nn.functional.ctc_loss(md.tensor(lp.numpy()), targets, [steps], [30], reduction="sum")
    expected = F.ctc_loss(lp, torch.tensor(targets), torch.tensor([steps]), torch.tensor([30]),
                          reduction="sum")
    assert np.isfinite(ours.item()) and ours.item() > 745  # past exp's float64 range
    np.testing.assert_allclose(ours.item(), expected.item(), rtol=1e-10)


def test_bad_loss_arguments_are_named():
    x = md.tensor(normal(3, 2))
    with pytest.raises(ValueError, match="reduction"):
        nn.L1Loss("average")(x, x)
    with pytest.raises(ValueError, match="beta"):
        nn.functional.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(ValueError, match="var"):
        nn.GaussianNLLLoss()(x, x, md.tensor(np.ones((2, 3))))
    with pytest.raises(ValueError, match="target shape"):
        nn.BCELoss()(md.tensor(np.full((3, 2), 0.5)), md.tensor(np.ones(3)))
    lp = md.tensor(np.log(np.full((5, 2, 4), 0.25)))
    with pytest.raises(ValueError, match="input_lengths"):
        nn.CTCLoss()(lp, np.ones((2, 2), np.int64), [6, 5], [2, 2])
    with pytest.raises(ValueError, match="blank=0"):
        nn.CTCLoss()(lp, np.array([[1, 0], [1, 2]]), [5, 5], [2, 2])
    with pytest.raises(ValueError, match="target_lengths sum"):
        nn.CTCLoss()(lp, np.array([1, 2, 3]), [5, 5], [1, 1])
