"""Sharded checkpoints and per-rank RNG states, exercised in one process (a group of one
writes a one-shard checkpoint through the same code a job of N ranks uses)."""

import os

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.checkpoint import Checkpoint, CheckpointManager, merge_checkpoint, sharded
from minidl.io import CheckpointError, CorruptFileError, read_file, write_file


def build():
    md.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = optim.ZeroRedundancyOptimizer(model.parameters(), optim.Adam, lr=0.1)
    x = md.tensor(np.ones((4, 3), np.float32))
    for _ in range(2):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    return model, opt


def save_sharded(directory, step, ckpt, opt):
    path = os.path.join(directory, f"run-step{step:08d}.mdl")
    shards = sharded.write_shards(path, step, {"optimizer": opt})
    staged = ckpt.stage(step, shards=shards, copy=False)
    return Checkpoint.write(path, staged)


def test_a_sharded_checkpoint_restores_and_merges_into_an_ordinary_one(tmp_path):
    model, opt = build()
    ckpt = Checkpoint(model=model, optimizer=opt)
    index = save_sharded(tmp_path, 2, ckpt, opt)
    assert read_file(index, kind="checkpoint")[0]["checkpoint_format"] == 2
    expected = opt.state_dict()
    fresh_model, fresh_opt = nn.Linear(3, 2), None
    fresh_opt = optim.ZeroRedundancyOptimizer(fresh_model.parameters(), optim.Adam, lr=0.5)
    Checkpoint(model=fresh_model, optimizer=fresh_opt).restore(index)
    got = fresh_opt.state_dict()
    assert got["param_groups"] == expected["param_groups"]
    np.testing.assert_array_equal(got["state"][0]["exp_avg"], expected["state"][0]["exp_avg"])
    merged = merge_checkpoint(index, tmp_path / "merged.mdl")
    header = read_file(merged, kind="checkpoint")[0]
    assert header["checkpoint_format"] == 1 and "shards" not in header
    plain_opt = optim.Adam(nn.Linear(3, 2).parameters(), lr=0.3)
    Checkpoint(model=nn.Linear(3, 2), optimizer=plain_opt).restore(merged)
    np.testing.assert_array_equal(plain_opt.state_dict()["state"][1]["exp_avg_sq"],
                                  expected["state"][1]["exp_avg_sq"])


def test_a_save_that_died_before_its_index_leaves_the_previous_checkpoint(tmp_path):
    model, opt = build()
    ckpt = Checkpoint(model=model, optimizer=opt)
    save_sharded(tmp_path, 2, ckpt, opt)
    # The next save wrote its shard (and a temporary one) but died before the index.
    sharded.write_shards(str(tmp_path / "run-step00000004.mdl"), 4, {"optimizer": opt})
    (tmp_path / ".run-step00000004.shard-00000-of-00001.mdl.0123456789ab.tmp").write_bytes(b"half")
    manager = CheckpointManager(ckpt, tmp_path, prefix="run")
    assert sorted(os.listdir(tmp_path)) == ["run-step00000002.mdl",
                                            "run-step00000002.shard-00000-of-00001.mdl"]
    assert manager.restore_latest() == 2


def test_a_missing_or_changed_shard_makes_restore_fall_back_to_an_older_checkpoint(tmp_path):
    model, opt = build()
    ckpt = Checkpoint(model=model, optimizer=opt)
    save_sharded(tmp_path, 2, ckpt, opt)
    save_sharded(tmp_path, 4, ckpt, opt)
    shard = tmp_path / "run-step00000004.shard-00000-of-00001.mdl"
    shard.write_bytes(shard.read_bytes()[:-1] + b"\0")
    with pytest.warns(RuntimeWarning, match="checksum"):
        assert CheckpointManager(ckpt, tmp_path, prefix="run").restore_latest() == 2
    os.remove(shard)
    with pytest.warns(RuntimeWarning, match="missing"):
        assert CheckpointManager(ckpt, tmp_path, prefix="run").restore_latest() == 2


@pytest.mark.parametrize("name", ["../run-step00000002.shard-00000-of-00001.mdl",
                                  "/etc/passwd", "run-step00000002.mdl"])
def test_an_index_cannot_point_outside_its_directory_or_at_non_shards(tmp_path, name):
    model, opt = build()
    index = save_sharded(tmp_path, 2, Checkpoint(model=model, optimizer=opt), opt)
    header, tensors = read_file(index, kind="checkpoint")
    header["shards"]["files"][0]["name"] = name
    write_file(index, header, tensors, kind="checkpoint")
    with pytest.raises(CorruptFileError, match="shards.files"):
        Checkpoint(model=model, optimizer=opt).restore(index)
    with pytest.raises(CheckpointError):
        merge_checkpoint(index, tmp_path / "out.mdl")


def test_each_rank_restores_its_own_rng_stream(tmp_path):
    md.manual_seed(1)
    ranks = [md.Generator(10 + r).get_state() for r in range(3)]
    model = nn.Linear(2, 2)
    ckpt = Checkpoint(model=model)
    Checkpoint.write(tmp_path / "c.mdl", ckpt.stage(5, rank_rng=ranks, copy=False))
    md.manual_seed(99)
    ckpt.restore(tmp_path / "c.mdl")  # this process is rank 0 of a group of one
    assert md.get_rng_state() == ranks[0]
