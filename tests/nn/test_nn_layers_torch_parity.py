"""Every added layer computes PyTorch's function with PyTorch's weights: a torch state_dict
loads under the same names and shapes, and outputs, input gradients and parameter gradients
agree (skipped where PyTorch is not installed)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn

torch = pytest.importorskip("torch")
T = torch.nn

RTOL, ATOL = 1e-4, 1e-5

# name -> (minidl layer, torch layer, input shape)
LAYERS = {
    "LeakyReLU": (lambda: nn.LeakyReLU(0.2), lambda: T.LeakyReLU(0.2), (3, 5)),
    "ELU": (lambda: nn.ELU(0.7), lambda: T.ELU(0.7), (3, 5)),
    "SiLU": (nn.SiLU, T.SiLU, (3, 5)),
    "Softplus": (nn.Softplus, T.Softplus, (3, 5)),
    "Softplus_beta": (lambda: nn.Softplus(2.0, 3.0), lambda: T.Softplus(2.0, 3.0), (3, 5)),
    "Hardswish": (nn.Hardswish, T.Hardswish, (4, 6)),
    "Hardsigmoid": (nn.Hardsigmoid, T.Hardsigmoid, (4, 6)),
    "Mish": (nn.Mish, T.Mish, (3, 5)),
    "PReLU_shared": (nn.PReLU, T.PReLU, (2, 3, 4)),
    "PReLU_channels": (lambda: nn.PReLU(3, 0.1), lambda: T.PReLU(3, 0.1), (2, 3, 4, 4)),
    "Identity": (nn.Identity, T.Identity, (2, 3)),
    "GroupNorm": (lambda: nn.GroupNorm(2, 6), lambda: T.GroupNorm(2, 6), (3, 6, 4, 5)),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(4), lambda: T.InstanceNorm2d(4), (2, 4, 5, 5)),
    "InstanceNorm2d_affine_tracked": (
        lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True),
        lambda: T.InstanceNorm2d(4, affine=True, track_running_stats=True), (2, 4, 5, 5)),
    "InstanceNorm1d": (lambda: nn.InstanceNorm1d(3, affine=True),
                       lambda: T.InstanceNorm1d(3, affine=True), (2, 3, 7)),
    "Conv1d": (lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2),
               lambda: T.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 11)),
    "Conv1d_dilated": (lambda: nn.Conv1d(3, 2, 2, dilation=3, bias=False),
                       lambda: T.Conv1d(3, 2, 2, dilation=3, bias=False), (2, 3, 9)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                   output_padding=1, groups=2),
                        lambda: T.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                  output_padding=1, groups=2), (2, 4, 5, 4)),
    "ConvTranspose2d_plain": (lambda: nn.ConvTranspose2d(3, 2, (2, 3)),
                              lambda: T.ConvTranspose2d(3, 2, (2, 3)), (2, 3, 4, 4)),
    "MaxPool1d": (lambda: nn.MaxPool1d(3, 2, 1), lambda: T.MaxPool1d(3, 2, 1), (2, 3, 10)),
    "AvgPool1d": (lambda: nn.AvgPool1d(3, 2, 1, count_include_pad=False),
                  lambda: T.AvgPool1d(3, 2, 1, count_include_pad=False), (2, 3, 10)),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d((3, 4)),
                          lambda: T.AdaptiveMaxPool2d((3, 4)), (2, 3, 7, 9)),
    "AdaptiveMaxPool2d_even": (lambda: nn.AdaptiveMaxPool2d(2), lambda: T.AdaptiveMaxPool2d(2),
                               (2, 3, 6, 8)),
    "Upsample_nearest": (lambda: nn.Upsample(scale_factor=2),
                         lambda: T.Upsample(scale_factor=2), (2, 3, 4, 5)),
    "Upsample_nearest_size": (lambda: nn.Upsample(size=(7, 3)), lambda: T.Upsample(size=(7, 3)),
                              (2, 3, 4, 5)),
    "Upsample_bilinear": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"),
                          lambda: T.Upsample(scale_factor=2, mode="bilinear"), (2, 3, 4, 5)),
    "Upsample_bilinear_corners": (
        lambda: nn.Upsample(size=(6, 9), mode="bilinear", align_corners=True),
        lambda: T.Upsample(size=(6, 9), mode="bilinear", align_corners=True), (2, 3, 4, 5)),
}


def pair(name):
    build, build_torch, shape = LAYERS[name]
    torch.manual_seed(0)
    reference = build_torch()
    layer = build()
    with torch.no_grad():  # non-default affine parameters, so they are really compared
        for parameter in reference.parameters():
            parameter.add_(torch.rand_like(parameter) * 0.5)
    layer.load_state_dict({k: v.detach().numpy().copy()
                           for k, v in reference.state_dict().items()}, strict=True)
    return layer, reference, shape


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_pytorch_forward_and_gradients(name):
    layer, reference, shape = pair(name)
    rng = np.random.default_rng(1)
    # Values 0.1 apart keep max-pooling ties and activation kinks out of the comparison.
    x = (rng.permutation(np.prod(shape)) - np.prod(shape) / 2).reshape(shape).astype(np.float32)
    x = x * np.float32(8 / np.prod(shape))
    ours_x = md.tensor(x, requires_grad=True)
    theirs_x = torch.tensor(x, requires_grad=True)
    out, expected = layer(ours_x), reference(theirs_x)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL)
    weights = rng.standard_normal(out.shape).astype(np.float32)
    out.backward(md.tensor(weights))
    expected.backward(torch.tensor(weights))
    np.testing.assert_allclose(ours_x.grad.numpy(), theirs_x.grad.numpy(), rtol=RTOL,
                               atol=ATOL)
    theirs = dict(reference.named_parameters())
    assert [n for n, _ in layer.named_parameters()] == list(theirs)
    for parameter_name, parameter in layer.named_parameters():
        np.testing.assert_allclose(parameter.grad.numpy(), theirs[parameter_name].grad.numpy(),
                                   rtol=RTOL, atol=ATOL, err_msg=parameter_name)
    for buffer_name, buffer in reference.named_buffers():  # running statistics moved alike
        np.testing.assert_allclose(layer.state_dict()[buffer_name], buffer.numpy(), rtol=RTOL,
                                   atol=ATOL, err_msg=buffer_name)


def test_tracked_instance_norm_matches_pytorch_in_eval_after_training():
    layer, reference, shape = pair("InstanceNorm2d_affine_tracked")
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32) * 2 + 1
        layer(md.tensor(x)), reference(torch.tensor(x))
    layer.eval(), reference.eval()
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(layer(md.tensor(x)).numpy(),
                               reference(torch.tensor(x)).detach().numpy(), rtol=RTOL, atol=ATOL)
    assert int(layer.num_batches_tracked.item()) == 0  # PyTorch never counts them here


def test_functional_forms_match_pytorch():
    F = torch.nn.functional
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 5)).astype(np.float32)
    ours, theirs = md.tensor(x), torch.tensor(x)
    cases = [
        (nn.functional.leaky_relu(ours, 0.3), F.leaky_relu(theirs, 0.3)),
        (nn.functional.elu(ours), F.elu(theirs)),
        (nn.functional.silu(ours), F.silu(theirs)),
        (nn.functional.mish(ours), F.mish(theirs)),
        (nn.functional.softplus(ours, 0.5), F.softplus(theirs, 0.5)),
        (nn.functional.hardswish(ours), F.hardswish(theirs)),
        (nn.functional.hardsigmoid(ours), F.hardsigmoid(theirs)),
        (nn.functional.group_norm(ours, 2), F.group_norm(theirs, 2)),
        (nn.functional.instance_norm(ours), F.instance_norm(theirs)),
        (nn.functional.interpolate(ours, scale_factor=1.5, mode="bilinear"),
         F.interpolate(theirs, scale_factor=1.5, mode="bilinear")),
        (nn.functional.interpolate(ours, size=(3, 8)), F.interpolate(theirs, size=(3, 8))),
        (nn.functional.adaptive_max_pool2d(ours, (4, 3)), F.adaptive_max_pool2d(theirs, (4, 3))),
    ]
    for got, expected in cases:
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="output_padding"):
        nn.ConvTranspose2d(2, 2, 3, stride=1, output_padding=1)
    with pytest.raises(ValueError, match="scale_factor"):
        nn.Upsample()
    with pytest.raises(ValueError, match="mode"):
        nn.Upsample(scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="channels"):
        nn.PReLU(3)(md.zeros(2, 4))
    with pytest.raises(ValueError, match="3-D"):
        nn.Conv1d(2, 2, 3)(md.zeros(2, 2, 3, 3))
