"""The added layers are in the closed registry: save_model/load_model rebuild each from the
file alone with the same configuration and weights; and the containers' PyTorch-style item
assignment, deletion, insertion and slicing."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn

rng = np.random.default_rng(0)

LAYERS = [
    (lambda: nn.LeakyReLU(0.3), (2, 5)), (lambda: nn.ELU(0.4), (2, 5)),
    (lambda: nn.Softplus(2.0, 5.0), (2, 5)), (nn.SiLU, (2, 5)), (nn.Mish, (2, 5)),
    (nn.Hardswish, (2, 5)), (nn.Hardsigmoid, (2, 5)), (lambda: nn.PReLU(3, 0.1), (2, 3, 4)),
    (lambda: nn.GroupNorm(3, 6, eps=1e-3), (2, 6, 4)),
    (lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True), (2, 3, 5)),
    (lambda: nn.InstanceNorm2d(3, momentum=None), (2, 3, 4, 4)),
    (lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=1, bias=False), (2, 3, 9)),
    (lambda: nn.ConvTranspose2d(2, 4, (3, 2), stride=2, output_padding=1, groups=2,
                                dilation=(1, 2)), (2, 2, 3, 3)),
    (lambda: nn.MaxPool1d(3, 2, 1, ceil_mode=True), (2, 3, 9)),
    (lambda: nn.AvgPool1d(3, count_include_pad=False), (2, 3, 9)),
    (lambda: nn.AdaptiveMaxPool2d((3, 2)), (2, 3, 7, 5)),
    (lambda: nn.Upsample(size=(5, 7), mode="bilinear", align_corners=True), (2, 3, 3, 4)),
    (lambda: nn.Upsample(scale_factor=(2, 3)), (2, 3, 3, 4)),
]


@pytest.mark.parametrize("index", range(len(LAYERS)))
def test_each_added_layer_survives_save_model_and_load_model(index, tmp_path):
    build, shape = LAYERS[index]
    md.manual_seed(index)
    layer = build()
    for parameter in layer.parameters():  # not the default values
        parameter.data[...] = rng.standard_normal(parameter.shape).astype(parameter.dtype)
    layer.eval()
    md.save_model(layer, tmp_path / "layer.mdl")
    loaded = md.load_model(tmp_path / "layer.mdl")
    assert type(loaded) is type(layer) and loaded.get_config() == layer.get_config()
    for (name, value), expected in zip(loaded.state_dict().items(), layer.state_dict().values()):
        np.testing.assert_array_equal(value, expected, err_msg=name)
    x = md.tensor(rng.standard_normal(shape).astype(np.float32))
    loaded.eval()
    np.testing.assert_array_equal(loaded(x).numpy(), layer(x).numpy())


def named(container):
    return [(name, type(child).__name__) for name, child in container.named_children()]


def test_sequential_item_assignment_deletion_insertion_and_slicing():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    model[1] = nn.SiLU()
    model[-1] = nn.Linear(4, 3)
    assert named(model) == [("0", "Linear"), ("1", "SiLU"), ("2", "Linear")]
    assert model(md.zeros(2, 4)).shape == (2, 3)
    head = model[1:]  # a slice keeps the children's names, as PyTorch
    assert isinstance(head, nn.Sequential) and list(head.state_dict()) == ["2.weight", "2.bias"]
    model.append(nn.Softmax())
    model.insert(0, nn.Identity())
    assert [n for n, _ in named(model)] == ["0", "1", "2", "3", "4"]
    assert type(model[0]).__name__ == "Identity" and type(model[4]).__name__ == "Softmax"
    del model[0]
    assert len(model) == 4 and type(model[0]).__name__ == "Linear"
    with pytest.raises(IndexError, match="out of range"):
        model[7] = nn.ReLU()
    with pytest.raises(TypeError, match="Module"):
        model[0] = "not a module"


def test_module_list_and_dict_assignment_keep_parameters_registered():
    blocks = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    blocks[0] = nn.Linear(2, 3)
    assert blocks.state_dict()["0.weight"].shape == (3, 2)
    blocks += [nn.ReLU()]
    blocks.insert(1, nn.Tanh())
    del blocks[0]
    assert named(blocks) == [("0", "Tanh"), ("1", "Linear"), ("2", "ReLU")]
    assert isinstance(blocks[1:], nn.ModuleList) and len(blocks[1:]) == 2
    heads = nn.ModuleDict({"a": nn.Linear(2, 2)})
    heads["b"] = nn.Linear(2, 1)
    heads.update({"c": nn.ReLU()})
    assert "b" in heads and list(heads) == ["a", "b", "c"]
    del heads["a"]
    assert heads.pop("c").__class__.__name__ == "ReLU"
    assert list(heads.state_dict()) == ["b.weight", "b.bias"]
