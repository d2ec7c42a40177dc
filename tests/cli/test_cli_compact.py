"""`minidl inspect` / `minidl diff` print compactly by default (`--full` prints everything), and
`minidl --version`."""

import subprocess
import sys

import numpy as np
import pytest

import minidl as md
from minidl.cli import main


@pytest.fixture
def long_metadata(tmp_path):
    a, b = tmp_path / "a.mdl", tmp_path / "b.mdl"
    losses = [1.0 / (i + 1) for i in range(1000)]
    md.save({"losses": losses, "w": np.zeros((3, 4), np.float32), "lr": 0.1}, a)
    changed = list(losses)
    for i in (3, 50, 700, 999):
        changed[i] += 1.0
    md.save({"losses": changed, "w": np.ones((3, 4), np.float32), "lr": 0.1}, b)
    return a, b


def test_inspect_summarises_long_lists_and_full_prints_them(long_metadata, capsys):
    assert main(["inspect", str(long_metadata[0])]) == 0
    compact = capsys.readouterr().out
    assert '"losses": [1000 numbers, 0.001 .. 1]' in compact
    assert len(compact.splitlines()) < 25
    assert main(["inspect", "--full", str(long_metadata[0])]) == 0
    assert len(capsys.readouterr().out.splitlines()) > 1000


def test_diff_groups_the_items_of_one_list_and_full_lists_each(long_metadata, capsys):
    a, b = map(str, long_metadata)
    assert main(["diff", a, b]) == 1
    compact = capsys.readouterr().out.splitlines()
    assert "metadata /value/losses: 4 items differ ([3]: 0.25 != 1.25, [50]: " in compact[0]
    assert compact[1] == "tensor w: max abs diff 1"
    assert len(compact) == 2
    assert main(["diff", "--full", a, b]) == 1
    full = capsys.readouterr().out.splitlines()
    assert "metadata /value/losses/3: 0.25 != 1.25" in full and len(full) == 5


def test_version_is_the_package_version():
    result = subprocess.run([sys.executable, "-m", "minidl", "--version"], capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == f"minidl {md.__version__}"


def test_export_onnx_takes_the_model_part_of_a_fit_checkpoint(tmp_path, capsys):
    onnxruntime = pytest.importorskip("onnxruntime")
    from minidl import nn, optim
    from minidl.datasets import load_digits

    md.manual_seed(0)
    x, y = load_digits("train")
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 8 * 8, 10))
    md.fit(model, nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.05), (x[:64], y[:64]),
           epochs=1, progress=False, checkpoint=md.CheckpointConfig(tmp_path / "run"))
    checkpoint = md.latest_checkpoint(tmp_path / "run")
    out = tmp_path / "model.onnx"
    assert main(["export-onnx", checkpoint, str(out), "--input-shape", "1,1,8,8"]) == 0
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    theirs = session.run(None, {session.get_inputs()[0].name: x[:5]})[0]
    model.eval()
    np.testing.assert_allclose(theirs, model(md.tensor(x[:5])).numpy(), rtol=1e-4, atol=1e-5)
    md.save({"w": np.zeros(2)}, tmp_path / "values.mdl")
    assert main(["export-onnx", str(tmp_path / "values.mdl"), str(out),
                 "--input-shape", "1,1,8,8"]) == 1
    assert "not a model" in capsys.readouterr().err
