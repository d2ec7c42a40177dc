"""load_model spends only what the file justifies: a spec is checked against the tensor index
before any weight exists, modules are built without random init, the global RNG never moves,
and the weights are always verified."""

import time
import tracemalloc

import numpy as np
import pytest

import minidl as md
import minidl.io as mio
from minidl import nn
from minidl.testing.forging import rewrite_header


def saved_model(tmp_path, model=None):
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "m.mdl"
    md.save_model(model if model is not None else nn.Sequential(nn.Linear(3, 2)), path)
    return path


def with_spec(tmp_path, spec):
    """A small valid model file whose topology was replaced by ``spec``."""
    path = saved_model(tmp_path)
    rewrite_header(path, lambda tree: tree["metadata"].update(spec=spec))
    return path


def layer(type_name, **args):
    return {"type": type_name, "args": args, "children": []}


def sequential(*layers):
    return {"type": "Sequential", "args": {},
            "children": [[str(i), spec] for i, spec in enumerate(layers)]}


HOSTILE_SPECS = {
    "linear": sequential(layer("Linear", in_features=20000, out_features=20000, bias=True,
                               dtype="float32")),
    "conv": sequential(layer("Conv2d", in_channels=2048, out_channels=2048, kernel_size=11)),
    "embedding": sequential(layer("Embedding", num_embeddings=10 ** 8, embedding_dim=8)),
    "many": sequential(*[layer("Linear", in_features=1000, out_features=1000, bias=True,
                               dtype="float32")] * 1000),
    "batchnorm": sequential(layer("BatchNorm1d", num_features=10 ** 9)),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SPECS))
def test_a_spec_the_file_cannot_back_is_refused_cheaply(tmp_path, name):
    path = with_spec(tmp_path, HOSTILE_SPECS[name])
    assert path.stat().st_size < 100_000
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(mio.ModelSpecError, match="do not fit the topology"):
            md.load_model(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB for a {path.stat().st_size}-byte file"
    assert time.perf_counter() - start < 30  # generous: a guard against gigabyte-scale work


def test_a_tensor_of_the_wrong_shape_or_dtype_is_refused_before_reading(tmp_path):
    path = saved_model(tmp_path)
    rewrite_header(path, lambda tree: tree["metadata"]["spec"]["children"][0][1]["args"].update(
        dtype="float64"))
    with pytest.raises(mio.ModelSpecError, match="float32\\[2, 3\\] in the file, float64"):
        md.load_model(path)


@pytest.mark.parametrize("mmap", [False, True])
def test_load_model_leaves_the_global_rng_alone(tmp_path, mmap):
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Embedding(7, 3))
    path = saved_model(tmp_path, model)
    broken = with_spec(tmp_path / "b", HOSTILE_SPECS["linear"])  # built before the seed
    md.manual_seed(123)
    before = md.get_rng_state()
    loaded = md.load_model(path, mmap=mmap)
    assert md.get_rng_state() == before
    for name, array in model.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[name], array)
    with pytest.raises(mio.CheckpointError):
        md.load_model(broken)
    assert md.get_rng_state() == before


def test_load_model_with_mmap_verifies_and_gives_writable_private_weights(tmp_path):
    path = saved_model(tmp_path)
    original = path.read_bytes()
    loaded = md.load_model(path, mmap=True)
    weight = loaded.state_dict()["0.weight"]
    weight[...] = 7.0  # e.g. fine-tuning in place
    assert path.read_bytes() == original
    damaged = bytearray(original)
    damaged[-1] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(mio.ChecksumMismatchError):
        md.load_model(path, mmap=True)
    with pytest.raises(ValueError, match="always verifies"):
        md.load_model(path, verify=False)


def test_skip_init_builds_placeholders_that_take_no_memory():
    tracemalloc.start()
    try:
        with nn.init.skip_init():
            big = nn.Linear(50_000, 50_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 and big.weight.shape == (50_000, 50_000)
    assert not nn.init.init_skipped()
    built = nn.Linear(2, 2)  # outside the block: initialised as usual
    assert np.any(built.weight.numpy() != 0)
