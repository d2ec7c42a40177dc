"""Module.summary() and num_parameters()."""

import numpy as np

import minidl as md
from minidl import nn


def model():
    md.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(),
                         nn.Sequential(nn.Linear(128, 16), nn.ReLU()), nn.Linear(16, 10))


def test_num_parameters_counts_elements_and_respects_requires_grad():
    m = model()
    expected = 8 * 9 + 8 + 8 + 8 + 128 * 16 + 16 + 16 * 10 + 10
    assert m.num_parameters() == expected
    m[0].weight.requires_grad = False
    assert m.num_parameters(trainable_only=True) == expected - 72


def test_summary_lists_layers_with_output_shapes_and_totals_without_changing_the_model():
    m = model()
    m.train()
    before = {k: v.copy() for k, v in m.state_dict().items()}
    printed = []
    text = m.summary((2, 1, 8, 8), print_fn=printed.append)
    assert printed == [text] and m.training
    rows = {line.split()[0]: line for line in text.splitlines()}
    assert "(2, 8, 8, 8)" in rows["0"] and rows["0"].rstrip().endswith("80")
    assert "(2, 8, 4, 4)" in rows["3"]
    assert "(2, 16)" in rows["5.0"] and rows["5.0"].rstrip().endswith("2,064")
    assert "(2, 10)" in rows["6"]
    assert f"Total params: {m.num_parameters():,}" in text
    for k, v in m.state_dict().items():  # batch-norm statistics untouched by looking
        np.testing.assert_array_equal(v, before[k])
    assert "?" in m.summary(print_fn=None)
