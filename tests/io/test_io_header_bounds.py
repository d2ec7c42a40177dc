"""Decoding a header costs at most a fixed budget plus half the data section (a user-raisable
limit), and files with many entries stay cheap per entry."""

import tracemalloc

import msgpack
import numpy as np
import pytest

import minidl.io as mio
from io_file_crafting import craft, values_header
from minidl.io import header


def metadata_file(tmp_path, value, name="f.mdl"):
    path = tmp_path / name
    path.write_bytes(craft(values_header(value, [])))
    return path


def peak_while(function):
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def small_limit():
    """An 8 MiB decoding limit: the same arithmetic as the 16 MiB default, twice as fast."""
    previous = mio.set_header_memory_limit(8 << 20)
    yield 8 << 20
    mio.set_header_memory_limit(previous)


@pytest.mark.parametrize("shape", ["one array", "many arrays", "nested"])
def test_dense_empty_containers_are_refused_within_a_small_multiple(tmp_path, small_limit, shape):
    """One byte per empty map used to cost ~140 bytes of Python objects each, unbounded."""
    count = 1 << 16
    value = {"one array": [{}] * count,
             "many arrays": [[{}] * 512] * (count // 512),
             "nested": [[[[]]]] * (count // 3)}[shape]
    path = metadata_file(tmp_path, value)
    size = path.stat().st_size
    limit = header.decoding_budget(0)  # no tensors: the fixed part alone
    assert limit == small_limit and size > 0

    def load():
        with pytest.raises(mio.CorruptFileError, match="decodes to more than|longer than"):
            mio.load(path)
    assert peak_while(load) < 1.5 * limit


def test_the_limit_can_be_raised_for_trusted_files(tmp_path):
    path = metadata_file(tmp_path, [{}] * 20000)
    previous = mio.set_header_memory_limit(1 << 20)
    try:
        with pytest.raises(mio.CorruptFileError, match="set_header_memory_limit"):
            mio.load(path)
        mio.set_header_memory_limit(16 << 20)
        assert mio.load(path) == [{}] * 20000
    finally:
        mio.set_header_memory_limit(previous)
    assert mio.get_header_memory_limit() == previous
    with pytest.raises(ValueError):
        mio.set_header_memory_limit(0)


def test_the_writer_refuses_what_readers_would_refuse(tmp_path):
    with pytest.raises(ValueError, match="store large data as arrays"):
        mio.save({"maps": [{}] * 400_000}, tmp_path / "f.mdl")
    mio.save({"maps": [{}] * 1000, "ints": list(range(100_000))}, tmp_path / "ok.mdl")


def test_many_zero_size_tensors_round_trip(tmp_path):
    value = {f"t{i}": np.zeros((0, i % 3), np.float32) for i in range(5_000)}
    mio.save(value, tmp_path / "z.mdl")
    loaded = mio.load(tmp_path / "z.mdl")
    assert list(loaded) == list(value) and loaded["t2"].shape == (0, 2)
    assert mio.load(tmp_path / "z.mdl", mmap=True)["t4997"].shape == (0, 2)


def test_a_timestamp_is_still_refused(tmp_path):
    raw = msgpack.packb({"kind": "values", "metadata": {"value": msgpack.Timestamp(1, 0)},
                         "tensors": []}, use_bin_type=True)
    path = tmp_path / "t.mdl"
    path.write_bytes(craft(header_bytes=raw))
    with pytest.raises(mio.UnsafeFileError, match="Timestamp"):
        mio.load(path)
