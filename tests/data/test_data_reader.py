"""DataReader / ArrayDataset / NpyDataset: epochs, shuffling, sharding, exact resume, prefetch."""

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minidl.data import ArrayDataset, DataReader, NpyDataset
from minidl.data.sampling import epoch_order

from reader_checks import (assert_same_batches, check_resume_at, check_resume_inside_loop, roundtrip,
                      take)


def make_dataset(n):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n, dtype=np.int64)
    return ArrayDataset(x, y)


def test_unshuffled_epoch_is_file_order_and_last_batch_is_short():
    reader = DataReader(make_dataset(7), batch_size=3)
    batches = list(reader)
    assert [b[1].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    assert batches[0][0].dtype == np.float32 and batches[0][1].dtype == np.int64
    assert reader.epoch == 1 and reader.position == 0
    assert len(reader) == 3


def test_drop_last_skips_the_incomplete_batch():
    reader = DataReader(make_dataset(7), batch_size=3, drop_last=True)
    assert [b[1].tolist() for b in reader] == [[0, 1, 2], [3, 4, 5]]
    assert reader.epoch == 1


def test_shuffled_epochs_are_permutations_that_differ_and_depend_on_seed():
    n = 50
    reader = DataReader(make_dataset(n), batch_size=8, shuffle=True, seed=3)
    epochs = [np.concatenate([b[1] for b in reader]) for _ in range(3)]
    for order in epochs:
        assert sorted(order.tolist()) == list(range(n))
    assert not np.array_equal(epochs[0], epochs[1])
    other = DataReader(make_dataset(n), batch_size=8, shuffle=True, seed=4)
    assert not np.array_equal(np.concatenate([b[1] for b in other]), epochs[0])
    np.testing.assert_array_equal(epochs[2], epoch_order(n, 3, 2, True))


def test_next_batch_rolls_over_epochs_and_tracks_position():
    reader = DataReader(make_dataset(5), batch_size=2)
    seen = [(reader.next_batch()[1].tolist(), reader.epoch, reader.position) for _ in range(4)]
    assert seen == [([0, 1], 0, 2), ([2, 3], 0, 4), ([4], 1, 0), ([0, 1], 1, 2)]


def test_for_loop_after_break_continues_the_same_epoch():
    reader = DataReader(make_dataset(10), batch_size=2)
    for batch in reader:
        break
    rest = [b[1][0] for b in reader]
    assert rest == [2, 4, 6, 8] and reader.epoch == 1


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 40), batch_size=st.integers(1, 12), shuffle=st.booleans(),
       drop_last=st.booleans(), seed=st.integers(0, 2**32), cut=st.integers(0, 25),
       world_size=st.integers(1, 3), data=st.data())
def test_resume_anywhere_yields_the_same_batches(n, batch_size, shuffle, drop_last, seed, cut,
                                                 world_size, data):
    rank = data.draw(st.integers(0, world_size - 1))
    if drop_last and n < batch_size * world_size:
        return  # no batch in an epoch: a construction error, tested separately

    def make():
        return DataReader(make_dataset(n), batch_size, shuffle=shuffle, seed=seed,
                          drop_last=drop_last, rank=rank, world_size=world_size)

    check_resume_at(make, cut, horizon=8)
    check_resume_inside_loop(make, cut, horizon=5)


def test_state_is_small_plain_and_msgpack_able():
    reader = DataReader(make_dataset(100_000), batch_size=32, shuffle=True)
    take(reader, 3)
    state = reader.state_dict()
    assert state["kind"] == "DataReader" and state["version"] == 1
    assert len(msgpack.packb(state)) < 300
    assert roundtrip(state) == state


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_are_disjoint_and_cover_each_epoch(world_size, shuffle):
    n = 23
    for epoch in range(2):
        seen = []
        for rank in range(world_size):
            reader = DataReader(make_dataset(n), 4, shuffle=shuffle, seed=5, rank=rank,
                                world_size=world_size)
            reader.load_state_dict({**reader.state_dict(), "epoch": epoch})
            seen.append(np.concatenate([b[1] for b in reader]))
        together = np.concatenate(seen)
        assert len(together) == n and sorted(together.tolist()) == list(range(n))


