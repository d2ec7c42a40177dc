"""Importing the data package must stay cheap: the Numba kernels compile on first use only."""

import subprocess
import sys

_PROBE = """
import sys
import minidl
print('numba' in sys.modules)
from minidl.data import ArrayDataset, CSVReader, CTFReader, DataReader, NpyDataset
reader = CSVReader(sys.argv[1], batch_size=2)
print('numba' in sys.modules)
features, labels = reader.next_batch()   # the first chunk is parsed: now the kernels load
print('numba' in sys.modules, features.tolist(), labels.tolist())
"""


def test_numba_loads_at_the_first_parsed_chunk_not_at_import(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,b,label\n1,2,0\n3,4,1\n")
    out = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True,
                         text=True, check=True)
    assert out.stdout.splitlines() == ["False", "False", "True [[1.0, 2.0], [3.0, 4.0]] [0, 1]"]
