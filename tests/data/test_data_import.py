"""Importing the data package must stay cheap: the Numba kernels compile on first use only."""

import subprocess
import sys


def test_import_does_not_load_numba():
    code = ("import sys, minidl.data; "
            "from minidl.data import ArrayDataset, DataReader, CSVReader, NpyDataset, CTFReader; "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
