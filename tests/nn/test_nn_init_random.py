"""Initialisation statistics match PyTorch's defaults; the global generator makes them
reproducible, and its state round-trips as plain data."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.nn import init


def bound_and_spread(values, bound):
    """All values inside ±bound, and spread over it like a uniform (std ≈ bound/√3)."""
    assert np.abs(values).max() <= bound * (1 + 1e-6)
    assert abs(values.std() - bound / math.sqrt(3)) < 0.1 * bound


def test_linear_default_init_is_uniform_within_one_over_sqrt_fan_in():
    layer = nn.Linear(200, 300)
    bound_and_spread(layer.weight.numpy(), 1 / math.sqrt(200))
    bound_and_spread(layer.bias.numpy(), 1 / math.sqrt(200))


def test_conv2d_default_init_uses_the_grouped_fan_in():
    layer = nn.Conv2d(16, 32, kernel_size=3, groups=4)
    fan_in = 16 // 4 * 9
    bound_and_spread(layer.weight.numpy(), 1 / math.sqrt(fan_in))
    bound_and_spread(layer.bias.numpy(), 1 / math.sqrt(fan_in))


def test_norm_layers_start_as_identity_and_embedding_as_standard_normal():
    bn, ln = nn.BatchNorm2d(4), nn.LayerNorm(5)
    for layer in (bn, ln):
        np.testing.assert_array_equal(layer.weight.numpy(), 1)
        np.testing.assert_array_equal(layer.bias.numpy(), 0)
    np.testing.assert_array_equal(bn.running_mean.numpy(), 0)
    np.testing.assert_array_equal(bn.running_var.numpy(), 1)
    values = nn.Embedding(1000, 64).weight.numpy()
    assert abs(values.mean()) < 0.02 and abs(values.std() - 1) < 0.02


@pytest.mark.parametrize("scheme, expected_std", [
    ("kaiming_uniform_", math.sqrt(2.0) / math.sqrt(400)),
    ("kaiming_normal_", math.sqrt(2.0) / math.sqrt(400)),
    ("xavier_uniform_", math.sqrt(2.0 / (400 + 300))),
    ("xavier_normal_", math.sqrt(2.0 / (400 + 300))),
])
def test_fan_based_schemes_have_the_documented_variance(scheme, expected_std):
    weight = nn.Parameter(np.empty((300, 400), np.float32))
    kwargs = {"nonlinearity": "relu"} if scheme.startswith("kaiming") else {}
    getattr(init, scheme)(weight, **kwargs)
    assert abs(weight.numpy().std() - expected_std) < 0.03 * expected_std


def test_manual_seed_makes_initialisation_deterministic():
    def build():
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.Linear(4, 2), nn.Embedding(3, 2))

    md.manual_seed(123)
    first = {k: v.copy() for k, v in build().state_dict().items()}
    md.manual_seed(123)
    second = build().state_dict()
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    md.manual_seed(124)
    assert not np.array_equal(build().state_dict()["0.weight"], first["0.weight"])
    assert md.initial_seed() == 124


def test_a_layer_given_its_own_generator_leaves_the_global_one_alone():
    md.manual_seed(5)
    state = md.get_rng_state()
    a = nn.Linear(3, 3, generator=md.Generator(9)).weight.numpy()
    assert md.get_rng_state() == state
    np.testing.assert_array_equal(a, nn.Linear(3, 3, generator=md.Generator(9)).weight.numpy())


def test_rng_state_round_trip_continues_the_same_stream():
    md.manual_seed(7)
    md.rand(5)
    state = md.get_rng_state()
    after = [md.rand(3).numpy(), md.randn(2, 2).numpy(), nn.Dropout(0.5)(md.ones(8)).numpy()]
    md.manual_seed(999)
    md.rand(11)
    md.set_rng_state(state)
    again = [md.rand(3).numpy(), md.randn(2, 2).numpy(), nn.Dropout(0.5)(md.ones(8)).numpy()]
    for a, b in zip(after, again):
        np.testing.assert_array_equal(a, b)


def test_rng_state_is_plain_msgpack_data():
    msgpack = pytest.importorskip("msgpack")
    md.manual_seed(3)
    md.randn(3)
    state = md.get_rng_state()
    restored = msgpack.unpackb(msgpack.packb(state), raw=False)
    assert restored == state
    expected = md.rand(4).numpy()
    md.set_rng_state(restored)
    np.testing.assert_array_equal(md.rand(4).numpy(), expected)


def test_rng_state_survives_draws_that_end_inside_a_block():
    generator = md.Generator(1)
    generator.uniform(0, 1, (3,))  # 3 of a block's 4 words: the next draw starts a new block
    state = generator.get_state()
    assert state["counter"] == 1
    expected = [generator.normal(0, 1, (5,)), generator.uniform(-1, 1, (2, 3), np.float64)]
    other = md.Generator(2)
    other.set_state(state)
    again = [other.normal(0, 1, (5,)), other.uniform(-1, 1, (2, 3), np.float64)]
    for a, b in zip(expected, again):
        np.testing.assert_array_equal(a, b)


def test_the_counter_wraps_at_two_to_the_64():
    generator = md.Generator(5)
    generator.set_state({"kind": "minidl.Generator/Philox4x32-10", "seed": 5,
                         "counter": 2**64 - 1})
    generator.uniform(0, 1, (8,))  # blocks 2**64 - 1 and 0
    assert generator.get_state()["counter"] == 1
    np.testing.assert_array_equal(generator.uniform(0, 1, (4,)),
                                  md.Generator(5).uniform(0, 1, (8,))[4:])


def test_the_global_stream_is_philox_with_the_seed_as_key():
    # Block 0 of Philox4x32-10 with key 0 is Random123's published 6627e8d5 e169c58d ...
    md.manual_seed(0)
    np.testing.assert_array_equal(md.rand(2).numpy(),
                                  np.array([0x6627E8D5 >> 8, 0xE169C58D >> 8]) * 2.0**-24)


@pytest.mark.parametrize("bad", [None, {}, {"kind": "other"}, {"kind": "minidl.Generator/PCG64"},
                                 "state", {"kind": "minidl.Generator/Philox4x32-10", "seed": 1},
                                 {"kind": "minidl.Generator/Philox4x32-10", "seed": 1,
                                  "counter": 2**64},
                                 {"kind": "minidl.Generator/Philox4x32-10", "seed": -1,
                                  "counter": 0}])
def test_malformed_rng_state_is_rejected_and_leaves_the_generator_unchanged(bad):
    md.manual_seed(4)
    state = md.get_rng_state()
    with pytest.raises(ValueError, match="set_rng_state"):
        md.set_rng_state(bad)
    assert md.get_rng_state() == state


@pytest.mark.parametrize("seed", [-1, 1.5, "1", True, 2**64])
def test_manual_seed_rejects_non_integers(seed):
    with pytest.raises(ValueError, match="manual_seed"):
        md.manual_seed(seed)
