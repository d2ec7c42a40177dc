"""A job whose ranks were set up differently fails at the start, on every rank, naming values."""

import json

from mpi_run import HERE, requires_mpi, run

pytestmark = requires_mpi
SCRIPT = f"{HERE}/mismatch_script.py"

# What each mis-launched case must name: the setting and rank 2's value.
EXPECTED = {
    "fit data length": ["dataset_length", "rank 2 36"],
    "fit learning rate": ["optimizer/0/lr", "rank 2 0.2"],
    "fit epochs": ["fit/steps", "rank 0 4", "rank 2 8"],
    "fit seed": ["seed", "rank 1 1", "rank 2 2"],
    "reader data length": ["DataReader", "dataset_length", "rank 0 40", "rank 2 36"],
    "reader seed": ["seed", "rank 2 2"],
    "reader rank": ["rank_is_process_rank", "rank 0 True", "rank 1 False"],
    "ddp settings": ["DistributedDataParallel", "bucket_cap_mb", "rank 2 1.0"],
    "stream file": ["CSVReader", "file_size", "fingerprint"],
    "zero learning rate": ["ZeroRedundancyOptimizer", "0/lr", "rank 0 0.1", "rank 2 0.2"],
}


def test_every_rank_raises_naming_the_settings_that_differ(tmp_path):
    run(3, SCRIPT, str(tmp_path / "out"))
    for rank in range(3):
        with open(tmp_path / f"out-rank{rank}.json") as file:
            messages = json.load(file)
        assert messages["correct"] is None
        for case, words in EXPECTED.items():
            message = messages[case]
            assert message is not None, f"rank {rank}, {case}: no error"
            for word in words:
                assert word in message, f"rank {rank}, {case}: {word!r} not in {message!r}"
