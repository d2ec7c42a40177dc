"""Each rank's gradient weighs its share of a full batch, as its data-parallel reader recorded it
(checked in one process: a reader for rank r of N records without a process group)."""

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.data import ArrayDataset, DataLoader, DataReader


def ddp():
    return nn.parallel.DistributedDataParallel(nn.Linear(2, 1))


def reader(rank, size=13, kind=DataReader, **options):
    data = ArrayDataset(np.zeros((size, 2), np.float32), np.zeros(size, np.float32))
    return kind(data, batch_size=4, rank=rank, world_size=3, **options)


def weights_of_an_epoch(model, read):
    found = []
    for _ in range(len(read)):
        x, _ = read.next_batch()
        loss = model(md.as_tensor(x)).sum()
        found.append(model.sample_weight())
        loss.backward()  # averages the gradients (the identity in one process) with that weight
    return found


@pytest.mark.parametrize("rank,last", [(0, 0.25), (1, 0.0), (2, 0.0)])
def test_the_short_last_batch_weighs_the_rank_share_of_it(rank, last):
    # 13 samples in global batches of 12: the second batch's single sample goes to rank 0.
    assert weights_of_an_epoch(ddp(), reader(rank)) == [1.0, last]


@pytest.mark.parametrize("options", [{"prefetch": 2}, {"drop_last": True}])
def test_prefetch_and_drop_last_record_the_batches_handed_out(options):
    size = 23  # global batches of 12 and 11: ranks get 4, 4, 3 of the second
    read = reader(2, size=size, **options)
    expected = [1.0] if options.get("drop_last") else [1.0, 0.75]
    assert weights_of_an_epoch(ddp(), read) == expected
    read.close()


def test_a_data_loader_records_its_batches_too():
    # 14 samples: the last global batch of 2 gives ranks 0 and 1 one sample each.
    assert weights_of_an_epoch(ddp(), reader(1, size=14, kind=DataLoader)) == [1.0, 0.25]


def test_micro_batches_count_once_and_accumulated_batches_add_up():
    model, read = ddp(), reader(0, size=16)  # batches of 4 then 2 for rank 0
    x, _ = read.next_batch()
    with model.no_sync():
        for part in np.array_split(x, 2):  # one batch in two forwards
            model(md.as_tensor(part)).sum().backward()
    assert model.sample_weight() == 1.0
    x, _ = read.next_batch()
    loss = model(md.as_tensor(x)).sum()
    assert model.sample_weight() == 6 / 8
    loss.backward()
    assert model.sample_weight() == 1.0  # the count starts again after each averaging


def test_weighting_can_be_turned_off_and_evaluation_takes_no_batch():
    model, read = nn.parallel.DistributedDataParallel(nn.Linear(2, 1), weight_by_samples=False), \
        reader(1)
    read.next_batch()
    read.next_batch()
    model(md.as_tensor(np.zeros((1, 2), np.float32)))
    assert model.sample_weight() == 1.0
    counted = ddp()
    with md.no_grad():
        counted(md.as_tensor(np.zeros((1, 2), np.float32)))
    assert counted.sample_weight() == 1.0
