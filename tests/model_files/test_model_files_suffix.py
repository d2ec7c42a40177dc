"""save_model and export_onnx add the conventional suffix when the name has none."""

import numpy as np
import pytest

import minidl as md
from minidl import nn


def test_save_model_adds_mdl_and_returns_the_path(tmp_path):
    model = nn.Sequential(nn.Linear(3, 2))
    path = md.save_model(model, tmp_path / "digits")
    assert path == str(tmp_path / "digits.mdl")
    assert md.load_model(path)[0].weight.shape == (2, 3)
    assert md.save_model(model, tmp_path / "kept.model") == str(tmp_path / "kept.model")


def test_export_onnx_adds_onnx_and_returns_the_path(tmp_path):
    pytest.importorskip("onnx")
    model = nn.Sequential(nn.Linear(3, 2))
    path = md.export_onnx(model, tmp_path / "digits", example_input=md.tensor(np.ones((1, 3),
                                                                                   np.float32)))
    assert path == str(tmp_path / "digits.onnx")
    reloaded = md.load_model(path)
    x = md.tensor(np.ones((4, 3), np.float32))
    np.testing.assert_allclose(reloaded(x).numpy(), model(x).numpy(), rtol=1e-6)
