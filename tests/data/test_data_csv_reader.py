"""CSVReader: streaming order, byte positions, shuffle buffer, exact resume, shards, errors."""

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minidl.data import CSVReader

from reader_checks import (assert_same_batches, check_resume_at, check_resume_inside_loop,
                           roundtrip, rows_of_rank, take)


def write_csv(path, n, header=True, newline="\n"):
    """Row i is ``i, i/2, -i, i % 7``: features identify the row, the label is an int."""
    lines = (["x0,x1,x2,label"] if header else []) + [f"{i},{i / 2},{-i},{i % 7}"
                                                      for i in range(n)]
    with open(path, "w", newline="") as f:
        f.write(newline.join(lines) + newline)
    return str(path)


def row_ids(batches):
    return np.concatenate([b[0][:, 0] for b in batches]).astype(int).tolist()


def test_file_order_dtypes_and_epochs(tmp_path):
    path = write_csv(tmp_path / "d.csv", 10)
    reader = CSVReader(path, batch_size=4)
    batches = list(reader)
    assert [len(b[1]) for b in batches] == [4, 4, 2]
    x, y = batches[0]
    assert x.dtype == np.float32 and x.shape == (4, 3) and y.dtype == np.int64
    np.testing.assert_array_equal(x[1], [1, 0.5, -1])
    assert y.tolist() == [0, 1, 2, 3]
    assert reader.epoch == 1
    assert row_ids(list(reader)) == list(range(10)) and reader.epoch == 2


def test_position_is_the_byte_offset_of_the_next_line(tmp_path):
    path = write_csv(tmp_path / "d.csv", 10)
    data = open(path, "rb").read()
    reader = CSVReader(path, batch_size=3)
    assert reader.position == data.index(b"\n") + 1
    reader.next_batch()
    assert reader.position == data.index(b"3,1.5,-3,3\n")


def test_restoring_seeks_instead_of_rereading(tmp_path):
    path = write_csv(tmp_path / "d.csv", 200)
    reader = CSVReader(path, batch_size=16, chunk_bytes=256)
    take(reader, 5)
    state = reader.state_dict()
    restored = CSVReader(path, batch_size=16, chunk_bytes=256)
    offsets = []
    real_seek = restored._cursor.file.seek

    class SpyFile:
        def __getattr__(self, name):
            return getattr(restored._cursor.file_real, name)

        def seek(self, offset, *args):
            offsets.append(offset)
            return real_seek(offset, *args)

    restored._cursor.file_real = restored._cursor.file
    restored._cursor.file = SpyFile()
    restored.load_state_dict(state)
    assert restored.next_batch()[1].tolist() == [i % 7 for i in range(80, 96)]
    assert offsets and min(offsets) == state["position"]


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 30), batch_size=st.integers(1, 7), shuffle_buffer=st.integers(0, 9),
       drop_last=st.booleans(), seed=st.integers(0, 1000), cut=st.integers(0, 12),
       chunk_bytes=st.sampled_from([8, 40, 1 << 20]), world_size=st.integers(1, 3),
       data=st.data())
def test_resume_anywhere_yields_the_same_batches(n, batch_size, shuffle_buffer, drop_last, seed,
                                                 cut, chunk_bytes, world_size, data):
    rank = data.draw(st.integers(0, world_size - 1))
    with tempfile.TemporaryDirectory() as tmp:
        path = write_csv(os.path.join(tmp, "d.csv"), n)
        expected = rows_of_rank(path, rank, world_size, data_offset=len("x0,x1,x2,label\n"))
        if not expected or (drop_last and len(expected) < batch_size):
            return  # no batch in an epoch: tested separately

        def make():
            return CSVReader(path, batch_size, shuffle_buffer=shuffle_buffer, seed=seed,
                             drop_last=drop_last, rank=rank, world_size=world_size,
                             chunk_bytes=chunk_bytes)

        check_resume_at(make, cut, horizon=6)
        check_resume_inside_loop(make, cut, horizon=4)
        # Each epoch hands out this worker's lines exactly once (all but a tail under drop_last).
        reader = make()
        for _ in range(2):
            ids = row_ids(list(reader))
            if drop_last:
                assert len(ids) == len(expected) - len(expected) % batch_size
                assert set(ids) <= set(expected)
            else:
                assert sorted(ids) == expected
            if not shuffle_buffer:
                assert ids == expected[:len(ids)]


def test_shuffle_buffer_shuffles_and_depends_on_seed_and_epoch(tmp_path):
    path = write_csv(tmp_path / "d.csv", 200)
    reader = CSVReader(path, 10, shuffle_buffer=50, seed=0)
    first, second = row_ids(list(reader)), row_ids(list(reader))
    assert sorted(first) == sorted(second) == list(range(200))
    assert first != list(range(200)) and first != second
    other = row_ids(list(CSVReader(path, 10, shuffle_buffer=50, seed=1)))
    assert other != first


def test_state_with_a_full_buffer_is_bounded_and_msgpack_able(tmp_path):
    path = write_csv(tmp_path / "d.csv", 500)
    reader = CSVReader(path, 8, shuffle_buffer=32, seed=3)
    take(reader, 10)
    state = reader.state_dict()
    assert state["kind"] == "CSVReader" and state["version"] == 1
    assert len(state["buffer_positions"]) == 32
    assert roundtrip(state) == state


