"""DistributedDataParallel under mpiexec: N ranks train like one process with the global batch."""

import numpy as np
import pytest

from mpi_run import SCRIPT, requires_mpi, run

pytestmark = requires_mpi


def final_state(tmp_path, ranks, *options):
    out = tmp_path / f"final-{ranks}-{'-'.join(options)}.npz"
    run(ranks, SCRIPT, str(out), *options)
    with np.load(out) as archive:
        return {name: archive[name] for name in archive.files}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return final_state(tmp_path_factory.mktemp("single"), 1, "--steps", "10")


@pytest.mark.parametrize("ranks", [2, 3])
def test_ddp_training_equals_one_process_with_the_same_global_batch(tmp_path, single, ranks):
    state = final_state(tmp_path, ranks, "--steps", "10")
    np.testing.assert_array_equal(state["consumed"], single["consumed"])
    trained = [k for k in single if k.startswith(("model/", "optimizer/"))]
    assert len(trained) == 4 + 4 * 3  # two Linear layers; Adam: step, exp_avg, exp_avg_sq each
    for name in trained:
        np.testing.assert_allclose(state[name], single[name], rtol=0, atol=1e-6, err_msg=name)
    # The weights moved: equality is not just two untouched initialisations.
    assert np.abs(single["model/module.0.weight"]).sum() > 0


def test_no_sync_accumulation_equals_one_big_batch(tmp_path, single):
    state = final_state(tmp_path, 2, "--steps", "10", "--accumulate", "3")
    for name in single:
        if name.startswith("model/"):
            np.testing.assert_allclose(state[name], single[name], rtol=0, atol=1e-6)


@pytest.mark.parametrize("ranks", [3])  # at 2 ranks a + b = b + a: 3 can tell orders apart
def test_averaging_during_backward_is_bitwise_the_averaging_after_it(tmp_path, ranks):
    # One bucket per parameter: four all-reduces started in order while backward runs.
    options = ("--steps", "6", "--bucket-mb", "0", "--accumulate", "2", "--batchnorm")
    during = final_state(tmp_path, ranks, *options)
    after = final_state(tmp_path, ranks, *options, "--no-overlap")
    assert sorted(during) == sorted(after)
    for name in during:
        assert during[name].tobytes() == after[name].tobytes(), name
