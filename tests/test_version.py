"""One version, read from ``minidl/version.py`` by the package and by the files it writes."""

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.version import __version__


def test_the_package_states_the_version_of_version_py():
    assert md.__version__ == __version__
    assert __version__.count(".") == 2


def test_an_exported_onnx_file_names_minidl_and_its_version_as_producer(tmp_path):
    onnx = pytest.importorskip("onnx")
    path = tmp_path / "linear.onnx"
    md.export_onnx(nn.Linear(2, 1), path, example_input=md.tensor(np.zeros((1, 2), np.float32)))
    model = onnx.load(str(path))
    assert (model.producer_name, model.producer_version) == ("minidl", __version__)
