"""What users build from gradients of gradients, each against PyTorch with copied weights:
a WGAN-GP critic step, one MAML step, a Hessian-vector product of an MLP's loss, and a PINN
loss with d²u/dx². (Forward hooks on a CNN, a tensor hook scaling a gradient and retain_grad
are in test_nn_module_hooks.py and tests/autograd/test_autograd_hooks.py.)"""

from __future__ import annotations

import numpy as np
import torch

import minidl as md
from minidl import nn

TOLERANCE = dict(rtol=1e-5, atol=1e-7)


def _mlp_pair(sizes, activation):
    """The same MLP in minidl and torch (float64), torch's weights copied from minidl's."""
    md.manual_seed(0)
    ours_layers, their_layers = [], []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        ours_layers.append(nn.Linear(n_in, n_out))
        their_layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            ours_layers.append(getattr(nn, activation)())
            their_layers.append(getattr(torch.nn, activation)())
    ours, theirs = nn.Sequential(*ours_layers).double(), torch.nn.Sequential(*their_layers).double()
    theirs.load_state_dict({k: torch.tensor(v.copy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def _assert_parameters_close(ours, theirs, attribute="data"):
    their_parameters = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        value = p.numpy() if attribute == "data" else p.grad.numpy()
        expected = getattr(their_parameters[name], attribute).detach().numpy()
        np.testing.assert_allclose(value, expected, err_msg=name, **TOLERANCE)


def test_wgan_gp_critic_step_matches_torch():
    ours, theirs = _mlp_pair([3, 8, 8, 1], "LeakyReLU")
    opt_m = md.optim.Adam(ours.parameters(), lr=1e-2, betas=(0.5, 0.9))
    opt_t = torch.optim.Adam(theirs.parameters(), lr=1e-2, betas=(0.5, 0.9))
    rng = np.random.default_rng(0)
    for _ in range(2):  # two steps: the second starts from updated weights and Adam moments
        real, fake = rng.standard_normal((6, 3)), rng.standard_normal((6, 3)) * 2
        mix = rng.uniform(size=(6, 1))
        for lib, critic, opt in ((md, ours, opt_m), (torch, theirs, opt_t)):
            tensor = md.tensor if lib is md else torch.tensor
            opt.zero_grad()
            x_hat = tensor(mix) * tensor(real) + (1 - tensor(mix)) * tensor(fake)
            x_hat.requires_grad_(True)
            (grad,) = lib.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
            norms = lib.sqrt((grad * grad).sum(axis=1) if lib is md else (grad * grad).sum(1))
            penalty = ((norms - 1) ** 2).mean()
            loss = critic(tensor(fake)).mean() - critic(tensor(real)).mean() + 10 * penalty
            loss.backward()
            opt.step()
        _assert_parameters_close(ours, theirs)


def test_maml_inner_step_and_outer_update_match_torch():
    ours, theirs = _mlp_pair([2, 6, 1], "Tanh")
    rng = np.random.default_rng(1)
    support_x, support_y = rng.standard_normal((5, 2)), rng.standard_normal((5, 1))
    query_x, query_y = rng.standard_normal((4, 2)), rng.standard_normal((4, 1))
    inner_lr = 0.1

    def forward(lib, params, x):
        functional = md.nn.functional if lib is md else torch.nn.functional
        w0, b0, w1, b1 = params
        return functional.linear(lib.tanh(functional.linear(x, w0, b0)), w1, b1)

    for lib, model in ((md, ours), (torch, theirs)):
        tensor = md.tensor if lib is md else torch.tensor
        functional = md.nn.functional if lib is md else torch.nn.functional
        params = list(model.parameters())
        support_loss = functional.mse_loss(forward(lib, params, tensor(support_x)),
                                           tensor(support_y))
        grads = lib.autograd.grad(support_loss, params, create_graph=True)
        adapted = [p - inner_lr * g for p, g in zip(params, grads)]
        query_loss = functional.mse_loss(forward(lib, adapted, tensor(query_x)), tensor(query_y))
        query_loss.backward()  # the outer (meta) gradient, through the inner step
    _assert_parameters_close(ours, theirs, "grad")


def test_hessian_vector_product_of_an_mlp_loss_matches_torch():
    ours, theirs = _mlp_pair([3, 5, 2], "Tanh")
    rng = np.random.default_rng(2)
    x, targets = rng.standard_normal((4, 3)), np.array([0, 1, 1, 0])
    directions = [rng.standard_normal(p.shape) for p in ours.parameters()]
    results = []
    for lib, model in ((md, ours), (torch, theirs)):
        tensor = md.tensor if lib is md else torch.tensor
        functional = md.nn.functional if lib is md else torch.nn.functional
        params = list(model.parameters())
        loss = functional.cross_entropy(model(tensor(x)), tensor(targets))
        grads = lib.autograd.grad(loss, params, create_graph=True)
        dot = sum((g * tensor(v)).sum() for g, v in zip(grads, directions))
        results.append([h.detach().numpy() for h in lib.autograd.grad(dot, params)])
    for ours_hv, their_hv in zip(*results):
        np.testing.assert_allclose(ours_hv, their_hv, **TOLERANCE)
    # The same kind of product through autograd.functional.hvp, for the loss as a function of
    # the first weight matrix alone (the Hessian's diagonal block times a direction).
    products = []
    for lib, model in ((md, ours), (torch, theirs)):
        tensor = md.tensor if lib is md else torch.tensor
        functional = md.nn.functional if lib is md else torch.nn.functional
        hvp = md.autograd.functional.hvp if lib is md else torch.autograd.functional.hvp

        def loss_of_weight(w, lib=lib, model=model, tensor=tensor, functional=functional):
            hidden = lib.tanh(functional.linear(tensor(x), w, model[0].bias.detach()))
            return functional.cross_entropy(model[2](hidden), tensor(targets))

        _, product = hvp(loss_of_weight, model[0].weight.detach(), tensor(directions[0]))
        products.append(product.detach().numpy())
    np.testing.assert_allclose(products[0], products[1], **TOLERANCE)


def test_pinn_loss_with_second_derivative_in_x_matches_torch():
    ours, theirs = _mlp_pair([1, 8, 8, 1], "Tanh")
    points = np.linspace(-1, 1, 7).reshape(-1, 1)
    for lib, model in ((md, ours), (torch, theirs)):
        tensor = md.tensor if lib is md else torch.tensor
        x = tensor(points)
        x.requires_grad_(True)
        u = model(x)
        (du,) = lib.autograd.grad(u.sum(), x, create_graph=True)
        (d2u,) = lib.autograd.grad(du.sum(), x, create_graph=True)
        residual = d2u + 2.0 - x * x  # -u'' = 2 - x² inside, u(±1) = 0 on the boundary
        boundary = model(tensor(np.array([[-1.0], [1.0]])))
        loss = (residual ** 2).mean() + (boundary ** 2).mean()
        loss.backward()
    _assert_parameters_close(ours, theirs, "grad")