@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_are_disjoint_and_cover_the_file(tmp_path, world_size):
    path = write_csv(tmp_path / "d.csv", 50)
    ids = [row_ids(list(CSVReader(path, 4, shuffle_buffer=5, rank=r, world_size=world_size)))
           for r in range(world_size)]
    together = sum(ids, [])
    assert sorted(together) == list(range(50))
    # Each rank streams one contiguous part of the file (a byte range), not every n-th line.
    assert all(sorted(p) == list(range(min(p), min(p) + len(p))) for p in ids if p)


def test_prefetch_matches_and_saves_what_was_handed_out(tmp_path):
    path = write_csv(tmp_path / "d.csv", 300)
    make = lambda prefetch: CSVReader(path, 16, shuffle_buffer=40, seed=2, prefetch=prefetch,
                                      chunk_bytes=512)
    reference = take(make(0), 40)
    reader = make(4)
    assert_same_batches(take(reader, 25), reference[:25])
    state = roundtrip(reader.state_dict())
    assert_same_batches(take(reader, 3), reference[25:28])
    restored = make(2)
    restored.load_state_dict(state)
    assert_same_batches(take(restored, 15), reference[25:])
    reader.close()
    restored.close()


def test_crlf_no_header_and_label_choices(tmp_path):
    path = write_csv(tmp_path / "d.csv", 5, header=False, newline="\r\n")
    x, y = CSVReader(path, 5, header=False).next_batch()
    assert y.tolist() == [0, 1, 2, 3, 4] and x.shape == (5, 3)
    x, y = CSVReader(path, 5, header=False, label_column=0).next_batch()
    assert y.tolist() == [0, 1, 2, 3, 4] and x[:, 2].tolist() == [0, 1, 2, 3, 4]
    (x,) = CSVReader(path, 5, header=False, label_column=None).next_batch()
    assert x.shape == (5, 4)
    semicolons = tmp_path / "s.csv"
    semicolons.write_text("a;b\n1.5;2\n")
    x, y = CSVReader(semicolons, 1, delimiter=";").next_batch()
    assert x.tolist() == [[1.5]] and y.tolist() == [2]


@pytest.mark.parametrize("bad, message", [("7,1,2", "expected 4 fields"),
                                          ("7,1,x,3", "not a number"),
                                          ("7,1,2,0.5", "not an integer")])
def test_malformed_line_names_file_and_line(tmp_path, bad, message):
    path = write_csv(tmp_path / "bad.csv", 100)
    lines = open(path).read().splitlines()
    lines[60] = bad  # line 61 of the file
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    reader = CSVReader(path, 8, chunk_bytes=128)
    with pytest.raises(ValueError, match=rf"bad\.csv, line 61: .*{message}"):
        for _ in range(20):
            reader.next_batch()


def test_state_from_a_different_file_is_refused(tmp_path):
    path = write_csv(tmp_path / "d.csv", 100)
    reader = CSVReader(path, 8)
    take(reader, 2)
    state = reader.state_dict()
    write_csv(tmp_path / "d.csv", 101)
    with pytest.raises(ValueError, match="different file"):
        CSVReader(path, 8).load_state_dict(state)


@pytest.mark.parametrize("field, value", [("batch_size", 9), ("seed", 1), ("shuffle_buffer", 4),
                                          ("label_column", 0), ("kind", "CTFReader"),
                                          ("world_size", 2), ("version", 0)])
def test_incompatible_state_names_the_field(tmp_path, field, value):
    reader = CSVReader(write_csv(tmp_path / "d.csv", 20), 8)
    with pytest.raises(ValueError, match=field):
        reader.load_state_dict({**reader.state_dict(), field: value})


def test_bad_arguments_name_the_argument(tmp_path):
    path = write_csv(tmp_path / "d.csv", 20)
    for kwargs, name in [({"batch_size": 0}, "batch_size"), ({"rank": 1}, "rank"),
                         ({"shuffle_buffer": -1}, "shuffle_buffer"),
                         ({"label_column": 4}, "label_column"), ({"delimiter": ",,"}, "delimiter")]:
        with pytest.raises(ValueError, match=name):
            CSVReader(path, **{"batch_size": 4, **kwargs})
    with pytest.raises(ValueError, match="no batch"):
        CSVReader(path, 50, drop_last=True).next_batch()


def test_a_rank_parses_only_its_own_byte_range(tmp_path):
    path = tmp_path / "d.csv"
    write_csv(path, 40)
    with open(path, "a") as f:
        f.write("not,a,number,row\n")  # in the last rank's part only
    first = CSVReader(str(path), 4, rank=0, world_size=2)
    # Rank 0 never reached the bad line: it parsed its own part only.
    assert row_ids(list(first)) == rows_of_rank(str(path), 0, 2, len("x0,x1,x2,label\n"))
    last = CSVReader(str(path), 4, rank=1, world_size=2)
    with pytest.raises(ValueError, match="line 42"):
        list(last)
