"""The PyTorch-shaped device surface on the CUDA backend: ``Module.cuda()``/``cpu()`` (gradients
moving with the parameters), ``Tensor.is_cuda``, ``x.cuda(i)``, ``x.to(other_tensor)``,
``x.to(dtype)``, ``non_blocking=``, ``md.device``, ``map_location`` as a dict or a callable, and
``md.cuda.set_device``/``current_device``/``manual_seed``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from cuda_helpers import requires_cuda  # noqa: E402

import minidl as md  # noqa: E402
from minidl import nn  # noqa: E402

pytestmark = requires_cuda
GPU = "cuda:0"


def model_with_grads():
    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    model(md.ones(4, 3) * md.arange(4, dtype=md.float32).reshape(4, 1)).sum().backward()
    return model


def test_module_cuda_and_cpu_move_parameters_buffers_and_gradients():
    model = model_with_grads()
    expected = {name: (p.numpy(), p.grad.numpy()) for name, p in model.named_parameters()}
    assert model.cuda() is model
    for name, param in model.named_parameters():
        assert param.is_cuda and param.grad.device == GPU, name
        np.testing.assert_array_equal(param.grad.numpy(), expected[name][1])
    assert all(buffer.device == GPU for buffer in model.buffers())
    model.cpu()
    for name, param in model.named_parameters():
        assert not param.is_cuda and param.grad.device == "cpu", name
        np.testing.assert_array_equal(param.numpy(), expected[name][0])
        np.testing.assert_array_equal(param.grad.numpy(), expected[name][1])


def test_module_to_casts_the_gradients_with_the_parameters():
    model = model_with_grads().to(GPU, md.float64)
    assert all(p.grad.dtype == np.float64 and p.grad.device == GPU for p in model.parameters())
    model.to(md.zeros(1, dtype=md.int64))  # an integer tensor gives its device, not its dtype
    assert all(p.dtype == np.float64 and p.device == "cpu" for p in model.parameters())


def test_tensor_cuda_takes_an_index_and_is_cuda_says_where_it_is():
    x = md.ones(2)
    assert not x.is_cuda
    assert x.cuda(0).device == GPU and x.cuda().is_cuda and x.cuda(GPU).is_cuda
    with pytest.raises(ValueError, match="must be a CUDA device"):
        x.cuda("cpu")


def test_to_another_tensor_takes_its_device_and_dtype():
    other = md.zeros(1, dtype=md.float64).to(GPU)
    moved = md.tensor([1.5, 2.5], dtype=md.float32).to(other, non_blocking=True)
    assert moved.device == GPU and moved.dtype == np.float64
    np.testing.assert_array_equal(moved.numpy(), [1.5, 2.5])
    assert md.ones(2).to(md.float64).dtype == np.float64  # a dtype in the device's place
    with pytest.raises(TypeError, match="two dtypes"):
        md.ones(2).to(md.float64, md.float32)


def test_md_device_is_the_canonical_device_name_with_type_and_index():
    gpu = md.device("cuda", 0)
    assert gpu == GPU == md.device("cuda") and gpu.type == "cuda" and gpu.index == 0
    assert md.device("cpu").index is None and repr(gpu) == "device(type='cuda', index=0)"
    assert md.ones(2).to(gpu).device == GPU
    with pytest.raises(ValueError, match="already has an index"):
        md.device("cuda:0", 1)
    with pytest.raises(ValueError, match="unknown device"):
        md.device("tpu")


def test_set_device_changes_what_a_bare_kind_means():
    assert md.cuda.current_device() == 0
    md.cuda.set_device(GPU)
    assert md.cuda.current_device() == 0 and md.ones(1).cuda().device == GPU
    with pytest.raises(RuntimeError, match="not available"):
        md.cuda.set_device(md.cuda.device_count())
    # The mechanism, on a backend with any number of devices: "opaque" follows the current one.
    import opaque_backend
    from minidl.backend import current_index, set_current_index
    opaque_backend.register()
    try:
        set_current_index("opaque", 3)
        assert md.ones(1).to("opaque").device == "opaque:3"
    finally:
        set_current_index("opaque", 0)
    assert current_index("opaque") == 0 and md.ones(1).to("opaque").device == "opaque:0"


def test_cuda_manual_seed_seeds_the_one_generator_every_device_draws_from():
    md.cuda.manual_seed(11)
    on_gpu = nn.functional.dropout(md.ones(3, 4).to(GPU), 0.5)
    md.manual_seed(11)
    on_cpu = nn.functional.dropout(md.ones(3, 4), 0.5)
    np.testing.assert_array_equal(on_gpu.numpy(), on_cpu.numpy())
    md.cuda.manual_seed_all(5)
    assert md.initial_seed() == 5


def test_map_location_as_a_dict_or_a_callable(tmp_path):
    path = tmp_path / "values.mdl"
    md.save({"w": np.arange(3, dtype=np.float32), "meta": {"b": [np.ones(2)]}}, path)
    loaded = md.load(path, map_location={"cpu": GPU})
    assert loaded["w"].device == GPU and loaded["meta"]["b"][0].device == GPU
    unmatched = md.load(path, map_location={"cuda:1": GPU})  # file arrays are on "cpu"
    assert isinstance(unmatched["w"], np.ndarray)
    doubled = md.load(path, map_location=lambda array, location: (array * 2, location))
    np.testing.assert_array_equal(doubled["w"][0], [0, 2, 4])
    assert doubled["w"][1] == "cpu"
    with pytest.raises(ValueError, match="entry 'cpu'"):
        md.load(path, map_location={"cpu": "gpu:0"})
    with pytest.raises(TypeError, match="map_location must be"):
        md.load(path, map_location=0)


def test_a_numpy_too_new_for_numba_cuda_is_named_with_the_fix(monkeypatch):
    # numba-cuda registers np.row_stack when it compiles its first kernel; NumPy 2.5 removed it,
    # and on such a machine every launch failed with numba's AttributeError. The check turns
    # that into one error that names NumPy and the way out.
    from minidl.backend.cuda_availability import check_numpy_supported

    def registering(name):
        imported.append(name)
        raise AttributeError("module 'numpy' has no attribute 'row_stack'")

    imported = []
    if hasattr(np, "row_stack"):
        check_numpy_supported(registering)  # a NumPy that still has it: nothing is imported
        assert imported == []
        monkeypatch.delattr(np, "row_stack")
    with pytest.raises(RuntimeError, match=r"NumPy .*row_stack.*pip install 'numpy<2.5'"):
        check_numpy_supported(registering)
    assert imported == ["numba.cuda.np.arrayobj"]

    def other_failure(name):
        raise AttributeError("something else")

    with pytest.raises(AttributeError, match="something else"):
        check_numpy_supported(other_failure)
    check_numpy_supported(lambda name: None)  # a numba-cuda that guards the registration
