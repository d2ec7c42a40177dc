"""Paths users give the file functions by habit: a name typed without its .mdl, an .onnx name
for save_model, a directory for a file, a file name for a checkpoint directory."""

import os

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.training import CheckpointConfig


def test_a_name_without_its_mdl_suffix_gets_a_hint_not_a_guess(tmp_path):
    md.save_model(nn.Linear(3, 2), tmp_path / "keras_model_05")
    typed = tmp_path / "keras_model_05"
    with pytest.raises(md.MissingFileError, match=r"did you mean .*keras_model_05\.mdl\?"):
        md.load_model(typed)
    with pytest.raises(md.MissingFileError) as plain:
        md.load_model(tmp_path / "other")
    assert "did you mean" not in str(plain.value)


def test_save_model_to_an_onnx_name_says_how_to_export(tmp_path):
    with pytest.raises(ValueError, match=r"md\.export_onnx\(model, .*x\.onnx.*example_input"):
        md.save_model(nn.Linear(3, 2), tmp_path / "x.onnx")
    assert os.listdir(tmp_path) == []


def test_save_model_and_save_to_a_directory_are_refused_by_name(tmp_path):
    (tmp_path / "existing_dir").mkdir()
    target = tmp_path / "existing_dir"
    with pytest.raises(IsADirectoryError, match=r"existing_dir: is a directory.*model\.mdl"):
        md.save_model(nn.Linear(3, 2), target)
    with pytest.raises(IsADirectoryError, match=r"existing_dir: is a directory") as error:
        md.save({"w": np.zeros(3)}, target)
    assert ".tmp" not in str(error.value)  # no internal temporary name
    assert sorted(os.listdir(tmp_path)) == ["existing_dir"] and not os.listdir(target)


def test_checkpoint_config_refuses_a_file_name_for_its_directory(tmp_path):
    with pytest.raises(ValueError, match=r"myModel\.dnn.*looks like a file name.*directory"):
        CheckpointConfig(tmp_path / "myModel.dnn")
    (tmp_path / "weights.mdl").write_bytes(b"")
    with pytest.raises(ValueError, match=r"weights\.mdl.*is a file"):
        CheckpointConfig(tmp_path / "weights.mdl")
    (tmp_path / "runs.v2").mkdir()
    assert CheckpointConfig(tmp_path / "runs.v2").directory == str(tmp_path / "runs.v2")
