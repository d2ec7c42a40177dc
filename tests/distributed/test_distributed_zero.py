"""ZeroRedundancyOptimizer under mpiexec: sharded state, sharded checkpoints, merge, reshard."""

import os
import shutil

import numpy as np
import pytest

from minidl.io.state_tree import from_storable
from minidl.cli import main
from minidl.io import decode_value, read_file

from mpi_run import SCRIPT, requires_mpi, run

pytestmark = requires_mpi


def load(path):
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


def checkpoint_objects(path):
    header, tensors = read_file(str(path), kind="checkpoint")
    tree = decode_value(str(path), {"metadata": header["metadata"], "objects": header["objects"]},
                        tensors)
    return header, from_storable(tree["objects"])


def trained(state):
    return {k: v for k, v in state.items() if k.startswith(("model/", "optimizer/"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("zero")
    run(3, SCRIPT, str(base / "adam.npz"), "--dir", str(base / "adam"), "--stop-after", "6")
    run(3, SCRIPT, str(base / "zero.npz"), "--dir", str(base / "zero"), "--stop-after", "6",
        "--zero")
    run(3, SCRIPT, str(base / "zero-full.npz"), "--steps", "12", "--zero")
    return base


def test_zero_trains_exactly_like_the_unsharded_optimizer(runs):
    adam, zero = trained(load(runs / "adam.npz")), trained(load(runs / "zero.npz"))
    assert sorted(adam) == sorted(zero) and len(adam) == 16
    for name in adam:
        assert adam[name].tobytes() == zero[name].tobytes(), name


def test_each_rank_writes_a_shard_and_the_index_names_them_with_checksums(runs):
    names = sorted(os.listdir(runs / "zero"))
    index = "run-epoch0001-step00000006.mdl"
    assert index in names
    shards = [n for n in names if n.startswith("run-epoch0001-step00000006.shard-")]
    assert shards == [f"run-epoch0001-step00000006.shard-{r:05d}-of-00003.mdl" for r in range(3)]
    header, objects = checkpoint_objects(runs / "zero" / index)
    assert header["checkpoint_format"] == 2
    assert [f["name"] for f in header["shards"]["files"]] == shards
    assert all(len(f["sha256"]) == 64 for f in header["shards"]["files"])
    assert objects["optimizer"] == {"sharded_over": 3}  # the state lives in the shards only


def test_merged_shards_equal_the_unsharded_optimizer_state(runs, tmp_path, capsys):
    index = runs / "zero" / "run-epoch0001-step00000006.mdl"
    out = tmp_path / "merged.mdl"
    assert main(["merge", str(index), str(out)]) == 0, capsys.readouterr().err
    header, merged = checkpoint_objects(out)
    _, unsharded = checkpoint_objects(runs / "adam" / "run-epoch0001-step00000006.mdl")
    assert header["checkpoint_format"] == 1 and "shards" not in header
    assert merged["optimizer"]["param_groups"] == unsharded["optimizer"]["param_groups"]
    assert list(merged["optimizer"]["state"]) == list(unsharded["optimizer"]["state"]) == [0, 1, 2, 3]
    for index, slots in unsharded["optimizer"]["state"].items():
        for name, value in slots.items():
            got = merged["optimizer"]["state"][index][name]
            assert np.asarray(got).tobytes() == np.asarray(value).tobytes(), (index, name)


def test_a_corrupted_shard_is_refused_by_merge(runs, tmp_path, capsys):
    shutil.copytree(runs / "zero", tmp_path / "zero")
    shard = tmp_path / "zero" / "run-epoch0001-step00000006.shard-00001-of-00003.mdl"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    status = main(["merge", str(tmp_path / "zero" / "run-epoch0001-step00000006.mdl"),
                   str(tmp_path / "out.mdl")])
    assert status == 1 and "shard-00001-of-00003" in capsys.readouterr().err
    assert not (tmp_path / "out.mdl").exists()


def test_verify_checks_every_shard_of_an_index_and_names_each_bad_one(runs, tmp_path, capsys):
    shutil.copytree(runs / "zero", tmp_path / "zero")
    index = str(tmp_path / "zero" / "run-epoch0001-step00000006.mdl")
    assert main(["verify", index]) == 0
    assert capsys.readouterr().out.count(": OK") == 1 + 3  # the index and its three shards
    shard = tmp_path / "zero" / "run-epoch0001-step00000006.shard-{:05d}-of-00003.mdl"
    os.remove(str(shard).format(1))
    data = bytearray(open(str(shard).format(2), "rb").read())
    data[-1] ^= 1
    open(str(shard).format(2), "wb").write(bytes(data))
    assert main(["verify", index]) == 1
    err = capsys.readouterr().err
    assert "shard-00001-of-00003.mdl is missing" in err
    assert "shard run-epoch0001-step00000006.shard-00002-of-00003.mdl: " in err
    assert "shard-00000-of-00003.mdl:" not in err


@pytest.mark.parametrize("ranks", [2, 1])
def test_restoring_at_another_world_size_reshards(runs, tmp_path, ranks):
    shutil.copytree(runs / "zero", tmp_path / "zero")
    run(ranks, SCRIPT, str(tmp_path / "resumed.npz"), "--dir", str(tmp_path / "zero"),
        "--steps", "12", "--zero")
    resumed, full = trained(load(tmp_path / "resumed.npz")), trained(load(runs / "zero-full.npz"))
    assert sorted(resumed) == sorted(full)
    for name in full:
        np.testing.assert_allclose(resumed[name], full[name], rtol=0, atol=1e-6, err_msg=name)
