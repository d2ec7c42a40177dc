"""Iterable data sets in a DataLoader: exact resume through the data set's own state, resume by
skipping (with a warning) without one, ChainDataset and get_worker_info."""

import warnings

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.data import ChainDataset, DataLoader, IterableDataset, get_worker_info

from reader_checks import check_resume_at, check_resume_inside_loop, roundtrip


class Counter(IterableDataset):
    """Yields (x, y) for start..stop-1, remembering where its next iteration continues --
    the resumable protocol of an iterable data set."""

    def __init__(self, start, stop):
        self.start, self.stop, self.next = start, stop, start

    def __iter__(self):
        while self.next < self.stop:
            i = self.next
            self.next += 1
            yield np.array([i, -i], np.float32), i
        self.next = self.start  # the next iteration is a new pass

    def state_dict(self):
        return {"next": self.next}

    def load_state_dict(self, state):
        self.next = state["next"]


class Stateless(IterableDataset):
    def __iter__(self):
        for i in range(10):
            yield np.float32(i)


def numpy_reader(loader):
    class Numpy:
        def next_batch(self):
            batch = loader.next_batch()
            return tuple(t.numpy() for t in (batch if isinstance(batch, tuple) else (batch,)))

        def state_dict(self):
            return loader.state_dict()

        def load_state_dict(self, state):
            loader.load_state_dict(state)

        def __iter__(self):
            while True:
                epoch = loader.epoch
                yield self.next_batch()
                if loader.epoch != epoch:
                    return
    return Numpy()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("cut", [1, 3, 4])
def test_a_stateful_iterable_data_set_resumes_exactly(drop_last, cut):
    def make():
        return numpy_reader(DataLoader(Counter(0, 11), batch_size=3, drop_last=drop_last))

    check_resume_at(make, cut, horizon=8)
    check_resume_inside_loop(make, cut, horizon=5)


