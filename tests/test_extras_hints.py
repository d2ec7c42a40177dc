"""A missing optional package is named with the extra that brings it, and warnings from deep
inside fit point at the user's line."""

import importlib
import io
import sys

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.training import progress as progress_module
from minidl.training.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_no_tqdm_on_a_terminal_says_which_extra_brings_the_bar(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    monkeypatch.setattr(progress_module, "_said", set())  # as in a fresh process
    stream = Terminal()
    progress = Progress(True, 1, 2, stream=stream)
    progress.begin_epoch(0, 0)
    progress.end_epoch(0, 2, {"loss": 1.0})
    assert "pip install 'minidl[progress]'" in stream.getvalue()
    assert "epoch 1/1 - 2 steps" in stream.getvalue()


def test_no_cryptography_names_the_crypto_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(ImportError, match=r"pip install 'minidl\[crypto\]'"):
        md.save({"w": np.zeros(2)}, tmp_path / "x.mdl", key=b"k" * 32)


def test_minidl_testing_without_hypothesis_names_the_test_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    for name in [n for n in sys.modules if n.startswith("minidl.testing")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'minidl\[test\]'"):
        importlib.import_module("minidl.testing")


def test_a_skipped_checkpoint_is_reported_at_the_users_line(tmp_path):
    def run():
        md.manual_seed(0)
        model = nn.Linear(4, 3)
        md.fit(model, nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1),
               (np.ones((8, 4), np.float32), np.zeros(8, np.int64)), batch_size=4, epochs=2,
               progress=False, checkpoint=md.CheckpointConfig(tmp_path, save_every_steps=1,
                                                              max_to_keep=None))

    run()
    newest = md.latest_checkpoint(tmp_path, prefix="ckpt")
    with open(newest, "r+b") as file:
        file.seek(100)
        file.write(b"\xff" * 16)
    with pytest.warns(RuntimeWarning, match="skipping unusable checkpoint") as record:
        run()
    assert record[0].filename == __file__