@pytest.mark.parametrize("depth", [1, 3])
def test_prefetch_yields_the_same_batches_and_saves_what_was_handed_out(depth):
    make = lambda prefetch: DataReader(make_dataset(37), 5, shuffle=True, seed=1,
                                       prefetch=prefetch)
    reference = take(make(0), 30)
    reader = make(depth)
    assert_same_batches(take(reader, 12), reference[:12])
    state = reader.state_dict()
    assert (state["epoch"], state["position"]) == (1, 20)  # 8 batches per epoch: 12 = 8 + 4
    assert_same_batches(take(reader, 5), reference[12:17])
    restored = make(depth)
    restored.load_state_dict(roundtrip(state))
    assert_same_batches(take(restored, 18), reference[12:])
    reader.load_state_dict(state)  # stops the thread, rewinds to what was handed out
    assert_same_batches(take(reader, 18), reference[12:])
    reader.close()
    restored.close()


def test_prefetch_for_loop_ends_at_the_epoch_boundary():
    reader = DataReader(make_dataset(10), 3, prefetch=2)
    assert [b[1].tolist() for b in reader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert reader.epoch == 1 and reader.position == 0
    reader.close()


def test_prefetch_reraises_dataset_errors():
    class Broken:
        def __len__(self):
            return 10

        def __getitem__(self, index):
            raise KeyError("broken storage")

    reader = DataReader(Broken(), 2, prefetch=2)
    with pytest.raises(KeyError, match="broken storage"):
        reader.next_batch()
    reader.close()


def test_any_dataset_with_len_and_fancy_indexing_works():
    class Squares:
        def __len__(self):
            return 6

        def __getitem__(self, index):
            return np.asarray(index) ** 2

    assert [b[0].tolist() for b in DataReader(Squares(), 4)] == [[0, 1, 4, 9], [16, 25]]


def test_npy_dataset_is_memory_mapped_and_matches_in_memory(tmp_path):
    x = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    y = np.arange(50, dtype=np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    ds = NpyDataset(tmp_path / "x.npy", str(tmp_path / "y.npy"))
    assert len(ds) == 50 and isinstance(ds.arrays[0], np.memmap)
    got = take(DataReader(ds, 8, shuffle=True, seed=2), 9)
    expected = take(DataReader(ArrayDataset(x, y), 8, shuffle=True, seed=2), 9)
    assert_same_batches(got, expected)
    index = np.array([7, 3, 3, 40])
    np.testing.assert_array_equal(ds[index][0], x[index])


def test_bad_arguments_name_the_argument():
    ds = make_dataset(10)
    with pytest.raises(ValueError, match="same length"):
        ArrayDataset(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="batch_size"):
        DataReader(ds, 0)
    with pytest.raises(ValueError, match="rank"):
        DataReader(ds, 2, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size"):
        DataReader(ds, 2, world_size=0)
    with pytest.raises(ValueError, match="seed"):
        DataReader(ds, 2, seed=-1)
    with pytest.raises(ValueError, match="batch_size"):
        DataReader(ds, 11, drop_last=True)
    with pytest.raises(ValueError, match="prefetch"):
        DataReader(ds, 2, prefetch=-1)


@pytest.mark.parametrize("field, value", [("seed", 9), ("shuffle", False),
                                          ("dataset_length", 11), ("drop_last", True),
                                          ("kind", "CSVReader"), ("version", 99)])
def test_incompatible_state_names_the_field(field, value):
    reader = DataReader(make_dataset(10), 2, shuffle=True, seed=1)
    state = {**reader.state_dict(), field: value}
    with pytest.raises(ValueError, match=field):
        reader.load_state_dict(state)


def test_state_with_an_impossible_position_is_refused():
    reader = DataReader(make_dataset(10), 2)
    with pytest.raises(ValueError, match="position"):
        reader.load_state_dict({**reader.state_dict(), "position": 10})
    with pytest.raises(ValueError, match="epoch"):
        reader.load_state_dict({**reader.state_dict(), "epoch": -1})
