"""Attention against PyTorch with copied weights: scaled_dot_product_attention,
MultiheadAttention (masks, layouts, separate key/value sizes, returned weights) and the
Transformer encoder and decoder layers -- outputs and gradients; plus finite-difference checks
in float64 and the dropout inside attention drawing from minidl's generator."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import minidl as md
from minidl import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autograd"))
from gradcheck_helpers import check_gradients  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
rng = np.random.default_rng(0)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def copy_weights(ours, theirs):
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()},
                         strict=True)


def compare(ours_fn, theirs_fn, arrays, constants=()):
    """Outputs and input gradients of ours_fn(*tensors, *constants) and theirs_fn(...)."""
    torch = pytest.importorskip("torch")
    ours_in = [md.tensor(a, requires_grad=True) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    ours_out = ours_fn(*ours_in, *[None if c is None else md.tensor(c) for c in constants])
    theirs_out = theirs_fn(*theirs_in, *[None if c is None else torch.tensor(c)
                                         for c in constants])
    np.testing.assert_allclose(ours_out.numpy(), theirs_out.detach().numpy(), rtol=RTOL,
                               atol=ATOL)
    weights = normal(*ours_out.shape)
    ours_out.backward(md.tensor(weights))
    theirs_out.backward(torch.tensor(weights))
    for a, b in zip(ours_in, theirs_in):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=RTOL, atol=ATOL)


def keep_mask(*shape):
    mask = rng.random(shape) > 0.3
    mask[..., 0] = True  # every query keeps a key: no all--inf row
    return mask


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask_scale"])
def test_scaled_dot_product_attention_matches_pytorch(case):
    torch = pytest.importorskip("torch")
    options = {"plain": ({}, None), "causal": ({"is_causal": True}, None),
               "bool_mask": ({}, keep_mask(5, 6)),
               "float_mask_scale": ({"scale": 0.3}, normal(2, 1, 5, 6))}[case]
    kwargs, mask = options
    arrays = [normal(2, 3, 5, 4), normal(2, 3, 6, 4), normal(2, 3, 6, 7)]
    if case == "causal":
        arrays[1], arrays[2] = arrays[1][:, :, :5], arrays[2][:, :, :5]
    compare(lambda q, k, v, m: nn.functional.scaled_dot_product_attention(q, k, v, m, **kwargs),
            lambda q, k, v, m: torch.nn.functional.scaled_dot_product_attention(q, k, v, m,
                                                                                **kwargs),
            arrays, [mask])


MHA_CASES = {
    "sequence_first": ({}, (5, 3, 8), (6, 3, 8), {}),
    "batch_first_masks": ({"batch_first": True}, (3, 5, 8), (3, 6, 8),
                          {"key_padding_mask": "padding", "attn_mask": "blocked"}),
    # keys appended along the sequence axis, which batch_first moves to axis 1
    "batch_first_appended_keys": ({"batch_first": True, "add_bias_kv": True,
                                   "add_zero_attn": True}, (3, 5, 8), (3, 6, 8),
                                  {"key_padding_mask": "padding"}),
    "float_mask_per_head": ({}, (5, 3, 8), (6, 3, 8), {"attn_mask": "float_per_head"}),
    "other_key_value_sizes": ({"kdim": 5, "vdim": 3}, (5, 3, 8), (6, 3, None), {}),
    "no_bias_unbatched": ({"bias": False}, (5, 8), (6, 8), {}),
    "causal": ({}, (5, 3, 8), (5, 3, 8), {"is_causal": True}),
}


def mha_masks(spec, query_shape, key_shape, batch_first):
    batch = query_shape[0] if batch_first else query_shape[1]
    length = query_shape[1] if batch_first else query_shape[0]
    source = key_shape[1] if batch_first else key_shape[0]
    made = {}
    for name, kind in spec.items():
        if kind == "padding":
            mask = np.zeros((batch, source), np.bool_)
            mask[1, 3:] = True
            made[name] = mask
        elif kind == "blocked":
            made[name] = ~keep_mask(length, source)
        elif kind == "float_per_head":
            made[name] = normal(batch * 2, length, source)
    return made


@pytest.mark.parametrize("name", sorted(MHA_CASES))
def test_multihead_attention_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    kwargs, q_shape, kv_shape, mask_spec = MHA_CASES[name]
    theirs = torch.nn.MultiheadAttention(8, 2, **kwargs)
    ours = nn.MultiheadAttention(8, 2, **kwargs)
    copy_weights(ours, theirs)
    is_causal = mask_spec.get("is_causal", False)
    masks = mha_masks({k: v for k, v in mask_spec.items() if k != "is_causal"}, q_shape,
                      kv_shape, kwargs.get("batch_first", False))
    k_shape = kv_shape[:-1] + (kwargs.get("kdim", 8),)
    v_shape = kv_shape[:-1] + (kwargs.get("vdim", 8),)
    arrays = [normal(*q_shape), normal(*k_shape), normal(*v_shape)]
    names = sorted(masks)
    if is_causal:  # PyTorch takes is_causal only as a hint next to the mask itself
        masks["attn_mask"] = np.triu(np.ones((q_shape[0], kv_shape[0]), np.bool_), 1)
        names = ["attn_mask"]

    def ours_fn(q, k, v, *mask_tensors):
        given = dict(zip(names, mask_tensors))
        if is_causal:
            given.pop("attn_mask")
        return ours(q, k, v, is_causal=is_causal, **given)[0]

    def theirs_fn(q, k, v, *mask_tensors):
        return theirs(q, k, v, is_causal=is_causal, **dict(zip(names, mask_tensors)))[0]

    compare(ours_fn, theirs_fn, arrays, [masks[n] for n in names])
    # The attention weights, averaged over heads and per head.
    args = [md.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]
    extra = ({n: md.tensor(masks[n]) for n in names}, {n: torch.tensor(masks[n]) for n in names})
    if is_causal:
        extra[0].pop("attn_mask")
    for average in (True, False):
        _, ours_w = ours(*args[0], average_attn_weights=average, is_causal=is_causal, **extra[0])
        _, theirs_w = theirs(*args[1], average_attn_weights=average, is_causal=is_causal,
                             **extra[1])
        np.testing.assert_allclose(ours_w.numpy(), theirs_w.detach().numpy(), rtol=RTOL,
                                   atol=ATOL)
    assert ours(*args[0], need_weights=False, **extra[0])[1] is None


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_layers_match_pytorch(norm_first, activation):
    torch = pytest.importorskip("torch")
    options = dict(dim_feedforward=16, dropout=0.0, activation=activation,
                   norm_first=norm_first, batch_first=True)
    theirs = torch.nn.TransformerEncoderLayer(8, 2, **options)
    ours = nn.TransformerEncoderLayer(8, 2, **options)
    copy_weights(ours, theirs)
    padding = np.zeros((3, 5), np.bool_)
    padding[2, 4:] = True
    compare(lambda x, m: ours(x, src_key_padding_mask=m),
            lambda x, m: theirs(x, src_key_padding_mask=m), [normal(3, 5, 8)], [padding])
    theirs_dec = torch.nn.TransformerDecoderLayer(8, 2, **options)
    ours_dec = nn.TransformerDecoderLayer(8, 2, **options)
    copy_weights(ours_dec, theirs_dec)
    causal = np.triu(np.full((5, 5), -np.inf, np.float32), 1)
    compare(lambda x, mem, m: ours_dec(x, mem, tgt_mask=m),
            lambda x, mem, m: theirs_dec(x, mem, tgt_mask=m),
            [normal(3, 5, 8), normal(3, 7, 8)], [causal])
    assert [n for n, _ in ours_dec.named_parameters()] == \
        [n for n, _ in theirs_dec.named_parameters()]


def test_attention_gradients_match_finite_differences():
    mask = md.tensor(keep_mask(3, 4))
    check_gradients(lambda q, k, v: nn.functional.scaled_dot_product_attention(
        q, k, v, mask.to(dtype=np.bool_)), normal(2, 3, 2), normal(2, 4, 2), normal(2, 4, 3),
        rtol=1e-5, atol=1e-7)
    md.manual_seed(0)
    layer = nn.MultiheadAttention(4, 2, dtype=np.float64)
    check_gradients(lambda q, k: layer(q, k, k)[0], normal(3, 2, 4), normal(5, 2, 4),
                    rtol=1e-5, atol=1e-7)


def test_attention_dropout_draws_from_the_global_generator_and_is_off_in_eval():
    q, k, v = md.tensor(normal(2, 4, 3)), md.tensor(normal(2, 5, 3)), md.tensor(normal(2, 5, 3))
    md.manual_seed(7)
    first = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    md.manual_seed(7)
    again = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    plain = nn.functional.scaled_dot_product_attention(q, k, v).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, plain)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.5)
    x = md.tensor(normal(3, 2, 4))
    assert not np.allclose(layer(x).numpy(), layer(x).numpy())  # training: fresh masks
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), layer(x).numpy())


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_heads"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="activation"):
        nn.TransformerEncoderLayer(8, 2, activation=print)
    with pytest.raises(ValueError, match="not both"):
        q = md.tensor(normal(2, 3, 4))
        nn.functional.scaled_dot_product_attention(q, q, q, md.tensor(keep_mask(3, 3)),
                                                   is_causal=True)


def test_transformer_stacks_match_pytorch_and_copy_their_layer():
    torch = pytest.importorskip("torch")
    options = dict(dim_feedforward=16, dropout=0.0, batch_first=True)
    theirs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, **options), 2,
                                         norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    layer = nn.TransformerEncoderLayer(8, 2, **options)
    ours = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
    assert ours.layers[0] is not layer and ours.layers[0] is not ours.layers[1]
    copy_weights(ours, theirs)
    compare(lambda x: ours(x, is_causal=True), lambda x: theirs(
        x, mask=torch.nn.Transformer.generate_square_subsequent_mask(5), is_causal=True),
        [normal(3, 5, 8)])
    theirs_dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, **options), 2)
    ours_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, **options), 2)
    copy_weights(ours_dec, theirs_dec)
    compare(ours_dec, theirs_dec, [normal(3, 5, 8), normal(3, 4, 8)])
