"""``model_from_checkpoint``: what it says of a file that is not a fit checkpoint."""

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.training.checkpoint_model import model_from_checkpoint


@pytest.mark.parametrize("save", [
    lambda path: md.save_model(nn.Sequential(nn.Linear(2, 1)), path),
    lambda path: md.save({"w": np.zeros(2)}, path),
], ids=["model file", "values file"])
def test_a_file_that_is_not_a_checkpoint_is_named_so(tmp_path, save):
    save(tmp_path / "f.mdl")
    with pytest.raises(md.CheckpointError, match=r"f\.mdl.*is not a training checkpoint"):
        model_from_checkpoint(tmp_path / "f.mdl")
