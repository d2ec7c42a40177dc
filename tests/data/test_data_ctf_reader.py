"""CTFReader: streams in the declared order, exact resume with a shuffle buffer, errors."""

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minidl.data import CTFReader

from reader_checks import check_resume_at, check_resume_inside_loop, rows_of_rank, take

STREAMS = {"features": 3, "labels": (1, "int64")}
SPARSE_STREAMS = {**STREAMS, "words": {"dim": 7, "sparse": True}}


def sparse_words(i):
    """The ``words`` entries of line i: none on every 4th line, else two index:value pairs."""
    return {} if i % 4 == 0 else {i % 7: float(i), (i + 3) % 7: 1.0}


def write_ctf(path, n, sparse=False):
    """Line i: sample i with features (i, 2i, 3i) and label i % 5; some lines vary the layout.

    With ``sparse``, each line also has a sparse ``words`` stream (see ``sparse_words``).
    """
    lines = []
    for i in range(n):
        features, labels = f"|features {i} {2 * i} {3 * i}", f"|labels {i % 5}"
        if sparse:
            entries = " ".join(f"{k}:{v:g}" for k, v in sparse_words(i).items())
            labels += f" |words {entries}"
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


def test_sparse_streams_come_out_dense(tmp_path):
    path = write_ctf(tmp_path / "d.ctf", 9, sparse=True)
    streams = {**SPARSE_STREAMS, "words": {"dim": 7, "sparse": True, "dtype": "float64"}}
    features, labels, words = CTFReader(path, 9, streams=streams).next_batch()
    assert words.dtype == np.float64 and words.shape == (9, 7)
    expected = np.zeros((9, 7))
    for i in range(9):
        for k, v in sparse_words(i).items():
            expected[i, k] = v
    np.testing.assert_array_equal(words, expected)
    np.testing.assert_array_equal(labels[:, 0], np.arange(9) % 5)
    # The default dtype of a sparse stream is float32, as for a dense one.
    assert CTFReader(path, 2, streams=SPARSE_STREAMS).next_batch()[2].dtype == np.float32


def test_one_hot_labels(tmp_path):
    path = tmp_path / "mnist_like.ctf"
    path.write_text("|features 0 0.5 1 |labels 3:1\n|labels 0:1 |features 1 1 1\n")
    features, labels = CTFReader(path, 2, streams={
        "features": 3, "labels": {"dim": 10, "sparse": True}}).next_batch()
    np.testing.assert_array_equal(labels.argmax(axis=1), [3, 0])
    assert labels.sum() == 2 and features.shape == (2, 3)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 25), batch_size=st.integers(1, 6), shuffle_buffer=st.integers(0, 8),
       seed=st.integers(0, 100), cut=st.integers(0, 10), chunk_bytes=st.sampled_from([16, 1 << 20]),
       world_size=st.integers(1, 2), sparse=st.booleans(), data=st.data())
def test_resume_anywhere_yields_the_same_batches(n, batch_size, shuffle_buffer, seed, cut,
                                                 chunk_bytes, world_size, sparse, data):
    rank = data.draw(st.integers(0, world_size - 1))
    streams = SPARSE_STREAMS if sparse else STREAMS
    with tempfile.TemporaryDirectory() as tmp:
        path = write_ctf(os.path.join(tmp, "d.ctf"), n, sparse)
        expected = rows_of_rank(path, rank, world_size)
        if not expected:
            return

        def make():
            return CTFReader(path, batch_size, streams=streams, shuffle_buffer=shuffle_buffer,
                             seed=seed, rank=rank, world_size=world_size, chunk_bytes=chunk_bytes)

        check_resume_at(make, cut, horizon=5)
        check_resume_inside_loop(make, cut, horizon=3)
        batches = list(make())
        ids = np.concatenate([b[0][:, 0] for b in batches]).astype(int)
        assert sorted(ids.tolist()) == expected
        if sparse:  # each sparse row is still the one of its line after shuffling and resuming
            for features, _, words in batches:
                for row, i in zip(words, features[:, 0].astype(int)):
                    expected = np.zeros(7, dtype=np.float32)
                    expected[list(sparse_words(i))] = list(sparse_words(i).values())
                    np.testing.assert_array_equal(row, expected)


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
                                          ("|features 1 2 3:1 |labels 0", "dense stream"),
                                          ("|features 1 2 x |labels 0", "not a number")])
def test_malformed_line_names_file_and_line(tmp_path, bad, message):
    path = write_ctf(tmp_path / "bad.ctf", 30)
    lines = open(path).read().splitlines()
    lines[20] = bad
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    reader = CTFReader(path, 4, streams=STREAMS, chunk_bytes=64)
    with pytest.raises(ValueError, match=rf"bad\.ctf, line 21: .*{message}"):
        take(reader, 10)


@pytest.mark.parametrize("words, message", [
    ("7:1", r"not an integer from 0 to dimension - 1 .*'words': 7"),
    ("-1:1", "not an integer from 0"), ("1", r"not index:value \(sparse streams: \['words'\]"),
    ("1:1 2", "not index:value"), ("1:x", "not a number"), ("2:1 2:3", "appears twice"),
])
def test_malformed_sparse_entry_names_file_and_line(tmp_path, words, message):
    path = write_ctf(tmp_path / "bad.ctf", 30, sparse=True)
    lines = open(path).read().splitlines()
    lines[20] = f"|features 1 2 3 |labels 0 |words {words}"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    reader = CTFReader(path, 4, streams=SPARSE_STREAMS, chunk_bytes=64)
    with pytest.raises(ValueError, match=rf"bad\.ctf, line 21: .*{message}"):
        take(reader, 10)


def test_index_value_in_a_stream_declared_dense_says_how_to_declare_it_sparse(tmp_path):
    path = tmp_path / "labels.ctf"
    path.write_text("|features 0 1 0 |labels 1\n|features 1 1 0 |labels 3:1\n")
    reader = CTFReader(path, 2, streams={"features": 3, "labels": 1})
    with pytest.raises(ValueError, match=r"labels\.ctf, line 2: .*dense stream.*'sparse': True"):
        reader.next_batch()


def test_bad_streams_and_incompatible_state(tmp_path):
    path = write_ctf(tmp_path / "d.ctf", 10)
    for streams in [{}, {"features": 0}, {"a b": 1}, ["features"], {"f": (3, "float32", True)},
                    {"f": {"sparse": True}}, {"f": {"dim": 3, "spares": True}},
                    {"f": {"dim": 3, "sparse": "yes"}}, {"f": {"dim": 0, "sparse": True}}]:
        with pytest.raises(ValueError, match="streams"):
            CTFReader(path, 2, streams=streams)
    reader = CTFReader(path, 2, streams=STREAMS)
    state = reader.state_dict()
    other = CTFReader(path, 2, streams={"features": 3, "labels": 1})
    with pytest.raises(ValueError, match="streams"):
        other.load_state_dict(state)


def test_a_stream_declared_sparse_is_part_of_the_state(tmp_path):
    path = tmp_path / "d.ctf"
    path.write_text("|features 1 2 |labels 1\n")
    dense = CTFReader(path, 1, streams={"features": 2, "labels": 2})
    sparse = CTFReader(path, 1, streams={"features": 2, "labels": {"dim": 2, "sparse": True}})
    # Dense entries keep the layout states had before sparse streams, so old states still load.
    assert dense.state_dict()["streams"] == [["features", 2, "float32"], ["labels", 2, "float32"]]
    with pytest.raises(ValueError, match="streams"):
        sparse.load_state_dict(dense.state_dict())
