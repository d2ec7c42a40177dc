"""DataReader in data-parallel training: one global order, a slice per rank, a global state.

Every rank's reader is simulated in one process here (a reader only needs its rank and the
world size); the tests under mpiexec are in tests/distributed.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minidl.data import ArrayDataset, DataReader

from reader_checks import roundtrip


def make_dataset(n):
    return ArrayDataset(np.arange(n * 2, dtype=np.float32).reshape(n, 2), np.arange(n))


def readers(n, batch_size, world_size, **options):
    return [DataReader(make_dataset(n), batch_size, rank=rank, world_size=world_size, **options)
            for rank in range(world_size)]


def job_step(ranks):
    """One step of the whole job: every rank's batch, side by side (labels only)."""
    return np.concatenate([reader.next_batch()[1] for reader in ranks])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), batch_size=st.integers(1, 5), world_size=st.integers(1, 4),
       shuffle=st.booleans(), drop_last=st.booleans(), seed=st.integers(0, 100))
def test_ranks_side_by_side_read_what_one_process_reads_with_the_global_batch(
        n, batch_size, world_size, shuffle, drop_last, seed):
    if drop_last and n < batch_size * world_size:
        return
    options = dict(shuffle=shuffle, drop_last=drop_last, seed=seed)
    ranks = readers(n, batch_size, world_size, **options)
    single = DataReader(make_dataset(n), batch_size * world_size, **options)
    assert len(single) == len(ranks[0])
    for _ in range(2 * len(single) + 1):
        np.testing.assert_array_equal(job_step(ranks), single.next_batch()[1])
        states = [roundtrip(r.state_dict()) for r in ranks]
        assert all(s == states[0] for s in states)  # global: the same on every rank
        assert (states[0]["epoch"], states[0]["position"]) == (single.epoch, single.position)


def test_a_state_saved_by_rank_0_restores_every_rank():
    # Before the state was global, a rank other than 0 refused rank 0's state ("rank").
    ranks = readers(30, 2, 3, shuffle=True, seed=4)
    for _ in range(3):
        job_step(ranks)
    state = roundtrip(ranks[0].state_dict())
    fresh = readers(30, 2, 3, shuffle=True, seed=4)
    for reader in fresh:
        reader.load_state_dict(state)
    for _ in range(7):
        np.testing.assert_array_equal(job_step(fresh), job_step(ranks))


@pytest.mark.parametrize("new_world, new_batch", [(2, 3), (1, 6), (2, 2), (1, 1), (4, 2)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_elastic_resume_continues_the_same_global_sample_sequence(new_world, new_batch,
                                                                 drop_last):
    n, options = 40, dict(shuffle=True, seed=11, drop_last=drop_last)
    saved_at_3 = readers(n, 2, 3, **options)
    for _ in range(4):  # 24 samples into epoch 0
        job_step(saved_at_3)
    state = roundtrip(saved_at_3[1].state_dict())
    assert state["epoch"] == 0 and state["position"] == 24

    resumed = readers(n, new_batch, new_world, **options)
    for reader in resumed:
        reader.load_state_dict(state)
    seen = np.concatenate([job_step(resumed) for _ in range(12)])
    # The same samples, in the same order, as one process reading one sample at a time; with
    # drop_last each epoch ends where a whole global batch of the *new* size no longer fits.
    reference = DataReader(make_dataset(n), 1, shuffle=True, seed=11)
    expected = []
    epoch_end = n if not drop_last else n // (new_world * new_batch) * (new_world * new_batch)
    for epoch in range(6):
        reference.load_state_dict({**reference.state_dict(), "epoch": epoch, "position": 0})
        order = np.concatenate([reference.next_batch()[1] for _ in range(n)])
        start = 24 if epoch == 0 else 0
        expected.append(order[start:max(start, epoch_end)])
    expected = np.concatenate(expected)[:len(seen)]
    np.testing.assert_array_equal(seen, expected)


def test_drop_last_after_a_resume_with_another_global_batch_reads_only_full_batches():
    saved = DataReader(make_dataset(10), 2, drop_last=True)
    for _ in range(3):
        saved.next_batch()
    state = roundtrip(saved.state_dict())
    assert state["position"] == 6
    resumed = DataReader(make_dataset(10), 3, drop_last=True)  # 4 samples left: one batch
    resumed.load_state_dict(state)
    assert resumed.next_batch()[1].tolist() == [6, 7, 8]
    assert resumed.epoch == 1 and resumed.next_batch()[1].tolist() == [0, 1, 2]
    state["position"] = 8  # 2 left: less than a batch, so the next epoch starts
    resumed.load_state_dict(state)
    assert resumed.epoch == 1 and resumed.next_batch()[1].tolist() == [0, 1, 2]


def test_short_tail_is_split_as_evenly_as_possible():
    ranks = readers(10, 3, 3)  # global batch 9, then a tail of 1
    job_step(ranks)
    tail = [reader.next_batch()[1].tolist() for reader in ranks]
    assert tail == [[9], [], []]
