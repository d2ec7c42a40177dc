"""The minidl command line, called in-process through main() and as `python -m minidl`."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import minidl.io as mio
from minidl.cli import main


@pytest.fixture
def files(tmp_path):
    a, b = tmp_path / "a.mdl", tmp_path / "b.mdl"
    value = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": 1, "cfg": {"lr": 0.1}}
    mio.save(value, a)
    value.update(w=value["w"] + np.float32(0.5), step=2, extra=np.zeros(1))
    mio.save(value, b)
    return a, b


def test_inspect_lists_kind_version_tensors_and_metadata(files, capsys):
    assert main(["inspect", str(files[0])]) == 0
    out = capsys.readouterr().out
    assert "kind:      values" in out and "version:   2.0" in out
    assert "w" in out and "float32" in out and "(2, 3)" in out
    assert '"step": 1' in out


def test_inspect_json(files, capsys):
    assert main(["inspect", "--json", str(files[0])]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tensors"] == [{"name": "w", "dtype": "float32", "shape": [2, 3], "bytes": 24}]
    assert summary["metadata"]["value"]["w"] == "<tensor w>"


def test_inspect_missing_file(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "none.mdl")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_verify_sound_file(files, capsys):
    assert main(["verify", str(files[0])]) == 0
    assert "OK" in capsys.readouterr().out


def test_verify_damaged_file_names_the_tensor(files, capsys):
    data = bytearray(files[0].read_bytes())
    data[-1] ^= 0x10
    files[0].write_bytes(bytes(data))
    assert main(["verify", str(files[0])]) == 1
    err = capsys.readouterr().err
    assert "checksum mismatch in tensor 'w'" in err and str(files[0]) in err


def test_verify_truncated_file(files, capsys):
    files[0].write_bytes(files[0].read_bytes()[:100])
    assert main(["verify", str(files[0])]) == 1
    assert "FAILED" in capsys.readouterr().err


def test_verify_encrypted_file_with_key_file(tmp_path, capsys):
    pytest.importorskip("cryptography")
    key = tmp_path / "key.bin"
    key.write_bytes(b"k" * 32)
    mio.save({"w": np.ones(3)}, tmp_path / "e.mdl", key=b"k" * 32)
    assert main(["verify", str(tmp_path / "e.mdl")]) == 1
    assert "encrypted" in capsys.readouterr().err
    assert main(["verify", "--key-file", str(key), str(tmp_path / "e.mdl")]) == 0


def test_diff_reports_tensors_and_metadata(files, capsys):
    assert main(["diff", str(files[0]), str(files[1])]) == 1
    out = capsys.readouterr().out
    assert "tensor w: max abs diff 0.5" in out
    assert "tensor extra: only in B" in out
    assert "metadata /value/step: 1 != 2" in out
    assert "cfg" not in out


def test_diff_identical(files, capsys):
    assert main(["diff", str(files[0]), str(files[0])]) == 0
    assert "identical" in capsys.readouterr().out


def test_diff_shape_and_nan_handling(tmp_path, capsys):
    mio.save({"x": np.array([np.nan, 1.0]), "y": np.zeros(2)}, tmp_path / "a.mdl")
    mio.save({"x": np.array([np.nan, 1.0]), "y": np.zeros(3)}, tmp_path / "b.mdl")
    assert main(["diff", str(tmp_path / "a.mdl"), str(tmp_path / "b.mdl")]) == 1
    out = capsys.readouterr().out
    assert "tensor y: float64[2] != float64[3]" in out and "tensor x" not in out


def test_diff_unreadable_file(files, tmp_path, capsys):
    assert main(["diff", str(files[0]), str(tmp_path / "none.mdl")]) == 2


def test_unknown_command_exits_with_usage():
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_python_dash_m_minidl(files):
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    ok = subprocess.run([sys.executable, "-m", "minidl", "verify", str(files[0])],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    files[0].write_bytes(b"garbage")
    bad = subprocess.run([sys.executable, "-m", "minidl", "verify", str(files[0])],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1 and "not a minidl file" in bad.stderr


def test_inspect_and_diff_escape_terminal_sequences_in_names(tmp_path, capsys):
    hostile = "w\x1b]0;pwned\x07\x1b[2J\u202e"
    a, b = tmp_path / "a.mdl", tmp_path / "b.mdl"
    mio.save({hostile: np.zeros(2, np.float32)}, a)
    mio.save({hostile: np.ones(2, np.float32)}, b)
    assert main(["inspect", str(a)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b]0;pwned\\x07" in out
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b" in out
