"""N ranks train like one process on every data set size, short last batches included.

A data set of S samples read in global batches of G ends each epoch with a batch of S mod G
samples, which the ranks split as evenly as they can: some get one sample more, and with
fewer samples than ranks some get none. The gradient, the loss and the metrics must still be
the means over the samples of the global batch, as one process computes them.
"""

import numpy as np
import pytest

from mpi_run import HERE, requires_mpi, run

pytestmark = requires_mpi
SCRIPT = f"{HERE}/tail_script.py"
GLOBAL_BATCH = 12   # divisible by 2, 3 and 4 ranks
EVERY_REMAINDER = list(range(GLOBAL_BATCH + 1, 2 * GLOBAL_BATCH + 1))


def trained(tmp_path, ranks, sizes):
    out = tmp_path / f"tails-{ranks}.npz"
    run(ranks, SCRIPT, str(out), str(GLOBAL_BATCH), *map(str, sizes))
    with np.load(out) as archive:
        return {name: archive[name] for name in archive.files}


def assert_same_training(parallel, single, sizes):
    for size in sizes:
        names = [n for n in single if n.startswith(f"{size}/")]
        assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= {
            n.rsplit("/", 1)[1] for n in names if "/fit/" in n}
        for name in names:
            assert np.all(np.isfinite(parallel[name])), name
            np.testing.assert_allclose(parallel[name], single[name], rtol=0, atol=1e-10,
                                       err_msg=name)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("one"), 1, EVERY_REMAINDER)


# Sizes whose last global batch leaves ranks uneven (13: 1 sample for 3 or 4 ranks, so some
# ranks have none; 14, 22, 23: uneven blocks), and one that divides evenly (24).
@pytest.mark.parametrize("ranks,sizes", [(3, [13, 14, 22, 24]), (4, [13, 14, 23])])
def test_uneven_last_batches_train_like_one_process(tmp_path, one_process, ranks, sizes):
    assert_same_training(trained(tmp_path, ranks, sizes), one_process, sizes)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_every_remainder_trains_like_one_process(tmp_path, one_process, ranks):
    assert_same_training(trained(tmp_path, ranks, EVERY_REMAINDER), one_process,
                         EVERY_REMAINDER)
