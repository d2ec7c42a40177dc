"""Temporary files of atomic writes: they name their writer, only abandoned ones are removed
(by the next write of the same target), and file permissions survive a replacement."""

import os
import stat
import subprocess
import sys

import numpy as np
import pytest

import minidl.io as mio
from minidl.io import atomic

posix_only = pytest.mark.skipif(os.name != "posix", reason="pids and permission bits")


def temp_name(final, pid, start):
    return f".{final}.{atomic._host_tag()}-{pid}-{start}-0123abcd.tmp"


def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_temporary_name_says_who_writes_it(tmp_path):
    name = os.path.basename(atomic.temp_path_for(str(tmp_path / "w.mdl")))
    assert atomic.final_name_of_temp(name) == "w.mdl"
    assert f"-{os.getpid()}-" in name
    assert not atomic.temp_is_abandoned(str(tmp_path), name)  # this very process


@posix_only
def test_a_killed_save_is_cleaned_up_by_the_next_save_of_the_same_file(tmp_path):
    target = tmp_path / "w.mdl"
    pid = dead_pid()
    abandoned = [tmp_path / temp_name("w.mdl", pid, 12345 + i) for i in range(3)]
    for path in abandoned:
        path.write_bytes(b"half a file")
    other_target = tmp_path / temp_name("other.mdl", pid, 1)
    other_target.write_bytes(b"another file's leftover")
    mio.save({"w": np.ones(3)}, target)
    assert not any(path.exists() for path in abandoned)
    assert other_target.exists()  # cleaned when other.mdl is saved, not before
    assert sorted(os.listdir(tmp_path)) == sorted(["w.mdl", other_target.name])


@posix_only
def test_a_live_writers_temporary_file_is_never_removed(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = atomic.process_start_time(sleeper.pid)
        assert start is not None
        live = tmp_path / temp_name("w.mdl", sleeper.pid, start)
        live.write_bytes(b"being written")
        mio.save(1, tmp_path / "w.mdl")
        assert live.exists()
        if start:  # where start times are known, a reused pid is told apart
            reused = tmp_path / temp_name("w.mdl", sleeper.pid, start + 1)
            reused.write_bytes(b"left by an earlier process with the same pid")
            mio.save(2, tmp_path / "w.mdl")
            assert live.exists() and not reused.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    mio.save(3, tmp_path / "w.mdl")
    assert not live.exists()


def test_an_unidentified_temporary_file_is_removed_only_when_stale(tmp_path):
    old_style = tmp_path / ".w.mdl.0123456789ab.tmp"
    old_style.write_bytes(b"?")
    mio.save(1, tmp_path / "w.mdl")
    assert old_style.exists()
    day_and_a_bit = old_style.stat().st_mtime - atomic.UNOWNED_TEMP_LIFETIME - 60
    os.utime(old_style, (day_and_a_bit, day_and_a_bit))
    mio.save(2, tmp_path / "w.mdl")
    assert not old_style.exists()


@posix_only
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604])
def test_overwriting_keeps_the_permission_bits(tmp_path, mode):
    path = tmp_path / "w.mdl"
    mio.save(1, path)
    os.chmod(path, mode)
    mio.save(2, path)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert mio.load(path) == 2


@posix_only
def test_new_encrypted_files_are_private_and_plain_ones_follow_the_umask(tmp_path):
    pytest.importorskip("cryptography")
    previous = os.umask(0o022)
    try:
        mio.save(1, tmp_path / "secret.mdl", key=bytes(16))
        mio.save(1, tmp_path / "plain.mdl")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "secret.mdl").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "plain.mdl").stat().st_mode) == 0o644


@posix_only
def test_saves_killed_with_sigkill_leave_nothing_after_the_next_save(tmp_path):
    """Plain saves to a fixed name used to leave one temporary file per kill, forever."""
    import signal
    import time

    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    saver = ("import sys, numpy as np, minidl as md\n"
             "value = {'w': np.ones(8_000_000, np.float32)}\n"
             "while True:\n    md.save(value, sys.argv[1])\n")
    environment = dict(os.environ, PYTHONPATH=project)
    target = tmp_path / "w.mdl"
    # A child's first completed save already removes the temporary files of earlier killed
    # children, so kill until the last kill is known to have landed inside a save.
    for attempt in range(20):
        child = subprocess.Popen([sys.executable, "-c", saver, str(target)], env=environment)
        start = time.monotonic()
        while time.monotonic() - start < 60:  # wait until this child is inside a save
            if any(f"-{child.pid}-" in name for name in os.listdir(tmp_path)):
                break
            time.sleep(0.005)
        time.sleep(0.01 * (attempt % 3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        if any(f"-{child.pid}-" in name for name in os.listdir(tmp_path)):
            break
    killed_mid_save = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert killed_mid_save  # the kills did leave temporary files behind
    mio.save({"w": np.zeros(3, np.float32)}, tmp_path / "w.mdl")
    assert os.listdir(tmp_path) == ["w.mdl"]
    np.testing.assert_array_equal(mio.load(tmp_path / "w.mdl")["w"], np.zeros(3))
