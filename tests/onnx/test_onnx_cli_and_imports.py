"""The export-onnx command, and that importing minidl loads neither onnx nor onnxruntime."""

import subprocess
import sys

import numpy as np

import minidl as md
from minidl import nn
from minidl.cli import main

from onnx_checks import ATOL, RTOL, run_onnxruntime, validate


def test_export_onnx_command(tmp_path, capsys):
    md.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(4 * 4 * 4, 10)).eval()
    md.save_model(model, tmp_path / "digits.mdl")
    out = tmp_path / "digits.onnx"
    assert main(["export-onnx", str(tmp_path / "digits.mdl"), str(out),
                 "--input-shape", "1,1,8,8"]) == 0
    assert "digits.onnx" in capsys.readouterr().out
    validate(out)
    x = np.random.default_rng(0).standard_normal((3, 1, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run_onnxruntime(out, [x])[0], model(md.tensor(x)).numpy(),
                               rtol=RTOL, atol=ATOL)


def test_export_onnx_command_errors(tmp_path, capsys):
    assert main(["export-onnx", str(tmp_path / "none.mdl"), str(tmp_path / "o.onnx"),
                 "--input-shape", "1,2"]) == 1
    assert "none.mdl" in capsys.readouterr().err
    assert main(["export-onnx", "m.mdl", "o.onnx", "--input-shape", "1,x"]) == 2


def test_import_minidl_does_not_import_onnx():
    code = ("import sys, minidl, minidl.onnx, minidl.cli; "
            "print(sorted(m for m in ('onnx', 'onnxruntime') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
