"""Samplers with a saved position, and DataLoader(sampler=/batch_sampler=) resuming mid-epoch
exactly; a sampler without state is refused with the reason."""

import numpy as np
import pytest

from minidl.data import (BatchSampler, DataLoader, DistributedSampler, RandomSampler, Sampler,
                         SequentialSampler, SubsetRandomSampler, TensorDataset,
                         WeightedRandomSampler)

from reader_checks import check_resume_at, check_resume_inside_loop, numpy_reader, roundtrip

X = np.arange(23 * 2, dtype=np.float32).reshape(23, 2)
Y = np.arange(23, dtype=np.int64)
DS = TensorDataset(X, Y)
WEIGHTS = np.linspace(0.1, 2.0, 23)


SAMPLERS = {
    "sequential": lambda: SequentialSampler(DS),
    "random": lambda: RandomSampler(DS, seed=3),
    "random_replacement": lambda: RandomSampler(DS, replacement=True, num_samples=30, seed=3),
    "subset": lambda: SubsetRandomSampler([1, 4, 6, 8, 9, 12, 20, 21, 22], seed=5),
    "weighted": lambda: WeightedRandomSampler(WEIGHTS, num_samples=17, seed=2),
    "distributed": lambda: DistributedSampler(DS, num_replicas=3, rank=1, seed=4),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
@pytest.mark.parametrize("cut", [2, 5])
def test_a_loader_with_any_sampler_resumes_mid_epoch_exactly(name, cut):
    def make():
        return numpy_reader(DataLoader(DS, batch_size=4, sampler=SAMPLERS[name]()))

    check_resume_at(make, cut, horizon=9)  # crosses epoch boundaries
    check_resume_inside_loop(make, cut, horizon=5)


def test_a_batch_sampler_resumes_exactly_also_with_worker_processes():
    def make(workers):
        batch_sampler = BatchSampler(RandomSampler(DS, seed=8), batch_size=5, drop_last=True)
        return numpy_reader(DataLoader(DS, batch_sampler=batch_sampler, num_workers=workers))

    check_resume_at(lambda: make(0), 3, horizon=6)
    check_resume_at(lambda: make(2), 3, horizon=6)
    assert len(DataLoader(DS, batch_sampler=BatchSampler(SequentialSampler(DS), 5, True))) == 4


def test_sampler_epochs_advance_and_change_the_order():
    sampler = RandomSampler(DS, seed=3)
    first, second = list(sampler), list(sampler)
    assert sorted(first) == sorted(second) == list(range(23)) and first != second
    assert sampler.epoch == 2 and sampler.position == 0
    again = RandomSampler(DS, seed=3)
    assert list(again) == first  # the order is a function of (seed, epoch)
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_a_sampler_state_restores_its_position_inside_an_epoch():
    sampler = WeightedRandomSampler(WEIGHTS, num_samples=10, seed=1)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(4)]
    state = roundtrip(sampler.state_dict())
    rest = list(iterator)
    restored = WeightedRandomSampler(WEIGHTS, num_samples=10, seed=1)
    restored.load_state_dict(state)
    assert list(restored) == rest and len(head + rest) == 10
    with pytest.raises(ValueError, match="'seed'"):
        WeightedRandomSampler(WEIGHTS, num_samples=10, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="'weights_digest'"):
        WeightedRandomSampler(WEIGHTS[::-1], num_samples=10, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="'position'"):
        restored.load_state_dict(dict(state, position=11))


def test_samplers_match_pytorch_where_the_order_is_not_random():
    torch = pytest.importorskip("torch")
    data = list(range(23))
    assert list(SequentialSampler(data)) == list(torch.utils.data.SequentialSampler(data))
    ours = BatchSampler(SequentialSampler(data), 5, drop_last=False)
    theirs = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(data), 5, False)
    assert list(ours) == list(theirs) and len(ours) == len(theirs)
    for drop_last in (False, True):
        for rank in range(3):
            ours = DistributedSampler(data, 3, rank, shuffle=False, drop_last=drop_last)
            theirs = torch.utils.data.DistributedSampler(data, 3, rank, shuffle=False,
                                                         drop_last=drop_last)
            assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_distributed_ranks_share_an_epoch_and_one_rank_state_restores_another():
    ranks = [DistributedSampler(DS, num_replicas=2, rank=r, seed=6) for r in range(2)]
    shares = [list(s) for s in ranks]
    assert set(shares[0] + shares[1]) == set(range(23)) and len(shares[0]) == len(shares[1]) == 12

    def loader(rank):
        return numpy_reader(DataLoader(DS, batch_size=3, sampler=DistributedSampler(
            DS, num_replicas=2, rank=rank, seed=6)))

    rank0, rank1, reference = loader(0), loader(1), loader(1)
    expected = [reference.next_batch() for _ in range(6)]
    for _ in range(3):
        rank0.next_batch()
    rank1.load_state_dict(roundtrip(rank0.state_dict()))  # rank 0's checkpoint, rank 1 resumes
    for want in expected[3:]:
        np.testing.assert_array_equal(rank1.next_batch()[1], want[1])
    with pytest.raises(ValueError, match="'num_replicas'"):
        DataLoader(DS, batch_size=3, sampler=DistributedSampler(DS, 3, 0, seed=6)) \
            .load_state_dict(roundtrip(rank0.state_dict()))


def test_weighted_sampler_draws_in_proportion_to_the_weights():
    weights = np.array([1.0, 0.0, 3.0])
    counts = np.bincount(list(WeightedRandomSampler(weights, 4000, seed=0)), minlength=3)
    assert counts[1] == 0
    assert 2.7 < counts[2] / counts[0] < 3.3
    without = list(WeightedRandomSampler(np.ones(6), 6, replacement=False, seed=0))
    assert sorted(without) == list(range(6))


def test_a_stateless_sampler_is_refused_with_the_reason():
    class Reversed(Sampler):  # a user's sampler written the PyTorch way: only __iter__
        def __iter__(self):
            return iter(range(22, -1, -1))

        def __len__(self):
            return 23

        state_dict = load_state_dict = None

    for argument in ({"sampler": Reversed()}, {"sampler": [3, 1, 2]},
                     {"batch_sampler": [[0, 1], [2]]}):
        with pytest.raises(ValueError, match="state_dict.*resumed run"):
            DataLoader(DS, **argument)


def test_a_users_sampler_with_state_is_used_and_resumed():
    class EveryOther(Sampler):
        kind = "EveryOther"

        def epoch_order(self, epoch):
            return np.arange(epoch % 2, 23, 2)

    def make():
        return numpy_reader(DataLoader(DS, batch_size=4, sampler=EveryOther()))

    loader = make()
    assert loader.next_batch()[1].tolist() == [0, 2, 4, 6]
    check_resume_at(make, 4, horizon=4)


def test_sampler_arguments_follow_pytorchs_rules():
    sampler = RandomSampler(DS)
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(DS, sampler=sampler, shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler is mutually exclusive"):
        DataLoader(DS, batch_size=4, batch_sampler=BatchSampler(sampler, 4, False))
    with pytest.raises(ValueError, match="generator"):
        RandomSampler(DS, generator=object())
    with pytest.raises(ValueError, match="weights"):
        WeightedRandomSampler([0.0, 0.0], 2)
    with pytest.raises(IndexError, match="index 40"):
        DataLoader(DS, batch_size=2, sampler=SubsetRandomSampler([1, 40])).next_batch()
    with pytest.raises(ValueError, match="DistributedSampler"):
        DataLoader(DS, sampler=sampler, rank=0, world_size=2)
