"""CTFReader: streams in the declared order, exact resume with a shuffle buffer, errors."""

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minidl.data import CTFReader

from reader_checks import check_resume_at, check_resume_inside_loop, take

STREAMS = {"features": 3, "labels": (1, "int64")}


def write_ctf(path, n):
    """Line i: sample i with features (i, 2i, 3i) and label i % 5; some lines vary the layout."""
    lines = []
    for i in range(n):
        features, labels = f"|features {i} {2 * i} {3 * i}", f"|labels {i % 5}"
        if i % 3 == 1:
            lines.append(f"{i} {labels} |# note {features}")
        else:
            lines.append(f"{features}\t{labels}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def test_streams_come_out_in_declared_order_with_their_dtypes(tmp_path):
    path = write_ctf(tmp_path / "d.ctf", 7)
    reader = CTFReader(path, 4, streams=STREAMS)
    features, labels = reader.next_batch()
    assert features.dtype == np.float32 and features.shape == (4, 3)
    assert labels.dtype == np.int64 and labels.shape == (4, 1)
    np.testing.assert_array_equal(features[:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(features[:, 2], [0, 3, 6, 9])
    labels_first = CTFReader(path, 4, streams={"labels": 1, "features": 3}).next_batch()
    assert labels_first[0].shape == (4, 1) and labels_first[1].shape == (4, 3)
    assert [len(b[0]) for b in reader] == [3] and reader.epoch == 1


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 25), batch_size=st.integers(1, 6), shuffle_buffer=st.integers(0, 8),
       seed=st.integers(0, 100), cut=st.integers(0, 10), chunk_bytes=st.sampled_from([16, 1 << 20]),
       world_size=st.integers(1, 2), data=st.data())
def test_resume_anywhere_yields_the_same_batches(n, batch_size, shuffle_buffer, seed, cut,
                                                 chunk_bytes, world_size, data):
    rank = data.draw(st.integers(0, world_size - 1))
    if len(range(rank, n, world_size)) == 0:
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = write_ctf(os.path.join(tmp, "d.ctf"), n)

        def make():
            return CTFReader(path, batch_size, streams=STREAMS, shuffle_buffer=shuffle_buffer,
                             seed=seed, rank=rank, world_size=world_size, chunk_bytes=chunk_bytes)

        check_resume_at(make, cut, horizon=5)
        check_resume_inside_loop(make, cut, horizon=3)
        ids = np.concatenate([b[0][:, 0] for b in make()]).astype(int)
        assert sorted(ids.tolist()) == list(range(rank, n, world_size))


def test_prefetch_matches_plain_reading(tmp_path):
    path = write_ctf(tmp_path / "d.ctf", 60)
    plain = take(CTFReader(path, 7, streams=STREAMS, shuffle_buffer=10), 20)
    reader = CTFReader(path, 7, streams=STREAMS, shuffle_buffer=10, prefetch=3)
    for got, expected in zip(take(reader, 20), plain):
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
    reader.close()


@pytest.mark.parametrize("bad, message", [("|features 1 2 |labels 0", "declared number"),
                                          ("|features 1 2 3 |label 0", "not one of"),
                                          ("|features 1 2 3", "missing"),
                                          ("|features 1 2 3:1 |labels 0", "not a number")])
def test_malformed_line_names_file_and_line(tmp_path, bad, message):
    path = write_ctf(tmp_path / "bad.ctf", 30)
    lines = open(path).read().splitlines()
    lines[20] = bad
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    reader = CTFReader(path, 4, streams=STREAMS, chunk_bytes=64)
    with pytest.raises(ValueError, match=rf"bad\.ctf, line 21: .*{message}"):
        take(reader, 10)


def test_bad_streams_and_incompatible_state(tmp_path):
    path = write_ctf(tmp_path / "d.ctf", 10)
    for streams in [{}, {"features": 0}, {"a b": 1}, ["features"]]:
        with pytest.raises(ValueError, match="streams"):
            CTFReader(path, 2, streams=streams)
    reader = CTFReader(path, 2, streams=STREAMS)
    state = reader.state_dict()
    other = CTFReader(path, 2, streams={"features": 3, "labels": 1})
    with pytest.raises(ValueError, match="streams"):
        other.load_state_dict(state)
