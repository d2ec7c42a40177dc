"""CheckpointManager: schedules, names, retention with a fake clock, leftovers, corrupted
files, fresh runs beside old ones, non-writer ranks, and background saves."""

import os
import warnings

import numpy as np
import pytest

import minidl as md
from minidl.checkpoint import Checkpoint, CheckpointManager, StateMismatchError
from minidl.checkpoint import naming

from checkpoint_helpers import Counter, assert_bitwise_equal, build, snapshot, train


class FakeClock:
    """Seconds that move only when the test says so."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def on_disk(directory):
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


def steps_on_disk(directory, prefix="ckpt"):
    return [naming.parse_name(prefix, n).step for n in on_disk(directory)
            if naming.parse_name(prefix, n)]


def counter_manager(directory, **options):
    counter = Counter()
    options.setdefault("clock", FakeClock())
    return counter, CheckpointManager(Checkpoint(counter=counter), directory, **options)


# -- names ---------------------------------------------------------------------------------------

def test_names_carry_step_and_epoch():
    assert naming.file_name("cnn", 120) == "cnn-step00000120.mdl"
    assert naming.file_name("cnn", 120, epoch=3) == "cnn-epoch0003-step00000120.mdl"
    assert naming.parse_name("cnn", "cnn-epoch0003-step00000120.mdl") == \
        naming.CheckpointName("cnn", 120, 3)
    assert naming.parse_name("cnn", "cnn_2-step00000120.mdl") is None
    assert naming.parse_name("cnn", "cnn-step00000120.mdl.tmp") is None
    assert naming.is_leftover_temp("cnn", ".cnn-step00000120.mdl.0123456789ab.tmp")
    assert not naming.is_leftover_temp("cnn", ".other.mdl.0123456789ab.tmp")


def test_file_name_includes_the_readers_epoch(tmp_path):
    objects = build()
    manager = CheckpointManager(Checkpoint(**objects), tmp_path, prefix="cnn")
    train(objects, 12)  # 96 samples / batch 10 -> 10 batches an epoch
    path = manager.save(12)
    assert os.path.basename(path) == "cnn-epoch0002-step00000012.mdl"  # batch 2 of epoch 2
    _, plain = counter_manager(tmp_path / "plain", prefix="cnn")
    assert os.path.basename(plain.save(120)) == "cnn-step00000120.mdl"


@pytest.mark.parametrize("prefix", ["", ".hidden", "a/b"])
def test_bad_prefix_is_refused(tmp_path, prefix):
    with pytest.raises(ValueError, match="prefix"):
        counter_manager(tmp_path, prefix=prefix)


# -- when to save --------------------------------------------------------------------------------

def test_maybe_save_every_n_steps(tmp_path):
    _, manager = counter_manager(tmp_path, save_every_steps=3, max_to_keep=None)
    saved = [step for step in range(1, 11) if manager.maybe_save(step)]
    assert saved == [3, 6, 9]
    assert steps_on_disk(tmp_path) == [3, 6, 9]


def test_maybe_save_every_n_seconds(tmp_path):
    clock = FakeClock()
    _, manager = counter_manager(tmp_path, save_every_seconds=60, max_to_keep=None, clock=clock)
    saved = []
    for step in range(1, 11):
        clock.advance(25)
        if manager.maybe_save(step):
            saved.append(step)
    assert saved == [3, 6, 9]  # 75 s, 150 s, 225 s


def test_maybe_save_without_a_schedule_never_saves(tmp_path):
    _, manager = counter_manager(tmp_path)
    assert manager.maybe_save(100) is None and manager.checkpoints == []


# -- what to keep --------------------------------------------------------------------------------

def test_max_to_keep_keeps_the_newest(tmp_path):
    _, manager = counter_manager(tmp_path, max_to_keep=3)
    for step in range(1, 9):
        manager.save(step)
        assert len(on_disk(tmp_path)) <= 3
    assert steps_on_disk(tmp_path) == [6, 7, 8]
    assert manager.checkpoints == [str(tmp_path / f"ckpt-step0000000{s}.mdl") for s in (6, 7, 8)]
    assert manager.latest == manager.checkpoints[-1]


def test_max_to_keep_none_keeps_everything(tmp_path):
    _, manager = counter_manager(tmp_path, max_to_keep=None)
    for step in range(1, 12):
        manager.save(step)
    assert steps_on_disk(tmp_path) == list(range(1, 12))


def test_keep_every_n_minutes_keeps_one_per_interval_forever(tmp_path):
    clock = FakeClock(0.0)
    options = dict(max_to_keep=2, keep_every_n_minutes=10, clock=clock)
    _, manager = counter_manager(tmp_path, **options)
    for step in range(1, 11):  # saved at 0, 4, 8, ... 36 minutes
        manager.save(step)
        clock.advance(4 * 60)
    # Kept forever: 0 min (step 1), 12 (4), 24 (7), 36 (10); newest two: 9, 10.
    assert steps_on_disk(tmp_path) == [1, 4, 7, 9, 10]
    # A new manager (a restarted run) reaches the same decision from the files alone.
    _, again = counter_manager(tmp_path, **options)
    again.save(11)
    clock.advance(4 * 60)
    again.save(12)
    assert steps_on_disk(tmp_path) == [1, 4, 7, 10, 11, 12]


@pytest.mark.parametrize("mode, best", [("min", [3, 6]), ("max", [2, 5])])
def test_keep_best_by_a_metric(tmp_path, mode, best):
    counter, manager = counter_manager(tmp_path, max_to_keep=1, monitor="loss", mode=mode,
                                       keep_best=2)
    losses = {1: 0.9, 2: 1.5, 3: 0.2, 4: 0.8, 5: 2.0, 6: 0.1, 7: 0.7}
    for step, loss in losses.items():
        counter.count = step
        manager.save(step, metrics={"loss": loss})
        assert len(on_disk(tmp_path)) <= 3
    assert steps_on_disk(tmp_path) == sorted(best + [7])
    best_step = best[-1]  # 0.1 at step 6 for "min", 2.0 at step 5 for "max"
    assert manager.best == str(tmp_path / f"ckpt-step0000000{best_step}.mdl")
    counter.count = 0
    assert manager.restore_best() == best_step
    assert counter.count == best_step


def test_keep_best_needs_a_monitor(tmp_path):
    with pytest.raises(ValueError, match="monitor"):
        counter_manager(tmp_path, keep_best=2)


# -- leftovers, corrupted files ------------------------------------------------------------------

def test_leftovers_of_interrupted_saves_are_ignored_and_cleaned(tmp_path):
    _, manager = counter_manager(tmp_path)
    manager.save(5)
    leftover = tmp_path / ".ckpt-step00000010.mdl.0123456789ab.tmp"
    leftover.write_bytes(b"half a file")
    two_days_ago = leftover.stat().st_mtime - 2 * 24 * 3600
    os.utime(leftover, (two_days_ago, two_days_ago))  # no owner recorded: removed once stale
    foreign = tmp_path / ".notes.txt.0123456789ab.tmp"
    foreign.write_bytes(b"not ours")
    (tmp_path / "README").write_text("hello")
    counter, again = counter_manager(tmp_path)
    assert not leftover.exists() and foreign.exists()
    assert again.checkpoints == [str(tmp_path / "ckpt-step00000005.mdl")]
    assert again.restore_latest() == 5


def test_corrupted_newest_warns_and_falls_back(tmp_path):
    counter, manager = counter_manager(tmp_path, max_to_keep=None)
    for step in (1, 2, 3):
        counter.count = step * 10
        manager.save(step)
    newest = tmp_path / "ckpt-step00000003.mdl"
    newest.write_bytes(newest.read_bytes()[:-7])  # truncated
    middle = tmp_path / "ckpt-step00000002.mdl"
    data = bytearray(middle.read_bytes())
    data[-1] ^= 0xFF  # a damaged tensor byte
    middle.write_bytes(bytes(data))
    counter.count = -1
    fresh_counter, fresh = counter_manager(tmp_path)
    with pytest.warns(RuntimeWarning, match="skipping unusable checkpoint") as caught:
        assert fresh.restore_latest() == 1
    assert len(caught) == 2 and fresh_counter.count == 10


def test_no_sound_checkpoint_at_all_is_an_error(tmp_path):
    _, manager = counter_manager(tmp_path)
    manager.save(1)
    (tmp_path / "ckpt-step00000001.mdl").write_bytes(b"garbage")
    _, fresh = counter_manager(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(md.CheckpointError, match="none of the 1"):
            fresh.restore_latest()


def test_a_checkpoint_that_does_not_fit_is_skipped_and_reported(tmp_path):
    _, manager = counter_manager(tmp_path)
    manager.save(1)
    other = CheckpointManager(Checkpoint(model=build()["model"]), tmp_path)
    with pytest.warns(RuntimeWarning, match="ckpt-step00000001.mdl.*holds no state"):
        with pytest.raises(md.CheckpointError, match="none of the 1.*holds no state") as info:
            other.restore_latest()
    assert isinstance(info.value.__cause__, StateMismatchError)


def test_empty_or_missing_directory_restores_nothing(tmp_path):
    _, manager = counter_manager(tmp_path / "not-yet")
    assert manager.restore_latest() is None
    assert manager.latest is None and manager.best is None and manager.checkpoints == []


# -- runs, ranks ---------------------------------------------------------------------------------

def test_resume_false_never_overwrites_an_earlier_run(tmp_path):
    _, first = counter_manager(tmp_path, prefix="cnn")
    first.save(1)
    first.save(2)
    before = {n: (tmp_path / n).read_bytes() for n in on_disk(tmp_path)}
    counter, second = counter_manager(tmp_path, prefix="cnn", resume=False, max_to_keep=1)
    assert second.prefix == "cnn_2"
    assert second.restore_latest() is None
    for step in (1, 2, 3):
        second.save(step)
    assert {n: (tmp_path / n).read_bytes() for n in before} == before
    assert [n for n in on_disk(tmp_path) if n.startswith("cnn_2")] == ["cnn_2-step00000003.mdl"]
    _, third = counter_manager(tmp_path, prefix="cnn", resume=False)
    assert third.prefix == "cnn_3"


def test_resuming_continues_the_newest_run_not_the_first(tmp_path):
    _, first = counter_manager(tmp_path, prefix="cnn")
    first.save(5)
    counter, second = counter_manager(tmp_path, prefix="cnn", resume=False)
    counter.count = 7
    second.save(2)
    counter.count = 0
    _, resumed = counter_manager(tmp_path, prefix="cnn")
    assert resumed.prefix == "cnn_2"
    assert resumed.restore_latest() == 2
    assert resumed.checkpoint.objects["counter"].count == 7


def test_names_with_epoch_and_batch_are_unambiguous_and_parse_back(tmp_path):
    end_of_1 = naming.file_name("cnn", 40, epoch=1, batch=40)
    middle_of_2 = naming.file_name("cnn", 53, epoch=2, batch=13)
    assert end_of_1 == "cnn-epoch0001-batch00040-step00000040.mdl"
    assert middle_of_2 == "cnn-epoch0002-batch00013-step00000053.mdl"
    assert naming.parse_name("cnn", middle_of_2) == naming.CheckpointName("cnn", 53, 2, 13)
    assert naming.newest_run_prefix("cnn", ["cnn_2-" + middle_of_2[4:], end_of_1,
                                            "cnn_10-step00000001.mdl"]) == "cnn_10"
    _, manager = counter_manager(tmp_path, prefix="cnn")
    path = manager.save(53, epoch=2, batch=13)
    assert os.path.basename(path) == middle_of_2
    _, again = counter_manager(tmp_path, prefix="cnn")
    assert again.latest == path


def test_restore_latest_resets_the_save_schedule(tmp_path):
    _, manager = counter_manager(tmp_path, save_every_steps=3, max_to_keep=None)
    for step in range(1, 7):
        manager.maybe_save(step)
    _, again = counter_manager(tmp_path, save_every_steps=3, max_to_keep=None)
    assert again.restore_latest() == 6
    assert [s for s in range(7, 13) if again.maybe_save(s)] == [9, 12]


def test_non_writer_ranks_write_nothing(tmp_path):
    directory = tmp_path / "shared"
    _, worker = counter_manager(directory, is_writer=False, save_every_steps=1)
    assert worker.save(1) is None
    assert worker.maybe_save(2) is None
    assert not directory.exists()
    _, writer = counter_manager(directory, save_every_steps=1)
    writer.save(3)
    (directory / ".ckpt-step00000009.mdl.0123456789ab.tmp").write_bytes(b"x")
    counter, reader_rank = counter_manager(directory, is_writer=False)
    assert (directory / ".ckpt-step00000009.mdl.0123456789ab.tmp").exists()  # not its to clean
    assert reader_rank.restore_latest() == 3  # every rank resumes from what rank 0 wrote


# -- background saves ----------------------------------------------------------------------------

def test_async_save_snapshots_at_call_time(tmp_path):
    objects = build()
    train(objects, 3)
    manager = CheckpointManager(Checkpoint(**objects), tmp_path, async_save=True)
    path = manager.save(3)
    expected = snapshot(objects)
    train(objects, 4)  # keeps training while the file is written
    manager.wait()
    assert manager.latest == path and os.path.exists(path)
    fresh = build(seed=8)
    Checkpoint(**fresh).restore(path)
    assert_bitwise_equal(snapshot(fresh), expected)


def test_async_saves_keep_the_policy(tmp_path):
    counter, manager = counter_manager(tmp_path, async_save=True, max_to_keep=2,
                                       save_every_steps=1)
    for step in range(1, 20):
        counter.count = step
        manager.maybe_save(step)
    manager.wait()
    assert steps_on_disk(tmp_path) == [18, 19]
    assert manager.restore_latest() == 19


def test_async_error_surfaces_at_wait_and_next_call(tmp_path):
    directory = tmp_path / "gone"
    _, manager = counter_manager(directory, async_save=True)
    os.rmdir(directory)  # the background write will find no directory
    manager.save(1)
    with pytest.raises(FileNotFoundError):
        manager.wait()
    manager.wait()  # reported once
    manager.save(2)
    with pytest.raises(FileNotFoundError):
        manager.save(3)
    assert not directory.exists()


def test_manager_needs_a_checkpoint(tmp_path):
    with pytest.raises(TypeError, match="Checkpoint"):
        CheckpointManager(object(), tmp_path)


def test_api_spelling(tmp_path):
    objects = build()
    ckpt = md.Checkpoint(model=objects["model"], optimizer=objects["optimizer"],
                         scheduler=objects["scheduler"], reader=objects["reader"])
    manager = md.CheckpointManager(ckpt, str(tmp_path / "runs" / "digits"), prefix="cnn",
                                   max_to_keep=3, keep_every_n_minutes=None, save_every_steps=50,
                                   save_every_seconds=None, monitor=None, mode="min",
                                   keep_best=None, async_save=False)
    start = manager.restore_latest() or 0
    for step in range(start, 120):
        manager.maybe_save(step + 1, metrics={"loss": np.float32(0.5)})
    assert manager.save(120).endswith("-step00000120.mdl")
    manager.wait()
    assert len(manager.checkpoints) == 3 and manager.latest == manager.checkpoints[-1]
    assert manager.best is None


def test_names_with_digits_of_other_scripts_are_not_checkpoints(tmp_path):
    assert naming.parse_name("ckpt", "ckpt-step0000000\u0663.mdl") is None
    assert naming.parse_name("ckpt", "ckpt-epoch\u0661-step00000003.mdl") is None
    assert naming.run_prefixes("ckpt", ["ckpt_\u0662-step00000001.mdl"]) == set()
    (tmp_path / "ckpt-step0000000\u0663.mdl").write_bytes(b"not ours")
    _, manager = counter_manager(tmp_path)
    assert manager.checkpoints == []
