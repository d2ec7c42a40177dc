"""Sharded checkpoints and per-rank RNG states, exercised in one process (a group of one
writes a one-shard checkpoint through the same code a job of N ranks uses)."""

import hashlib
import os
import warnings

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


def edit_index(index, change) -> None:
    header, tensors = read_file(index, kind="checkpoint")
    change(header)
    write_file(index, header, tensors, kind="checkpoint")


@pytest.mark.parametrize("name", ["../run-step00000002.shard-00000-of-00001.mdl",
                                  "/etc/passwd", "run-step00000002.mdl",
                                  "unrelated.shard-00000-of-00001.mdl",
                                  "run-step00000002.shard-00000-of-00001.mdl\n",
                                  "run\x1b[2J-step00000002.shard-00000-of-00001.mdl",
                                  "run-step00000002.shard-00001-of-00001.mdl",
                                  "run-step00000002.shard-\u0660\u0660\u0660\u0660\u0660-of-00001.mdl",
                                  "run-step00000002.shard-00000-of-00001.mdl\0"])
def test_an_index_cannot_point_outside_its_directory_or_at_non_shards(tmp_path, name):
    model, opt = build()
    index = save_sharded(tmp_path, 2, Checkpoint(model=model, optimizer=opt), opt)
    if "\0" not in name and "/" not in name and not (tmp_path / name).exists():
        # The named file exists, with the shard's bytes: only its name is wrong.
        (tmp_path / name).write_bytes(
            (tmp_path / "run-step00000002.shard-00000-of-00001.mdl").read_bytes())
    edit_index(index, lambda header: header["shards"]["files"][0].update(name=name))
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


def stuck(call):
    """The exception ``call`` raised; fails the test if it blocks reading a shard."""
    from minidl.testing.deadline import outcome_within

    return outcome_within(call)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and /dev/zero")
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_shard_that_is_a_fifo_or_a_device_is_refused_without_blocking(tmp_path, kind):
    model, opt = build()
    ckpt = Checkpoint(model=model, optimizer=opt)
    save_sharded(tmp_path, 2, ckpt, opt)
    index = save_sharded(tmp_path, 4, ckpt, opt)
    shard = tmp_path / "run-step00000004.shard-00000-of-00001.mdl"
    shard.unlink()
    os.mkfifo(shard) if kind == "fifo" else os.symlink(kind, shard)
    empty = {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    edit_index(index, lambda header: header["shards"]["files"][0].update(empty))
    try:
        error = stuck(lambda: ckpt.restore(index))
        assert isinstance(error, CheckpointError) and "not a regular file" in str(error)
        error = stuck(lambda: merge_checkpoint(index, tmp_path / "out.mdl"))
        assert isinstance(error, CheckpointError) and "not a regular file" in str(error)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            manager = CheckpointManager(ckpt, tmp_path, prefix="run")
            assert stuck(lambda: manager.restore_latest()) is None
        assert manager.last_restored.step == 2
        assert any("not a regular file" in str(w.message) for w in caught)
    finally:
        if kind == "fifo":  # let a blocked reader go, if there is one
            try:
                os.close(os.open(shard, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass


@pytest.mark.parametrize("objects", [[["optimizer"]], [7], ["optimizer", "optimizer"], "opt"])
def test_an_index_with_malformed_shard_objects_is_refused_as_corrupt(tmp_path, objects):
    model, opt = build()
    ckpt = Checkpoint(model=model, optimizer=opt)
    index = save_sharded(tmp_path, 2, ckpt, opt)
    edit_index(index, lambda header: header["shards"].update(objects=objects))
    with pytest.raises(CorruptFileError, match="shards"):
        merge_checkpoint(index, tmp_path / "out.mdl")
    with pytest.raises(CorruptFileError, match="shards"):
        ckpt.restore(index)


def test_merge_and_restore_latest_show_names_with_terminal_escapes_escaped(tmp_path, capsys):
    from minidl.cli import main

    model, opt = build()
    ckpt = Checkpoint(model=model, optimizer=opt)
    prefix = "r\x1b]0;owned\x07"
    index = save_sharded(tmp_path, 2, ckpt, opt).replace("run-", prefix + "-")
    os.rename(tmp_path / "run-step00000002.mdl", index)
    # Its shard is named after the index's first name: not a shard of this index any more.
    assert main(["merge", index, str(tmp_path / "out.mdl")]) == 1
    err = capsys.readouterr().err
    assert "r\\x1b]0;owned\\x07" in err and "\x1b" not in err and "\x07" not in err
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError):
            CheckpointManager(ckpt, tmp_path, prefix=prefix).restore_latest()
    assert caught and all("\x1b" not in str(w.message) for w in caught)


def test_verify_of_an_index_checks_its_shards_and_names_each(tmp_path, capsys):
    from minidl.cli import main

    model, opt = build()
    index = save_sharded(tmp_path, 2, Checkpoint(model=model, optimizer=opt), opt)
    shard = tmp_path / "run-step00000002.shard-00000-of-00001.mdl"
    assert main(["verify", index]) == 0
    assert "shard run-step00000002.shard-00000-of-00001.mdl: OK" in capsys.readouterr().out
    shard.write_bytes(shard.read_bytes()[:-1] + b"\1")
    assert main(["verify", index]) == 1
    captured = capsys.readouterr()
    assert "shard run-step00000002.shard-00000-of-00001.mdl: " in captured.err
    assert "checksum" in captured.err and "OK" not in captured.out
    shard.unlink()
    assert main(["verify", "-q", index]) == 1
    assert "shard-00000-of-00001.mdl is missing" in capsys.readouterr().err


def test_orphan_shards_of_a_failed_save_go_with_the_next_successful_save(tmp_path):
    model, opt = build()
    ckpt = Checkpoint(model=model, optimizer=opt)
    manager = CheckpointManager(ckpt, tmp_path, prefix="run", max_to_keep=1)
    manager.save(1)  # deleted by retention when step 6 commits: the orphans must go all the same
    # Saves at steps 2 and 4 died after their shards, before their index: no index names them.
    for step in (2, 4):
        sharded.write_shards(str(tmp_path / f"run-step{step:08d}.mdl"), step, {"optimizer": opt})
    (tmp_path / ".run-step00000002.shard-00000-of-00001.mdl.0123456789ab.tmp").write_bytes(b"x")
    # A save of a later step may be writing its shards while this one commits: they stay.
    sharded.write_shards(str(tmp_path / "run-step00000009.mdl"), 9, {"optimizer": opt})
    manager.save(6)
    assert sorted(os.listdir(tmp_path)) == ["run-step00000006.mdl",
                                            "run-step00000009.shard-00000-of-00001.mdl"]
