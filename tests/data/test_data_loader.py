"""PyTorch-style data: Dataset, TensorDataset, random_split, default collation and DataLoader,
which keeps DataReader's exact position (mid-epoch resume, also with worker processes)."""

import numpy as np
import pytest

import minidl as md
from minidl.data import (ArrayDataset, ConcatDataset, DataLoader, DataReader, Dataset, Subset,
                         TensorDataset,
                         default_collate, random_split)

from reader_checks import check_resume_at, check_resume_inside_loop, numpy_reader, roundtrip

X = np.arange(23 * 3, dtype=np.float32).reshape(23, 3)
Y = np.arange(23, dtype=np.int64)


class Squares(Dataset):
    """A per-sample data set written the way a PyTorch user writes one."""

    def __len__(self):
        return 11

    def __getitem__(self, i):
        return {"x": np.full(2, i, np.float32), "y": i * i, "name": f"s{i}"}


def as_numpy(batches):
    return [tuple(part.numpy() for part in batch) for batch in batches]


def test_tensor_dataset_returns_tensor_samples_and_checks_lengths():
    ds = TensorDataset(md.tensor(X), md.tensor(Y))
    x, y = ds[4]
    assert isinstance(x, md.Tensor) and x.shape == (3,) and y.item() == 4
    np.testing.assert_array_equal(ds[-1][0].numpy(), X[-1])
    with pytest.raises(IndexError, match="out of range"):
        ds[23]
    with pytest.raises(ValueError, match="same first dimension"):
        TensorDataset(md.tensor(X), md.tensor(Y[:5]))


def test_default_collate_keeps_the_structure_and_stacks_tensors():
    batch = default_collate([Squares()[i] for i in range(3)])
    assert set(batch) == {"x", "y", "name"}
    assert batch["x"].shape == (3, 2) and batch["x"].dtype == np.float32
    assert batch["y"].dtype == np.int64 and batch["y"].numpy().tolist() == [0, 1, 4]
    assert batch["name"] == ["s0", "s1", "s2"]
    pairs = default_collate([(md.tensor([1.0, 2.0]), 1.5), (md.tensor([3.0, 4.0]), 2.5)])
    assert isinstance(pairs, tuple) and pairs[0].shape == (2, 2)
    assert pairs[1].dtype == np.float32
    with pytest.raises(TypeError, match="collate_fn"):
        default_collate([object()])


def test_loader_yields_tensors_in_pytorch_batches():
    loader = DataLoader(TensorDataset(md.tensor(X), md.tensor(Y)), batch_size=5)
    batches = list(loader)
    assert len(batches) == len(loader) == 5
    assert all(isinstance(t, md.Tensor) for batch in batches for t in batch)
    assert [b[1].numpy().tolist() for b in batches][-1] == [20, 21, 22]
    dropped = DataLoader(TensorDataset(X, Y), batch_size=5, drop_last=True)
    assert len(list(dropped)) == len(dropped) == 4
    assert len(DataLoader(TensorDataset(X, Y))) == 23  # batch_size=1, as PyTorch


def test_loader_matches_pytorch_for_an_unshuffled_per_sample_data_set():
    torch = pytest.importorskip("torch")
    ours = list(DataLoader(Squares(), batch_size=4))
    theirs = list(torch.utils.data.DataLoader(Squares(), batch_size=4))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a["x"].numpy(), b["x"].numpy())
        np.testing.assert_array_equal(a["y"].numpy(), b["y"].numpy())
        assert a["name"] == b["name"]


def test_shuffled_epochs_cover_every_sample_once_in_a_new_order_each_time():
    loader = DataLoader(TensorDataset(X, Y), batch_size=4, shuffle=True, seed=3)
    first = np.concatenate([b[1].numpy() for b in loader])
    second = np.concatenate([b[1].numpy() for b in loader])
    assert sorted(first) == sorted(second) == list(range(23))
    assert first.tolist() != second.tolist() and loader.epoch == 2


def test_collate_fn_receives_the_list_of_samples():
    seen = []

    def collate(samples):
        seen.append(len(samples))
        return [s["y"] for s in samples]

    assert list(DataLoader(Squares(), batch_size=4, collate_fn=collate)) == [
        [0, 1, 4, 9], [16, 25, 36, 49], [64, 81, 100]]
    assert seen == [4, 4, 3]
    with pytest.raises(TypeError, match="collate_fn"):
        DataLoader(Squares(), collate_fn=3)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cut", [0, 3, 5, 9])
def test_a_restored_loader_continues_exactly(workers, cut):
    def make():
        return DataLoader(TensorDataset(X, Y), batch_size=5, shuffle=True, seed=1,
                          num_workers=workers)

    check_resume_at(lambda: numpy_reader(make()), cut, horizon=7)
    check_resume_inside_loop(lambda: numpy_reader(make()), cut, horizon=4)


