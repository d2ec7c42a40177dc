"""What the command line and the file functions tell a user to do next: the option that reads
an encrypted file, the function that rebuilds a fit checkpoint's model, and that every command
the README names exists."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.cli import COMMANDS, main

README = Path(__file__).resolve().parents[2] / "README.md"


def test_an_encrypted_file_on_the_command_line_names_the_key_file_option(tmp_path, capsys):
    pytest.importorskip("cryptography")
    path = tmp_path / "secret.mdl"
    md.save({"w": np.zeros(3)}, path, key=b"k" * 32)
    assert main(["inspect", str(path)]) == 1
    assert "--key-file" in capsys.readouterr().err
    (tmp_path / "key").write_bytes(b"k" * 32)
    assert main(["inspect", "--key-file", str(tmp_path / "key"), str(path)]) == 0


def test_load_model_of_a_fit_checkpoint_names_the_function_that_rebuilds_it(tmp_path):
    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    md.fit(model, nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1),
           (np.ones((8, 4), np.float32), np.zeros(8, np.int64)), epochs=1, progress=False,
           checkpoint=tmp_path)
    path = md.latest_checkpoint(tmp_path)
    with pytest.raises(md.CheckpointError, match=r"md\.training\.model_from_checkpoint\(path\)"):
        md.load_model(path)
    rebuilt = md.training.model_from_checkpoint(path)  # the function the message names
    x = md.tensor(np.ones((2, 4), np.float32))
    assert np.array_equal(rebuilt(x).numpy(), model.eval()(x).numpy())


def test_every_command_the_readme_names_exists():
    text = README.read_text()
    named = set()
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        named.update(re.findall(r"^minidl ([a-z][a-z-]+)", block, flags=re.M))
    for group in re.findall(r"`minidl ([a-z][a-z/-]+)", text):  # `minidl a/b/c`, `minidl a ...`
        named.update(group.split("/"))
    assert named >= {"inspect", "verify", "diff", "export-onnx", "merge"}
    assert named <= set(COMMANDS), f"README names {sorted(named - set(COMMANDS))}"
    # ... and the command a user types lists each of them
    listed = subprocess.run([sys.executable, "-m", "minidl", "--help"], capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    for name in sorted(named):
        assert re.search(rf"^\s+{re.escape(name)}\s", listed.stdout, flags=re.M), name
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0
