"""Importing the data package must stay cheap: the Numba kernels compile on first use only."""

import subprocess
import sys


def test_import_does_not_load_numba():
    # Only what minidl.data itself adds is checked: the package root is someone else's concern.
    code = ("import sys, minidl; root = 'numba' in sys.modules; "
            "from minidl.data import ArrayDataset, DataReader, CSVReader, NpyDataset, CTFReader; "
            "print(root or 'numba' not in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
