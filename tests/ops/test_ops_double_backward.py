"""Second derivatives (``create_graph=True``) of every op family: against central differences of
the first gradient (a gradgradcheck, float64), and against ``torch.autograd.grad(create_graph=
True)`` on hypothesis-drawn sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import minidl as md
from ops_helpers import FEW, distinct  # noqa: I001  (puts the autograd helpers on the path)
from gradcheck_helpers import check_second_derivatives

F, TF = md.nn.functional, torch.nn.functional


def _both(expression):
    """One expression written once, run on minidl's and torch's namespaces."""
    return (lambda *xs: expression(md, F, *xs)), (lambda *xs: expression(torch, TF, *xs))


def n_of(x):
    return x.shape[2]


def _positive(lib, x):
    return x * x + 0.5


# name -> (expression(lib, functional, *inputs), shapes(n)) with n the drawn size (1..3).
CASES = {
    "add_sub_neg": (lambda lib, f, a, b: (a + b) * (a - b) - (-a) * b, lambda n: [(n, 3), (3,)]),
    "mul_div": (lambda lib, f, a, b: a * b / (b * b + 1.0), lambda n: [(n, 2), (n, 2)]),
    "pow_scalar": (lambda lib, f, a: a ** 3 + _positive(lib, a) ** -1.5, lambda n: [(n, 2)]),
    "pow_tensor": (lambda lib, f, a, b: _positive(lib, a) ** b, lambda n: [(n, 2), (n, 2)]),
    "exp_log_sqrt": (lambda lib, f, a: lib.exp(a * 0.3) * lib.log(_positive(lib, a)) /
                     lib.sqrt(_positive(lib, a)), lambda n: [(n, 3)]),
    "tanh_sigmoid": (lambda lib, f, a: lib.tanh(a) * lib.sigmoid(a * 2), lambda n: [(n, 3)]),
    "relu_abs_clamp": (lambda lib, f, a: (lib.relu(a) + lib.abs(a) * a +
                                          lib.clamp(a, -0.2, 0.3)) * a, lambda n: [(n, 4)]),
    "maximum_minimum": (lambda lib, f, a, b: lib.maximum(a, b) * lib.minimum(a * a, b),
                        lambda n: [(n, 3), (n, 3)]),
    "remainder": (lambda lib, f, a: lib.remainder(a * a, 0.7) * a, lambda n: [(n, 2)]),
    "sum_mean": (lambda lib, f, a: a.sum(dim=1, keepdim=True) ** 2 * a.mean() * a,
                 lambda n: [(n, 3)]),
    "amax_max": (lambda lib, f, a: lib.amax(a, dim=1) ** 3 + a.max() ** 2, lambda n: [(n, 3)]),
    "var_std": (lambda lib, f, a: lib.var(a, dim=1) * lib.std(a), lambda n: [(n, 3)]),
    "reshape_permute_expand": (lambda lib, f, a: (a.reshape(-1, 1).expand(-1, 2).permute(1, 0)
                                                  ** 3).T, lambda n: [(n, 2)]),
    "index_slice_gather": (lambda lib, f, a: a[:, ::2] ** 2 * a[[0] * a.shape[0]][:, :2],
                           lambda n: [(n, 4)]),
    "cat_stack_where": (lambda lib, f, a, b: lib.where(a > 0, lib.cat([a, b], 1)[:, :2] ** 2,
                                                       lib.stack([a, b], 0).sum(0) ** 3),
                        lambda n: [(n, 2), (n, 2)]),
    "matmul_batched": (lambda lib, f, a, b: lib.tanh(lib.matmul(a, b)), lambda n: [(2, n, 3),
                                                                                (3, 2)]),
    "linear": (lambda lib, f, x, w, b: lib.tanh(f.linear(x, w, b)), lambda n: [(n, 3), (2, 3),
                                                                              (2,)]),
    "softmax_log_softmax": (lambda lib, f, a: f.softmax(a, dim=1) * f.log_softmax(a * 0.5, dim=0),
                            lambda n: [(n, 3)]),
    "activations": (lambda lib, f, a: f.elu(a) * f.silu(a) + f.softplus(a) * f.mish(a) +
                    f.leaky_relu(a, 0.1) * f.gelu(a) + f.hardswish(a) * a +
                    f.gelu(a, approximate="tanh") ** 2, lambda n: [(n, 3)]),
    "prelu": (lambda lib, f, a, w: f.prelu(a, w) ** 2, lambda n: [(n, 2, 2), (2,)]),
    "cross_entropy": (lambda lib, f, a: f.cross_entropy(a, lib.tensor([1, 0, 2][:a.shape[0]]),
                                                        label_smoothing=0.1), lambda n: [(n, 3)]),
    "nll_mse_bce": (lambda lib, f, a, b: f.nll_loss(f.log_softmax(a, 1),
                                                    lib.tensor([2, 1, 0][:a.shape[0]])) *
                    f.mse_loss(a, b) + f.binary_cross_entropy_with_logits(
                        a, lib.sigmoid(b), pos_weight=lib.tensor([1.0, 2.0, 0.5],
                                                                 dtype=lib.float64)),
                    lambda n: [(n, 3), (n, 3)]),
    "cross_entropy_weighted_and_soft": (
        lambda lib, f, a, b: f.cross_entropy(a, lib.tensor([2, 0, 1][:a.shape[0]]),
                                             lib.tensor([0.5, 2.0, 1.0], dtype=lib.float64),
                                             label_smoothing=0.2) +
        f.cross_entropy(a, f.softmax(b, dim=1)), lambda n: [(n, 3), (n, 3)]),
    "cross_entropy_spatial_ignored": (
        lambda lib, f, a: f.cross_entropy(a, lib.tensor([[1, -100], [0, 2]][:a.shape[0]]),
                                          reduction="none") ** 2, lambda n: [(min(n, 2), 3, 2)]),
    "layer_norm": (lambda lib, f, x, w, b: f.layer_norm(x, (3,), w, b) ** 3,
                   lambda n: [(n, 3), (3,), (3,)]),
    "batch_norm_group_norm": (lambda lib, f, x, w, b: f.batch_norm(
        x, None, None, w, b, training=True) ** 3 + f.group_norm(x, 1) ** 2,
        lambda n: [(n + 1, 2, 2), (2,), (2,)]),
    "instance_norm_eval_batch_norm": (
        lambda lib, f, x, w, b: f.instance_norm(x, weight=w, bias=b) ** 3 + f.batch_norm(
            x, lib.tensor([0.1, -0.2], dtype=lib.float64), lib.tensor([1.5, 0.5], dtype=lib.float64),
            w, b, training=False) ** 3, lambda n: [(n, 2, 3), (2,), (2,)]),
    "conv2d": (lambda lib, f, x, w, b: f.conv2d(x, w, b, stride=2, padding=1) ** 2,
               lambda n: [(1, 2, n + 2, 3), (2, 2, 2, 2), (2,)]),
    "conv2d_groups_dilation": (lambda lib, f, x, w: lib.tanh(f.conv2d(x, w, groups=2,
                                                                      dilation=2)),
                               lambda n: [(1, 2, n + 3, 4), (2, 1, 2, 2)]),
    "conv_transpose2d": (lambda lib, f, x, w, b: f.conv_transpose2d(x, w, b, stride=2) ** 2,
                         lambda n: [(1, 2, n, 2), (2, 1, 2, 2), (1,)]),
    "conv1d": (lambda lib, f, x, w: f.conv1d(x, w, padding=1) ** 2,
               lambda n: [(1, 2, n + 2), (2, 2, 3)]),
    "pools": (lambda lib, f, x: f.max_pool2d(x, 2) ** 3 + f.avg_pool2d(x, 2) ** 2 +
              f.adaptive_avg_pool2d(x, 1) ** 2, lambda n: [(1, 2, 2 * n, 2)]),
    "resample": (lambda lib, f, x: f.interpolate(x, scale_factor=2, mode="bilinear") ** 2 +
                 f.interpolate(x, size=(2 * n_of(x), 4)) * 0.5 + f.adaptive_max_pool2d(
                     x, 1) ** 3, lambda n: [(1, 2, n, 2)]),
    "attention": (lambda lib, f, q, k, v: f.scaled_dot_product_attention(q, k, v, is_causal=True),
                  lambda n: [(1, n + 1, 2), (1, n + 1, 2), (1, n + 1, 2)]),
    "embedding": (lambda lib, f, w: f.embedding(lib.tensor([0, 2, 0]), w) ** 3,
                  lambda n: [(3, n)]),
}


def _data(name, n, seed):
    _, shapes = CASES[name]
    arrays = distinct(seed, *shapes(n))
    return arrays if isinstance(arrays, list) else [arrays]


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivatives_match_finite_differences(name):
    ours, _ = _both(CASES[name][0])
    check_second_derivatives(ours, *_data(name, 2, seed=1), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@settings(FEW, max_examples=10)
@given(n=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_second_derivatives_match_finite_differences_at_drawn_sizes(name, n, seed):
    ours, _ = _both(CASES[name][0])
    check_second_derivatives(ours, *_data(name, n, seed), rtol=1e-5, atol=1e-6, seed=seed)


def _second_derivatives(lib_grad, tensors, out, weights, directions):
    grads = lib_grad(out, tensors, weights, create_graph=True, allow_unused=True)
    total = sum((g * d).sum() for g, d in zip(grads, directions) if g is not None)
    if not getattr(total, "requires_grad", False):
        return grads, [None] * len(tensors)
    return grads, lib_grad(total, tensors, allow_unused=True)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(FEW, max_examples=2)  # per op; the finite-difference test above covers each op too
@given(n=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_second_derivatives_match_torch(name, n, seed):
    ours, theirs = _both(CASES[name][0])
    arrays = _data(name, n, seed)
    ours_in = [md.tensor(a, requires_grad=True) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_ours, out_theirs = ours(*ours_in), theirs(*theirs_in)
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal(out_ours.shape)
    directions = [rng.standard_normal(a.shape) for a in arrays]
    first, second = _second_derivatives(md.autograd.grad, ours_in, out_ours, md.tensor(weights),
                                        [md.tensor(d) for d in directions])
    first_t, second_t = _second_derivatives(torch.autograd.grad, theirs_in, out_theirs,
                                            torch.tensor(weights),
                                            [torch.tensor(d) for d in directions])
    for label, got, want in (("first", first, first_t), ("second", second, second_t)):
        for position, (g, w) in enumerate(zip(got, want)):
            g = np.zeros(arrays[position].shape) if g is None else g.numpy()
            w = np.zeros(arrays[position].shape) if w is None else w.detach().numpy()
            np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-9,
                                       err_msg=f"{label} derivative, input {position}")


def test_recurrent_layers_second_derivatives_match_torch():
    x = distinct(3, (3, 2, 2))
    for mode in ("LSTM", "GRU", "RNN"):
        md.manual_seed(0)
        ours = getattr(md.nn, mode)(2, 2, bidirectional=True).double()
        theirs = getattr(torch.nn, mode)(2, 2, bidirectional=True).double()
        theirs.load_state_dict({k: torch.tensor(v.copy()) for k, v in ours.state_dict().items()})
        xm, xt = md.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        (gm,) = md.autograd.grad((ours(xm)[0] ** 2).sum(), xm, create_graph=True)
        (gt,) = torch.autograd.grad((theirs(xt)[0] ** 2).sum(), xt, create_graph=True)
        (gm * gm).sum().backward()
        (gt * gt).sum().backward()
        np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-7, err_msg=mode)
        for name, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), dict(theirs.named_parameters())[name].grad,
                                       rtol=1e-7, atol=1e-10, err_msg=f"{mode} {name}")


def test_recurrent_cells_second_derivatives_match_torch():
    x, h = distinct(6, (2, 3), (2, 2))
    for mode in ("LSTMCell", "GRUCell", "RNNCell"):
        md.manual_seed(0)
        ours, theirs = getattr(md.nn, mode)(3, 2).double(), getattr(torch.nn, mode)(3, 2).double()
        theirs.load_state_dict({k: torch.tensor(v.copy()) for k, v in ours.state_dict().items()})
        grads = []
        for lib, cell in ((md, ours), (torch, theirs)):
            xs, hs = lib.tensor(x, requires_grad=True), lib.tensor(h, requires_grad=True)
            out = cell(xs, (hs, hs * 0.5) if mode == "LSTMCell" else hs)
            out = out[0] * out[1] if mode == "LSTMCell" else out
            gx, gh = lib.autograd.grad((out ** 2).sum(), [xs, hs], create_graph=True)
            grads.append(lib.autograd.grad((gx * gx).sum() + (gh ** 3).sum(), [xs, hs]))
        for ours_grad, their_grad in zip(*grads):
            np.testing.assert_allclose(ours_grad.numpy(), their_grad.numpy(), rtol=1e-7,
                                       atol=1e-10, err_msg=mode)


def test_transformer_encoder_layer_second_derivatives_match_torch():
    md.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.0,
                                              batch_first=True).double()
    ours = md.nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.0,
                                         batch_first=True).double()
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    x = distinct(5, (1, 3, 4))
    xm, xt = md.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (gm,) = md.autograd.grad((ours(xm) ** 2).sum(), xm, create_graph=True)
    # torch's fused CPU attention kernel has no double backward; its plain-math one does.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        (gt,) = torch.autograd.grad((theirs(xt) ** 2).sum(), xt, create_graph=True)
        (gt * gt).sum().backward()
    (gm * gm).sum().backward()
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-7, atol=1e-10)
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), dict(theirs.named_parameters())[name].grad,
                                   rtol=1e-7, atol=1e-10, err_msg=name)


def test_api_snippet_for_higher_order_gradients_runs():
    x = md.tensor(np.linspace(-1, 1, 5, dtype=np.float32), requires_grad=True)
    y = (x ** 3).sum()
    (g,) = md.autograd.grad(y, x, create_graph=True)      # 3x², itself differentiable
    (h,) = md.autograd.grad(g.sum(), x)                   # 6x
    y.backward(create_graph=False, retain_graph=False, inputs=None)
    np.testing.assert_allclose(h.numpy(), 6 * x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), g.detach().numpy())
    _, hv = md.autograd.functional.hvp(lambda a: (a ** 3).sum(), x, md.ones_like(x))
    np.testing.assert_allclose(hv.numpy(), 6 * x.numpy(), rtol=1e-6)
    assert md.autograd.functional.jacobian(lambda a: a * 2, x).shape == (5, 5)


def test_third_derivative_of_gelu_and_tanh_matches_torch():
    x = distinct(4, (5,))
    for approximate in ("none", "tanh"):
        xm, xt = md.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        gm, gt = F.gelu(xm, approximate=approximate), TF.gelu(xt, approximate=approximate)
        gm, gt = gm + md.tanh(xm), gt + torch.tanh(xt)
        for _ in range(3):
            (gm,) = md.autograd.grad(gm.sum(), xm, create_graph=True)
            (gt,) = torch.autograd.grad(gt.sum(), xt, create_graph=True)
            np.testing.assert_allclose(gm.numpy(), gt.detach().numpy(), rtol=1e-8, atol=1e-12)


def test_in_place_edit_of_a_saved_tensor_is_caught_on_the_recorded_pass_too():
    x = md.tensor(np.array([0.5, 1.0]), requires_grad=True)
    y = x.exp()
    z = (y * 2).sum()
    y.add_(1)  # y was saved by exp for its gradient
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        md.autograd.grad(z, x, create_graph=True)


def test_second_derivative_through_in_place_ops_matches_torch():
    values = np.array([0.3, -0.8, 1.2])
    results = []
    for lib in (md, torch):
        x = lib.tensor(values, requires_grad=True)
        y = x * 1.0
        y.mul_(x)  # x²
        y[1:] = x[1:] ** 3  # written from other values: y's earlier history is cut there
        y += x.exp()
        (g,) = lib.autograd.grad(y.sum(), x, create_graph=True)
        (h,) = lib.autograd.grad(g.sum(), x)
        results.append((g.detach().numpy(), h.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_hardsigmoid_refuses_double_backward_as_torch_does():
    x = md.tensor(np.array([0.5, -1.0]), requires_grad=True)
    with pytest.raises(RuntimeError, match="HardsigmoidFunction: double backward"):
        md.autograd.grad(F.hardsigmoid(x).sum(), x, create_graph=True)
    xt = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
    (gt,) = torch.autograd.grad(TF.hardsigmoid(xt).sum(), xt, create_graph=True)
    with pytest.raises(RuntimeError, match="hardsigmoid_backward is not implemented"):
        torch.autograd.grad(gt.sum(), xt)


def test_an_op_without_a_differentiable_form_is_named_in_the_error():
    class CubeFunction(md.autograd.Function):  # a user's op with a first derivative only
        def forward(self, a):
            self.a = a
            return a ** 3

        def backward(self, grad):
            return grad * 3 * self.a ** 2

    x = md.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = CubeFunction.apply(x).sum()
    (g,) = md.autograd.grad(y, x, retain_graph=True)  # first order still works
    np.testing.assert_allclose(g.numpy(), [3.0, 12.0])
    with pytest.raises(RuntimeError, match="CubeFunction: double backward \\(create_graph=True"):
        md.autograd.grad(y, x, create_graph=True)


def test_an_input_edited_in_place_unrecorded_is_refused_by_the_recorded_pass():
    # conv2d's first-order rule keeps the im2col columns, its recorded form reads x itself:
    # an edit of x the graph did not see must not change the second derivative silently.
    x = md.tensor(distinct(7, (1, 1, 3, 3)))
    w = md.tensor(distinct(8, (1, 1, 2, 2)), requires_grad=True)
    y = (md.nn.functional.conv2d(x, w) ** 2).sum()
    with md.no_grad():
        x.mul_(2.0)
    (g,) = md.autograd.grad(y, w, retain_graph=True)  # first order: the kept columns, fine
    assert g.shape == (1, 1, 2, 2)
    with pytest.raises(RuntimeError, match="input 0 of Conv2dFunction is at version 1"):
        md.autograd.grad(y, w, create_graph=True)


def test_an_input_edited_in_place_while_recording_keeps_its_old_value_for_the_recorded_pass():
    # A recorded edit hands the conv node a copy of the old x (autograd/inplace.py): the
    # recorded pass reads that copy, and the second derivative is the unedited one.
    values = distinct(9, (1, 1, 3, 3))
    results = []
    for edit in (False, True):
        w = md.tensor(distinct(8, (1, 1, 2, 2)), requires_grad=True)
        x = md.tensor(values) * w.sum()  # a non-leaf input
        y = (md.nn.functional.conv2d(x, w) ** 2).sum()
        if edit:
            x.add_(1.0)
        (g,) = md.autograd.grad(y, w, create_graph=True)
        (h,) = md.autograd.grad((g ** 2).sum(), w)
        results.append(h.numpy())
    np.testing.assert_array_equal(results[0], results[1])
