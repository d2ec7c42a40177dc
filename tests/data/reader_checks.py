"""Checks shared by the reader tests: the reader protocol is the same for every reader."""

import msgpack
import numpy as np


def roundtrip(state):
    """A state must survive msgpack unchanged -- that is how checkpoints store it."""
    return msgpack.unpackb(msgpack.packb(state), strict_map_key=False)


def assert_same_batches(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert len(g) == len(e)
        for a, b in zip(g, e):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


def take(reader, count):
    return [reader.next_batch() for _ in range(count)]


def check_resume_at(make_reader, cut, horizon):
    """Restoring after ``cut`` batches (via msgpack) continues exactly like the original."""
    reference = take(make_reader(), cut + horizon)
    original = make_reader()
    take(original, cut)
    state = roundtrip(original.state_dict())
    restored = make_reader()
    restored.load_state_dict(state)
    assert_same_batches(take(restored, horizon), reference[cut:])
    # The original keeps going unaffected by having been asked for its state.
    assert_same_batches(take(original, horizon), reference[cut:])


def check_resume_inside_loop(make_reader, cut, horizon):
    """A state taken inside ``for batch in reader`` reflects the batches handed out so far."""
    reference = take(make_reader(), cut + 1 + horizon)
    reader = make_reader()
    handed = 0
    state = None
    while state is None:
        for batch in reader:
            handed += 1
            if handed == cut + 1:
                state = roundtrip(reader.state_dict())
                break
    restored = make_reader()
    restored.load_state_dict(state)
    assert_same_batches(take(restored, horizon), reference[cut + 1:])


def rows_of_rank(path, rank, world_size, data_offset=0):
    """Indices of the data lines that rank ``rank`` of ``world_size`` streams: those whose
    first byte lies in the rank's share of the data bytes, cut evenly (independent of the
    reader's own computation, which moves each cut to a line start)."""
    with open(path, "rb") as f:
        content = f.read()
    span = len(content) - data_offset
    cuts = [data_offset + span * r // world_size for r in range(world_size)]
    rows, start = [], data_offset
    for line in content[data_offset:].split(b"\n")[:-1]:
        if line.strip():
            owner = max(r for r in range(world_size) if cuts[r] <= start)
            rows.append(owner)
        start += len(line) + 1
    return [i for i, owner in enumerate(rows) if owner == rank]


def numpy_reader(loader):
    """A DataLoader seen as a reader of NumPy arrays (what the checks above compare): its
    Tensors read back, its state and epochs untouched."""
    class Numpy:
        def next_batch(self):
            return tuple(t.numpy() for t in loader.next_batch())

        def state_dict(self):
            return loader.state_dict()

        def load_state_dict(self, state):
            loader.load_state_dict(state)

        def __iter__(self):
            return (tuple(t.numpy() for t in b) for b in loader)
    return Numpy()
