"""Input checks done on the device and reported at the next synchronisation.

A training step must not stop the host to read back whether its class targets (or embedding
indices) were in range: the cross-entropy and lookup kernels check them where they read them
and the error is raised at the next copy to the host or ``md.cuda.synchronize()``, as PyTorch
raises its device-side asserts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_helpers import requires_cuda  # noqa: E402

import minidl as md  # noqa: E402
from minidl import nn  # noqa: E402

pytestmark = requires_cuda
GPU = "cuda:0"


def transfers():
    from minidl.backend.cuda.device import transfers as counter
    return counter


def logits_and_targets(targets):
    logits = md.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 7).to(GPU)
    logits.requires_grad_()
    return logits, md.tensor(np.array(targets)).to(GPU)


def test_a_cross_entropy_step_reads_nothing_back_from_the_device():
    logits, targets = logits_and_targets([0, 2, 1, -100])
    transfers().clear()
    loss = nn.functional.cross_entropy(logits, targets)
    loss.backward()
    assert sum(transfers().values()) == 0, transfers()
    expected = nn.functional.cross_entropy(logits.cpu(), targets.cpu()).item()
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert transfers()["checks"] == 0 and transfers()["deferred_checks"] == 1, transfers()


def test_a_bad_target_is_raised_at_the_next_copy_to_the_host():
    logits, targets = logits_and_targets([0, 2, 3, 5])
    loss = nn.functional.cross_entropy(logits, targets)  # no error yet: nothing was read back
    with pytest.raises(ValueError, match="target 3 is out of range for 3 classes"):
        loss.item()
    assert loss.item() != loss.item()  # reported once; the loss of bad rows is nan


def test_a_bad_target_is_raised_by_synchronize_and_only_once():
    logits, targets = logits_and_targets([4, 0, 0, 0])
    nn.functional.cross_entropy(logits, targets)
    with pytest.raises(ValueError, match="target 4 is out of range for 3 classes"):
        md.cuda.synchronize()
    md.cuda.synchronize()  # the error was handed over: the device is usable again
    good = nn.functional.cross_entropy(*logits_and_targets([0, 1, 2, 0]))
    assert np.isfinite(good.item())


def test_the_first_of_several_bad_calls_is_the_one_reported():
    logits, _ = logits_and_targets([0, 0, 0, 0])
    nn.functional.cross_entropy(logits, md.tensor(np.array([0, 0, 7, 0])).to(GPU))
    nn.functional.cross_entropy(logits, md.tensor(np.array([9, 0, 0, 0])).to(GPU))
    with pytest.raises(ValueError, match="target 7 is out of range"):
        md.cuda.synchronize()


def test_many_calls_without_a_synchronisation_still_check_every_target(monkeypatch):
    from minidl.backend.cuda import deferred_checks
    from minidl.backend.cuda.deferred_checks import pending_count
    monkeypatch.setattr(deferred_checks, "SLOTS", 3)  # (fewer calls fill them: a quicker test)
    logits, targets = logits_and_targets([0, 1, 2, 0])
    md.cuda.synchronize()
    for _ in range(deferred_checks.SLOTS):
        nn.functional.cross_entropy(logits, targets)
    assert pending_count() == deferred_checks.SLOTS
    _, bad = logits_and_targets([0, 1, 2, -1])
    nn.functional.cross_entropy(logits, bad)  # the slots were read to make room: one wait
    assert pending_count() == 1
    with pytest.raises(ValueError, match="target -1 is out of range"):
        md.cuda.synchronize()


def test_an_embedding_lookup_reads_nothing_back_and_reports_a_bad_index_later():
    table = nn.Embedding(5, 3).to(GPU)
    good, bad = (md.tensor(np.array(rows)).to(GPU) for rows in ([[0, 4], [2, 2]], [1, 5]))
    transfers().clear()
    table(good).sum().backward()
    assert transfers()["checks"] == 0 and transfers()["to_numpy"] == 0, transfers()
    looked_up = table(bad)
    with pytest.raises(IndexError, match="take: index 5 is out of range for 5 rows"):
        looked_up.numpy()
    np.testing.assert_array_equal(looked_up.numpy()[1], 0)  # a bad index's row: zeros


def test_index_add_into_a_new_array_reports_a_bad_index_at_the_next_synchronisation():
    from minidl.backend import get_backend
    be = get_backend(GPU)
    rows, values = be.from_numpy(np.array([0, 7])), be.from_numpy(np.ones((2, 3), np.float32))
    transfers().clear()
    added = be.index_add((4, 3), (rows,), values, np.float32)  # (a new array: nothing waits)
    assert transfers()["checks"] == 0
    with pytest.raises(IndexError, match="index out of range"):
        be.to_numpy(added)