def test_an_epoch_ends_with_its_last_batch_as_in_pytorch():
    torch = pytest.importorskip("torch")

    class TorchCounter(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(Counter(0, 11))

    for drop_last in (False, True):
        loader = DataLoader(Counter(0, 11), batch_size=3, drop_last=drop_last)
        ours = [b[1].numpy().tolist() for b in loader]
        assert loader.epoch == 1 and loader.position == 0
        theirs = [b[1].tolist() for b in torch.utils.data.DataLoader(
            TorchCounter(), batch_size=3, drop_last=drop_last)]
        assert ours == theirs
        with pytest.raises(TypeError, match="no length"):
            len(loader)


def test_a_data_set_without_state_is_resumed_by_skipping_with_a_warning():
    loader = DataLoader(Stateless(), batch_size=4)
    loader.next_batch()
    state = roundtrip(loader.state_dict())
    expected = [loader.next_batch().numpy().tolist() for _ in range(3)]
    restored = DataLoader(Stateless(), batch_size=4)
    with pytest.warns(UserWarning, match="no state_dict.*discarding the 4 samples"):
        restored.load_state_dict(state)
    assert [restored.next_batch().numpy().tolist() for _ in range(3)] == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to skip at an epoch start: no warning
        DataLoader(Stateless(), batch_size=4).load_state_dict(
            DataLoader(Stateless(), batch_size=4).state_dict())


def test_a_state_from_a_stateless_data_set_is_refused_by_a_stateful_one():
    state = DataLoader(Stateless(), batch_size=4).state_dict()
    with pytest.raises(ValueError, match="'dataset"):
        DataLoader(Counter(0, 5), batch_size=4).load_state_dict(state)


def test_a_chain_resumes_across_its_parts():
    def make():
        chain = ChainDataset([Counter(0, 5), Counter(100, 104)])
        return numpy_reader(DataLoader(chain, batch_size=2))

    first = [b[1].tolist() for b in make()]
    assert first == [[0, 1], [2, 3], [4, 100], [101, 102], [103]]
    check_resume_at(make, 3, horizon=6)
    assert (Counter(0, 1) + Counter(5, 6)).resumable
    assert not ChainDataset([Counter(0, 1), Stateless()]).resumable


def test_iterable_data_sets_refuse_what_does_not_apply():
    assert get_worker_info() is None
    for bad in ({"shuffle": True}, {"sampler": [0]}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            DataLoader(Counter(0, 5), **bad)
    with pytest.raises(ValueError, match="no full batch of 3"):
        DataLoader(Counter(0, 2), batch_size=3, drop_last=True).next_batch()


class Shard(Counter):
    """Each worker reads every num_workers-th number, PyTorch's way of sharding by worker."""

    def __iter__(self):
        info = get_worker_info()
        step, first = (1, 0) if info is None else (info.num_workers, info.id)
        while self.next < self.stop:
            i = self.next
            self.next += 1
            if i % step == first:
                yield np.array([i, -i], np.float32), i
        self.next = self.start


class StatelessShard(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        yield from range(info.id * 100, info.id * 100 + 5 + info.id)


def test_workers_read_their_shards_round_robin_as_in_pytorch():
    torch = pytest.importorskip("torch")

    class TorchShard(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            return (s for s in Counter(0, 14) if s[1] % info.num_workers == info.id)

    with DataLoader(Shard(0, 14), batch_size=3, num_workers=2) as loader:
        ours = [b[1].numpy().tolist() for b in loader]
        assert loader.epoch == 1 and loader.position == 0
    theirs = [b[1].tolist() for b in torch.utils.data.DataLoader(TorchShard(), batch_size=3,
                                                                  num_workers=2)]
    assert ours == theirs == [[0, 2, 4], [1, 3, 5], [6, 8, 10], [7, 9, 11], [12], [13]]


@pytest.mark.parametrize("cut", [2, 5])
def test_each_workers_shard_resumes_exactly(cut):
    loaders = []

    def make():
        loaders.append(DataLoader(Shard(0, 17), batch_size=3, num_workers=2))
        return numpy_reader(loaders[-1])

    check_resume_at(make, cut, horizon=6)
    for loader in loaders:
        loader.close()


def test_stateless_shards_are_resumed_by_skipping_in_each_worker():
    with DataLoader(StatelessShard(), batch_size=2, num_workers=2) as loader:
        expected = [loader.next_batch().numpy().tolist() for _ in range(6)]
    assert expected[:3] == [[0, 1], [100, 101], [2, 3]]
    with DataLoader(StatelessShard(), batch_size=2, num_workers=2) as loader:
        for _ in range(3):
            loader.next_batch()
        state = roundtrip(loader.state_dict())
    with DataLoader(StatelessShard(), batch_size=2, num_workers=2) as restored:
        with pytest.warns(UserWarning, match="discarding the 6 samples"):
            restored.load_state_dict(state)
        assert [restored.next_batch().numpy().tolist() for _ in range(3)] == expected[3:]
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(StatelessShard(), batch_size=2, num_workers=3).load_state_dict(state)


@pytest.mark.parametrize("workers", [0, 2])
def test_fit_trains_from_an_iterable_loader_and_resumes_bitwise(workers, tmp_path):
    def run(steps, directory):
        md.manual_seed(0)
        model = nn.Linear(2, 1)
        loader = DataLoader(Shard(0, 13), batch_size=4, num_workers=workers,
                            collate_fn=lambda samples: (
                                md.tensor(np.stack([s[0] for s in samples]) / 10),
                                md.tensor(np.array([[s[1] / 10] for s in samples],
                                                   np.float32))))
        md.fit(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.1), loader,
               steps=steps, checkpoint=md.CheckpointConfig(directory, save_every_steps=3),
               progress=False)
        return model.weight.numpy().copy()

    straight = run(9, tmp_path / "a")
    run(6, tmp_path / "b")
    resumed = run(9, tmp_path / "b")
    np.testing.assert_array_equal(resumed, straight)
