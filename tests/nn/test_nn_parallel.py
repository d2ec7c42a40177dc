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


def wrapped_and_plain():
    md.manual_seed(3)
    wrapped = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)))
    md.manual_seed(4)
    return wrapped, nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))


def test_a_plain_model_loads_a_wrapped_one_state_and_back():
    wrapped, plain = wrapped_and_plain()
    plain.load_state_dict(wrapped.state_dict())  # names "module.0.weight", ... fit "0.weight"
    for name, value in wrapped.module.state_dict().items():
        np.testing.assert_array_equal(plain.state_dict()[name], value)
    plain.state_dict()["0.bias"][...] = 7.0
    wrapped.load_state_dict(plain.state_dict())  # and a plain state fits the wrapper
    assert (wrapped.module[0].bias.numpy() == 7.0).all()


def test_only_a_prefix_on_every_name_is_taken_off():
    wrapped, plain = wrapped_and_plain()
    state = dict(wrapped.state_dict())
    state["0.weight"] = state.pop("module.0.weight")  # a mixture: not a wrapper's state
    before = plain.state_dict()["1.weight"].copy()
    with pytest.raises(md.nn.StateDictMismatchError, match="unexpected keys"):
        plain.load_state_dict(state)
    np.testing.assert_array_equal(plain.state_dict()["1.weight"], before)  # nothing loaded


def test_a_data_parallel_fit_checkpoint_rebuilds_the_plain_model(tmp_path):
    from minidl.cli import main
    from minidl.training.checkpoint_model import model_from_checkpoint
    wrapped, _ = wrapped_and_plain()
    x = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)
    md.fit(wrapped, nn.MSELoss(), md.optim.SGD(wrapped.parameters(), lr=0.1),
           (x, np.zeros((8, 2), np.float32)), batch_size=4, epochs=1, progress=False,
           checkpoint=str(tmp_path / "run"))
    path = md.latest_checkpoint(str(tmp_path / "run"))
    rebuilt = model_from_checkpoint(path)
    assert isinstance(rebuilt, nn.Sequential)
    np.testing.assert_array_equal(rebuilt(md.tensor(x)).numpy(), wrapped(md.tensor(x)).numpy())
    plain = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    plain.load_state_dict(md.load(path)["objects"]["model"])
    assert main(["export-onnx", path, str(tmp_path / "m.onnx"), "--input-shape", "1,3"]) == 0
    assert (tmp_path / "m.onnx").stat().st_size > 0
