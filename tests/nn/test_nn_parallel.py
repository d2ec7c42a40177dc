"""DistributedDataParallel in a group of one: a transparent wrapper (the MPI tests are in
tests/distributed)."""

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.nn.parallel.distributed import _buckets


def test_a_wrapped_model_computes_and_trains_like_the_model():
    md.manual_seed(0)
    plain = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    wrapped = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)))
    wrapped.module.load_state_dict(plain.state_dict())
    x = md.tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    for model in (plain, wrapped):
        model(x).sum().backward()
    assert list(wrapped.state_dict()) == [f"module.{k}" for k in plain.state_dict()]
    for p, q in zip(plain.parameters(), wrapped.module.parameters()):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


def test_buckets_follow_reverse_registration_order_and_the_cap():
    model = nn.Sequential(nn.Linear(100, 100), nn.Linear(100, 10))  # 40000 + 400 + 4000 + 40 B
    params = list(reversed(list(model.parameters())))
    buckets = _buckets(params, cap_bytes=5000)
    assert [[p.shape for p in b.params] for b in buckets] == [[(10,), (10, 100), (100,)],
                                                              [(100, 100)]]
    assert len(_buckets(params, cap_bytes=0)) == 4  # unbucketed: one per parameter
    assert len(_buckets(params, cap_bytes=1 << 30)) == 1


def test_bad_arguments():
    with pytest.raises(TypeError, match="Module"):
        nn.parallel.DistributedDataParallel(object())
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        nn.parallel.DistributedDataParallel(nn.Linear(2, 2), bucket_cap_mb=-1)
