"""A failed save never leaves a partial file at the final name, nor a temporary file."""

import errno
import os

import numpy as np
import pytest

import minidl.io as mio
from minidl.io import atomic


def old_file(tmp_path):
    path = tmp_path / "model.mdl"
    mio.save({"version": "old", "w": np.arange(4.0)}, path)
    return path, path.read_bytes()


def assert_untouched(tmp_path, path, before):
    assert path.read_bytes() == before
    assert mio.load(path)["version"] == "old"
    assert sorted(os.listdir(tmp_path)) == ["model.mdl"]  # no temporary left behind


def big_value():
    return {"version": "new", "w": np.ones(1 << 20, np.float32)}


def test_disk_full_while_writing(tmp_path, monkeypatch):
    path, before = old_file(tmp_path)
    from minidl.io import writer
    real = writer.write_atomically

    def failing_write_atomically(p, write_fn, **kw):
        def write_then_fail(file):
            class Full:
                written = 0

                def write(self, data):
                    Full.written += len(memoryview(data).cast("B"))
                    if Full.written > 100_000:
                        raise OSError(errno.ENOSPC, "No space left on device")
                    return file.write(data)
            write_fn(Full())
        return real(p, write_then_fail, **kw)

    monkeypatch.setattr(writer, "write_atomically", failing_write_atomically)
    with pytest.raises(OSError) as info:
        mio.save(big_value(), path)
    assert info.value.errno == errno.ENOSPC
    assert_untouched(tmp_path, path, before)


def test_fsync_failure(tmp_path, monkeypatch):
    path, before = old_file(tmp_path)
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError):
        mio.save(big_value(), path)
    assert_untouched(tmp_path, path, before)


def test_replace_failure(tmp_path, monkeypatch):
    path, before = old_file(tmp_path)

    def failing_replace(src, dst):
        raise OSError(errno.EXDEV, "cross-device link")
    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(OSError):
        mio.save(big_value(), path)
    assert_untouched(tmp_path, path, before)


def test_interrupt_in_the_middle_of_a_save(tmp_path, monkeypatch):
    path, before = old_file(tmp_path)
    from minidl.io import writer
    real = writer.c_order_pieces

    def interrupted(array):
        yield from real(array)
        raise KeyboardInterrupt
    monkeypatch.setattr(writer, "c_order_pieces", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mio.save(big_value(), path)
    assert_untouched(tmp_path, path, before)


def test_write_atomically_is_reusable(tmp_path):
    target = tmp_path / "plain.txt"
    atomic.write_atomically(target, lambda f: f.write(b"one"))
    atomic.write_atomically(target, lambda f: f.write(b"two"))
    assert target.read_bytes() == b"two"
    with pytest.raises(RuntimeError):
        atomic.write_atomically(target, lambda f: (f.write(b"three"), (_ for _ in ()).throw(RuntimeError()))[0])
    assert target.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["plain.txt"]


def test_directory_is_fsynced_after_rename(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(atomic, "fsync_directory", lambda d: synced.append(d))
    atomic.write_atomically(tmp_path / "x", lambda f: f.write(b"x"))
    assert synced == [str(tmp_path)]


def test_new_file_gets_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        atomic.write_atomically(tmp_path / "p", lambda f: f.write(b"x"))
    finally:
        os.umask(old)
    assert (os.stat(tmp_path / "p").st_mode & 0o777) == 0o644


def test_temporary_names_map_back_to_the_final_name(tmp_path):
    from minidl.io.atomic import final_name_of_temp, temp_path_for
    temp = os.path.basename(temp_path_for(str(tmp_path / "run-step00000010.mdl")))
    assert final_name_of_temp(temp) == "run-step00000010.mdl"
    assert final_name_of_temp("run-step00000010.mdl") is None
    assert final_name_of_temp(".notes.txt.tmp") is None
