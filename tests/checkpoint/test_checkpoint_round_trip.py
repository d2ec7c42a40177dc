"""Checkpoint.save then restore into freshly built objects: every bit comes back."""

import numpy as np
import pytest

import minidl as md
from minidl.checkpoint import Checkpoint, RestoreInfo
from minidl.io import read_header

from checkpoint_helpers import assert_bitwise_equal, build, snapshot, train


def test_restore_into_fresh_objects_is_bitwise_and_training_continues_identically(tmp_path):
    original = build(seed=0)
    train(original, 7)
    path = tmp_path / "run.ckpt"
    Checkpoint(**original).save(path, step=7, metadata={"val_loss": 0.31, "note": "hi"})
    saved = snapshot(original)

    fresh = build(seed=1)  # different initial weights: everything must be overwritten
    md.manual_seed(99)
    info = Checkpoint(**fresh).restore(path)

    assert isinstance(info, RestoreInfo)
    assert info.step == 7 and info.metadata == {"val_loss": 0.31, "note": "hi"}
    assert info.restored == ("model", "optimizer", "scheduler", "reader", "counter")
    assert info.path == str(path)
    assert_bitwise_equal(snapshot(fresh), saved)
    assert fresh["counter"].tags == {7: "seven"}  # int keys come back as ints

    # The real promise: the two continue exactly alike (dropout masks, shuffles, Adam).
    # They share the one global RNG, so each continues from the restored RNG state.
    rng_at_restore = md.get_rng_state()
    train(original, 5)
    continued = snapshot(original)
    md.set_rng_state(rng_at_restore)
    train(fresh, 5)
    assert_bitwise_equal(snapshot(fresh), continued)


def test_next_random_draw_and_next_batch_match_after_restore(tmp_path):
    objects = build()
    train(objects, 3)
    Checkpoint(**objects).save(tmp_path / "c.mdl", step=3)
    expected_draw = md.rand(4).numpy()
    expected_batch = objects["reader"].next_batch()

    fresh = build(seed=5)
    md.rand(10)  # move the RNG: restore must put it back
    Checkpoint(**fresh).restore(tmp_path / "c.mdl")
    assert md.rand(4).numpy().tobytes() == expected_draw.tobytes()
    for got, want in zip(fresh["reader"].next_batch(), expected_batch):
        assert got.tobytes() == want.tobytes()


def test_api_spelling_from_the_top_level_package(tmp_path):
    objects = build()
    ckpt = md.Checkpoint(model=objects["model"], optimizer=objects["optimizer"],
                         scheduler=objects["scheduler"], reader=objects["reader"])
    ckpt.save(str(tmp_path / "run.ckpt"), step=120, metadata={"val_loss": 0.31})
    info = ckpt.restore(str(tmp_path / "run.ckpt"))
    assert info.step == 120 and info.metadata == {"val_loss": 0.31}

    manager = md.CheckpointManager(ckpt, tmp_path / "runs", save_every_steps=10)
    manager.maybe_save(130)
    manager.wait()
    assert md.latest_checkpoint(tmp_path / "runs") == manager.latest
    assert manager.restore_latest() == 130


def test_header_layout_is_as_documented(tmp_path):
    objects = build()
    Checkpoint(**objects).save(tmp_path / "c.mdl", step=11, metadata={"lr": 0.1})
    header = read_header(tmp_path / "c.mdl")
    assert header.kind == "checkpoint"
    meta = header.metadata
    assert meta["checkpoint_format"] == 1 and meta["step"] == 11
    assert list(meta["objects"]) == ["model", "optimizer", "scheduler", "reader", "counter"]
    assert meta["rng"]["kind"].startswith("minidl.Generator")
    assert meta["metadata"] == {"lr": 0.1}
    names = [entry.name for entry in header.entries]
    assert "objects/model/0.weight" in names  # arrays live in the checksummed tensor section


def test_metadata_may_hold_arrays_and_nested_values(tmp_path):
    objects = build()
    meta = {"curve": np.arange(5, dtype=np.float32), "nested": {"a": [1, 2.5, None, "x"]}}
    Checkpoint(**objects).save(tmp_path / "c.mdl", step=0, metadata=meta)
    info = Checkpoint(**build()).restore(tmp_path / "c.mdl")
    assert info.metadata["nested"] == {"a": [1, 2.5, None, "x"]}
    assert info.metadata["curve"].tobytes() == meta["curve"].tobytes()


def test_saved_snapshot_does_not_follow_later_training(tmp_path):
    objects = build()
    ckpt = Checkpoint(**objects)
    staged = ckpt.stage(step=1)
    before = snapshot(objects)
    train(objects, 3)  # mutates arrays in place after the snapshot was taken
    Checkpoint.write(tmp_path / "c.mdl", staged)
    fresh = build(seed=3)
    Checkpoint(**fresh).restore(tmp_path / "c.mdl")
    assert_bitwise_equal(snapshot(fresh), before)


def test_encrypted_checkpoint_needs_its_key(tmp_path):
    pytest.importorskip("cryptography")
    objects = build()
    train(objects, 2)
    key = bytes(range(32))
    Checkpoint(**objects).save(tmp_path / "c.mdl", step=2, key=key)
    saved = snapshot(objects)
    fresh = build(seed=4)
    with pytest.raises(md.CheckpointError, match="key"):
        Checkpoint(**fresh).restore(tmp_path / "c.mdl")
    Checkpoint(**fresh).restore(tmp_path / "c.mdl", key=key)
    assert_bitwise_equal(snapshot(fresh), saved)


def test_checkpoint_restores_into_a_model_loaded_from_a_model_file(tmp_path):
    objects = build()
    train(objects, 4)
    md.save_model(objects["model"], tmp_path / "net.mdl")
    Checkpoint(model=objects["model"]).save(tmp_path / "c.mdl", step=4)
    rebuilt = md.load_model(tmp_path / "net.mdl")
    Checkpoint(model=rebuilt).restore(tmp_path / "c.mdl")
    for (name, a), (_, b) in zip(objects["model"].state_dict().items(),
                                 rebuilt.state_dict().items()):
        assert a.tobytes() == b.tobytes(), name


def test_objects_without_the_protocol_are_refused():
    with pytest.raises(TypeError, match="state_dict"):
        Checkpoint(model=object())


@pytest.mark.parametrize("step", [-1, 1.5, True, "3"])
def test_bad_step_is_refused(tmp_path, step):
    with pytest.raises(ValueError, match="step"):
        Checkpoint(**build()).save(tmp_path / "c.mdl", step=step)