def test_workers_gather_per_sample_data_sets_and_stop_on_close():
    loader = DataLoader(Squares(), batch_size=3, shuffle=True, seed=2, num_workers=2)
    plain = DataLoader(Squares(), batch_size=3, shuffle=True, seed=2)
    for _ in range(3):  # across an epoch boundary
        a, b = loader.next_batch(), plain.next_batch()
        np.testing.assert_array_equal(a["x"].numpy(), b["x"].numpy())
        assert a["name"] == b["name"]
    state = loader.state_dict()
    assert state["epoch"] == plain.epoch and state["position"] == plain.position
    loader.close()
    assert loader.next_batch()["name"] == plain.next_batch()["name"]  # still usable
    loader.close()


def test_an_error_in_a_worker_reaches_the_caller():
    class Broken(Squares):
        def __getitem__(self, i):
            if i == 5:
                raise RuntimeError("sample 5 is unreadable")
            return super().__getitem__(i)

    with pytest.raises(RuntimeError, match="sample 5"):
        with DataLoader(Broken(), batch_size=3, num_workers=2) as loader:
            list(loader)


def test_a_state_from_another_reader_or_setting_is_refused_by_name():
    loader = DataLoader(TensorDataset(X, Y), batch_size=5, shuffle=True)
    reader = DataReader(TensorDataset(X, Y), batch_size=5, shuffle=True)
    with pytest.raises(ValueError, match="'kind'"):
        loader.load_state_dict(reader.state_dict())
    state = roundtrip(DataLoader(TensorDataset(X, Y), batch_size=5, shuffle=True,
                                 seed=9).state_dict())
    with pytest.raises(ValueError, match="'seed'"):
        loader.load_state_dict(state)
    for bad in ({"num_workers": -1}, {"batch_size": 0}, {"prefetch_factor": 0},
                {"sampler": [0, 1]}, {"worker_init_fn": print}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            DataLoader(TensorDataset(X, Y), **bad)


def test_pytorch_only_flags_are_accepted():
    loader = DataLoader(TensorDataset(X, Y), batch_size=4, pin_memory=True,
                        persistent_workers=True)
    assert loader.next_batch()[1].numpy().tolist() == [0, 1, 2, 3]


def test_random_split_is_disjoint_covering_and_reproducible():
    ds = TensorDataset(X, Y)
    parts = random_split(ds, [0.5, 0.3, 0.2], seed=7)
    assert [len(p) for p in parts] == [12, 7, 4]  # floors 11, 6, 4 + remainder round robin
    labels = [np.array([p[i][1].item() for i in range(len(p))]) for p in parts]
    assert sorted(np.concatenate(labels).tolist()) == list(range(23))
    again = random_split(ds, [0.5, 0.3, 0.2], seed=7)
    assert all(a.indices.tolist() == b.indices.tolist() for a, b in zip(parts, again))
    md.manual_seed(5)
    one = random_split(ds, [20, 3])
    md.manual_seed(5)
    assert random_split(ds, [20, 3])[0].indices.tolist() == one[0].indices.tolist()
    with pytest.raises(ValueError, match="sum to the data set's length"):
        random_split(ds, [20, 2])


def test_random_split_counts_match_pytorch():
    torch = pytest.importorskip("torch")
    for total, fractions in ((23, [0.5, 0.3, 0.2]), (10, [0.33, 0.33, 0.34]), (7, [0.5, 0.5])):
        theirs = torch.utils.data.random_split(range(total), fractions)
        ours = random_split(TensorDataset(np.zeros(total)), fractions, seed=0)
        assert [len(p) for p in ours] == [len(p) for p in theirs]


def test_a_loader_over_a_split_gathers_whole_batches_and_subsets_nest():
    ds = TensorDataset(X, Y)
    part = Subset(Subset(ds, np.arange(20)[::-1]), [0, 2, 4])
    (x, y), = list(DataLoader(part, batch_size=3))
    assert y.numpy().tolist() == [19, 17, 15]
    np.testing.assert_array_equal(x.numpy(), X[[19, 17, 15]])
    both = ConcatDataset([Squares(), Squares()])
    assert len(both) == 22 and both[13]["y"] == 4
    assert len(Squares() + Squares()) == 22


@pytest.mark.parametrize("workers", [0, 1])
def test_garbage_collecting_a_reading_loader_never_waits_for_its_workers(workers):
    """Collection can run __del__ inside another thread's start-up, while the main thread
    waits for that start: joining the workers there deadlocked the process."""
    data = TensorDataset(md.tensor(np.arange(40, dtype=np.float32).reshape(20, 2)))
    loader = (DataLoader(data, batch_size=4, num_workers=1) if workers
              else DataReader(ArrayDataset(np.zeros((20, 2), np.float32)), 4, prefetch=2))
    loader.next_batch()
    prefetcher = loader._prefetcher
    joined = []
    if workers:
        real_shutdown = prefetcher._pool.shutdown
        prefetcher._pool.shutdown = lambda wait=True, **kw: (joined.append(wait),
                                                             real_shutdown(wait=False, **kw))
    else:
        prefetcher._thread.join = lambda *a: joined.append(True)
    loader.__del__()
    assert True not in joined
    loader._prefetcher = None
