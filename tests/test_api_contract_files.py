"""The data, file, checkpoint, error and command-line snippets of the public API page run as
written (the tensor/module/optimizer snippets are in test_api_contract.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim


def api_model():
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(8 * 4 * 4, 10),
    )


@pytest.fixture
def images_labels():
    rng = np.random.default_rng(0)
    return rng.random((64, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 64)


def test_data_reader_snippet(images_labels):
    from minidl.data import ArrayDataset, DataReader
    X, y = images_labels
    reader = DataReader(ArrayDataset(X, y), batch_size=32, shuffle=True, seed=0, drop_last=False)
    for xb, yb in reader:
        assert xb.shape == (32, 1, 8, 8)
        break
    xb, yb = reader.next_batch()
    assert reader.epoch == 1 and reader.position == 0
    s = reader.state_dict()
    reader.load_state_dict(s)


def test_data_like_pytorch_snippet(images_labels):
    from minidl.data import Dataset, TensorDataset, DataLoader, random_split
    X, y = images_labels
    loader = DataLoader(TensorDataset(md.tensor(X), md.tensor(y)), batch_size=32, shuffle=True,
                        seed=0)
    xb, yb = loader.next_batch()
    assert isinstance(xb, md.Tensor) and xb.shape == (32, 1, 8, 8) and yb.dtype == np.int64
    s = loader.state_dict()
    expected = loader.next_batch()[1].numpy()
    loader.load_state_dict(s)
    np.testing.assert_array_equal(loader.next_batch()[1].numpy(), expected)
    train, val = random_split(TensorDataset(md.tensor(X), md.tensor(y)), [48, 16])
    assert issubclass(type(train), Dataset) and len(val) == 16


def test_streaming_snippets(tmp_path):
    from minidl.data import CSVReader, DataReader, NpyDataset
    path = tmp_path / "train.csv"
    path.write_text("a,b,label\n" + "".join(f"{i},{i * 2},{i % 3}\n" for i in range(100)))
    reader = CSVReader(str(path), batch_size=64, label_column=-1, header=True,
                       shuffle_buffer=1024, seed=0)
    features, labels = reader.next_batch()
    assert features.dtype == np.float32 and labels.dtype == np.int64
    np.save(tmp_path / "x.npy", np.zeros((10, 3), np.float32))
    np.save(tmp_path / "y.npy", np.arange(10))
    ds = NpyDataset(str(tmp_path / "x.npy"), str(tmp_path / "y.npy"))
    xb, yb = DataReader(ds, batch_size=4).next_batch()
    assert xb.shape == (4, 3)


def test_values_models_and_onnx_snippet(tmp_path, images_labels, monkeypatch):
    images, _ = images_labels
    monkeypatch.chdir(tmp_path)
    md.save({"w": np.zeros(3, np.float32), "step": 7, "note": "hi"}, "values.mdl")
    obj = md.load("values.mdl")
    assert obj["step"] == 7 and obj["note"] == "hi" and obj["w"].dtype == np.float32
    lazy = md.load("values.mdl", mmap=True)
    np.testing.assert_array_equal(lazy["w"], obj["w"])

    md.manual_seed(0)
    model = api_model()
    model.eval()
    md.save_model(model, "digits.mdl")
    m2 = md.load_model("digits.mdl")
    m2.eval()
    x = md.tensor(images[:5])
    np.testing.assert_array_equal(m2(x).numpy(), model(x).numpy())

    md.export_onnx(model, "digits.onnx", example_input=md.tensor(images[:1]))
    m3 = md.load_model("digits.onnx")
    np.testing.assert_allclose(m3(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_checkpoint_and_manager_snippet(tmp_path, images_labels):
    from minidl.data import ArrayDataset, DataReader
    images, labels = images_labels
    md.manual_seed(0)
    model = api_model()
    opt = optim.Adam(model.parameters(), lr=1e-3)
    sched = optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
    reader = DataReader(ArrayDataset(images, labels), batch_size=16, shuffle=True, seed=0)

    ckpt = md.Checkpoint(model=model, optimizer=opt, scheduler=sched, reader=reader)
    ckpt.save(str(tmp_path / "run.ckpt"), step=120, metadata={"val_loss": 0.31})
    info = ckpt.restore(str(tmp_path / "run.ckpt"))
    assert info.step == 120 and info.metadata == {"val_loss": 0.31}

    manager = md.CheckpointManager(
        ckpt, str(tmp_path / "runs" / "digits"), prefix="cnn",
        max_to_keep=3, keep_every_n_minutes=None, save_every_steps=5, save_every_seconds=None,
        monitor=None, mode="min", keep_best=None, async_save=False,
    )
    start = manager.restore_latest() or 0
    assert start == 0
    for step in range(start, 20):
        xb, yb = reader.next_batch()
        loss = nn.functional.cross_entropy(model(md.tensor(xb)), md.tensor(yb))
        opt.zero_grad(); loss.backward(); opt.step(); sched.step()
        manager.maybe_save(step + 1, metrics={"loss": float(loss.item())})
    path = manager.save(20)
    manager.wait()
    assert manager.latest == path and len(manager.checkpoints) <= 3
    assert manager.checkpoints == sorted(manager.checkpoints)


def test_every_file_problem_is_a_checkpoint_error(tmp_path):
    bad = tmp_path / "bad.mdl"
    bad.write_bytes(b"not a minidl file at all")
    for call in (lambda: md.load(str(bad)), lambda: md.load_model(str(bad)),
                 lambda: md.load(str(tmp_path / "missing.mdl"))):
        with pytest.raises(md.CheckpointError, match="bad.mdl|missing.mdl"):
            call()


def test_command_line_snippet(tmp_path):
    md.manual_seed(0)
    model = api_model()
    md.save_model(model, str(tmp_path / "digits.mdl"))
    md.save_model(model, str(tmp_path / "copy.mdl"))

    def minidl(*args):
        return subprocess.run([sys.executable, "-m", "minidl", *args], capture_output=True,
                              text=True, cwd=tmp_path)

    inspect = minidl("inspect", "digits.mdl")
    assert inspect.returncode == 0 and "0.weight" in inspect.stdout
    assert minidl("verify", "digits.mdl").returncode == 0
    assert minidl("diff", "digits.mdl", "copy.mdl").returncode == 0
    exported = minidl("export-onnx", "digits.mdl", "digits.onnx", "--input-shape", "1,1,8,8")
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "digits.onnx").exists()
    raw = bytearray((tmp_path / "copy.mdl").read_bytes())
    raw[-3] ^= 0xFF
    (tmp_path / "copy.mdl").write_bytes(bytes(raw))
    failed = minidl("verify", "copy.mdl")
    assert failed.returncode != 0 and "copy.mdl" in failed.stderr
