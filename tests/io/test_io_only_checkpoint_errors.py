"""Whatever a file holds, readers raise ``CheckpointError`` and nothing else: binary map keys,
misleading names, special files and non-minidl content included."""

import os
import struct
import threading

import numpy as np
import pytest

import minidl as md
import minidl.io as mio
from io_file_crafting import craft, entry, values_header
from minidl import nn
from minidl.cli import main
from minidl.io.header import TensorRef



def bytes_key_files():
    """Three files whose msgpack maps use a bin key: in the header, an entry, the metadata."""
    data = struct.pack("<4f", 1, 2, 3, 4)
    in_header = values_header({"w": TensorRef("w")}, [entry("w", "float32", [4], 0, data)])
    in_header[b"kind"] = "values"
    bad_entry = entry("w", "float32", [4], 0, data)
    bad_entry[b"name"] = "w"
    in_entry = values_header({"w": TensorRef("w")}, [bad_entry])
    in_metadata = values_header({"w": TensorRef("w"), b"note": 1},
                                [entry("w", "float32", [4], 0, data)])
    return {"header": craft(in_header, data), "entry": craft(in_entry, data),
            "metadata": craft(in_metadata, data)}


@pytest.mark.parametrize("where", ["header", "entry", "metadata"])
@pytest.mark.parametrize("reader", [
    lambda p: mio.load(p), lambda p: mio.load(p, mmap=True), lambda p: mio.read_header(p),
    lambda p: mio.verify_file(p), lambda p: md.load_model(p)])
def test_binary_map_keys_are_a_checkpoint_error(tmp_path, where, reader):
    path = tmp_path / "f.mdl"
    path.write_bytes(bytes_key_files()[where])
    with pytest.raises(mio.CorruptFileError, match="not a string"):
        reader(path)


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_cli_reports_binary_map_keys_without_a_traceback(tmp_path, capsys, command):
    path = tmp_path / "f.mdl"
    path.write_bytes(bytes_key_files()["metadata"])
    assert main([command, str(path)]) == 1
    assert "not a string" in capsys.readouterr().err


def _model_file(tmp_path, name="m.mdl"):
    model = nn.Sequential(nn.Linear(3, 2))
    path = tmp_path / name
    md.save_model(model, path)
    return model, path


def test_a_minidl_model_named_onnx_loads_as_minidl(tmp_path):
    # save_model refuses an .onnx name (it would mislead), but a minidl file renamed so by hand
    # is still recognised by its content, not its suffix.
    model, saved = _model_file(tmp_path)
    path = saved.rename(tmp_path / "model.onnx")
    loaded = md.load_model(path)
    np.testing.assert_array_equal(loaded.state_dict()["0.weight"], model.state_dict()["0.weight"])


@pytest.mark.parametrize("first_byte", [b"\x08", b"\x00", b"M"])
def test_a_damaged_first_byte_is_a_damaged_minidl_file(tmp_path, first_byte):
    _, path = _model_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[0:1] = first_byte
    path.write_bytes(bytes(data))
    with pytest.raises(mio.NotAMinidlFileError):
        md.load_model(path)


def test_onnx_import_errors_are_checkpoint_errors(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x08\x07" + os.urandom(200))
    with pytest.raises(mio.CheckpointError, match="junk.onnx"):
        md.load_model(path)


def _runs_briefly(function, fifo):
    """Run ``function`` in a thread; if it blocks on the FIFO, unblock it and fail."""
    outcome = {}

    def target():
        try:
            function()
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():  # a blocked open(): give it a writer so the thread can end
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(5)
        pytest.fail("reading a FIFO blocked")
    return outcome.get("error")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("reader", [mio.load, mio.read_header, md.load_model,
                                    lambda p: mio.load(p, mmap=True)])
def test_a_fifo_is_refused_without_blocking(tmp_path, reader):
    fifo = tmp_path / "f.mdl"
    os.mkfifo(fifo)
    error = _runs_briefly(lambda: reader(fifo), fifo)
    assert isinstance(error, mio.CheckpointError) and "not a regular file" in str(error)


def test_a_device_is_refused(tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("needs /dev/zero")
    with pytest.raises(mio.NotAMinidlFileError, match="not a regular file"):
        mio.load("/dev/zero")
