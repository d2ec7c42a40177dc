"""Module semantics: registration, naming, modes, state_dict layout and strict loading."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.nn import functional as F


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(8 * 4 * 4, 10),
    )


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.norm = nn.LayerNorm(4)
        self.register_buffer("steps", md.tensor(np.zeros((), np.int64)))
        self.register_buffer("scratch", md.tensor(np.zeros(2)), persistent=False)
        self.scale = nn.Parameter(np.ones(1, np.float32))
        self.not_a_parameter = md.tensor(np.ones(1))

    def forward(self, x):
        return self.norm(self.fc(x)) * self.scale


def test_sequential_children_are_named_by_position():
    model = small_cnn()
    assert [name for name, _ in model.named_children()] == [str(i) for i in range(7)]
    assert isinstance(model[1], nn.BatchNorm2d) and len(model) == 7


def test_state_dict_names_and_shapes_follow_pytorch():
    sd = small_cnn().state_dict()
    assert list(sd) == [
        "0.weight", "0.bias",
        "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked",
        "6.weight", "6.bias",
    ]
    assert sd["0.weight"].shape == (8, 1, 3, 3)
    assert sd["6.weight"].shape == (10, 128)
    assert sd["1.num_batches_tracked"].dtype == np.int64 and sd["1.num_batches_tracked"].shape == ()
    assert all(isinstance(v, np.ndarray) for v in sd.values())


def test_parameters_buffers_and_children_of_a_custom_module():
    block = Block()
    # Own parameters first, then each child's, as PyTorch orders them.
    assert [n for n, _ in block.named_parameters()] == ["scale", "fc.weight", "fc.bias",
                                                       "norm.weight", "norm.bias"]
    assert [n for n, _ in block.named_buffers()] == ["steps", "scratch"]
    assert "scratch" not in block.state_dict()  # non-persistent buffers are not saved
    assert "steps" in block.state_dict()
    assert "not_a_parameter" not in dict(block.named_parameters())
    assert [n for n, _ in block.named_children()] == ["fc", "norm"]
    assert all(p.requires_grad for p in block.parameters())


def test_shared_parameters_are_listed_once():
    fc = nn.Linear(2, 2)
    model = nn.Sequential(fc, nn.ReLU(), fc)
    assert len(list(model.parameters())) == 2


def test_train_and_eval_reach_every_descendant():
    model = nn.Sequential(small_cnn(), nn.Sequential(nn.Dropout(0.5)))
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    assert model.train(False) is model and not model[1][0].training


def test_eval_mode_changes_dropout_and_batch_norm():
    md.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(3), nn.Dropout(0.5))
    x = md.tensor(np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32))
    model(x)
    assert model[0].num_batches_tracked.item() == 1
    model.eval()
    out = model(x)
    expected = (x.numpy() - model[0].running_mean.numpy()) / np.sqrt(
        model[0].running_var.numpy() + 1e-5)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert model[0].num_batches_tracked.item() == 1


def test_zero_grad_clears_parameter_gradients():
    model = nn.Linear(3, 2)
    model(md.tensor(np.ones((1, 3), np.float32))).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_state_dict_round_trip_into_a_fresh_model():
    md.manual_seed(1)
    source = small_cnn()
    source.train()
    source(md.tensor(np.ones((2, 1, 8, 8), np.float32)))  # move the running statistics
    md.manual_seed(2)
    target = small_cnn()
    result = target.load_state_dict({k: v.copy() for k, v in source.state_dict().items()})
    assert result.missing_keys == [] and result.unexpected_keys == []
    for (name, a), (_, b) in zip(source.state_dict().items(), target.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=name)
    x = md.tensor(np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32))
    source.eval(), target.eval()
    np.testing.assert_array_equal(source(x).numpy(), target(x).numpy())


def snapshot(model):
    return {k: v.copy() for k, v in model.state_dict().items()}


def test_strict_load_lists_missing_unexpected_and_misshaped_names_and_changes_nothing():
    model = small_cnn()
    before = snapshot(model)
    bad = snapshot(model)
    del bad["1.running_var"]
    bad["7.weight"] = np.zeros(3, np.float32)
    bad["0.weight"] = np.zeros((8, 1, 5, 5), np.float32) + 7
    bad["6.bias"] = bad["6.bias"] + 1  # a correct entry that must not be copied either
    with pytest.raises((ValueError, RuntimeError)) as info:
        model.load_state_dict(bad)
    message = str(info.value)
    for name in ("1.running_var", "7.weight", "0.weight", "(8, 1, 5, 5)", "(8, 1, 3, 3)"):
        assert name in message
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_non_strict_load_reports_names_but_copies_the_matching_ones():
    model = nn.Linear(2, 3)
    result = model.load_state_dict({"weight": np.zeros((3, 2), np.float32), "extra": 1},
                                   strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]
    np.testing.assert_array_equal(model.weight.numpy(), 0)


def test_non_strict_load_still_rejects_wrong_shapes():
    model = nn.Linear(2, 3)
    with pytest.raises((ValueError, RuntimeError), match="weight"):
        model.load_state_dict({"weight": np.zeros((2, 3), np.float32)}, strict=False)


def test_load_state_dict_accepts_tensors_and_keeps_parameter_identity():
    model = nn.Linear(2, 3)
    weight = model.weight
    model.load_state_dict({"weight": md.tensor(np.ones((3, 2), np.float32)),
                           "bias": md.tensor(np.ones(3, np.float32))})
    assert model.weight is weight  # optimizers hold on to this object
    np.testing.assert_array_equal(model.weight.numpy(), 1)


def test_state_dict_shares_storage_with_the_parameters():
    model = nn.Linear(2, 3)
    sd = model.state_dict()
    with md.no_grad():
        model.weight.data[...] = 5
    np.testing.assert_array_equal(sd["weight"], 5)


def test_assigning_none_to_a_parameter_and_replacing_a_child():
    model = nn.Sequential(nn.Linear(2, 2))
    model.add_module("1", nn.ReLU())
    assert [n for n, _ in model.named_children()] == ["0", "1"]
    model.fc = nn.Linear(2, 2)
    model.fc = 3  # a plain value replaces the child registration
    assert "fc" not in dict(model.named_children())


def test_module_without_super_init_is_reported():
    class Broken(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(1, 1)

    with pytest.raises(AttributeError, match="super"):
        Broken()


def test_batch_norm_momentum_none_is_a_cumulative_average():
    bn = nn.BatchNorm1d(2, momentum=None)
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((5, 2)).astype(np.float32) for _ in range(3)]
    for b in batches:
        bn(md.tensor(b))
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean([b.mean(0) for b in batches], 0),
                               rtol=1e-5, atol=1e-6)
    assert bn.num_batches_tracked.item() == 3


def test_batch_norm_without_running_stats_has_no_buffers_and_uses_batch_stats():
    bn = nn.BatchNorm1d(2, track_running_stats=False).eval()
    assert list(bn.state_dict()) == ["weight", "bias"]
    x = np.random.default_rng(0).standard_normal((6, 2)).astype(np.float32)
    out = bn(md.tensor(x)).numpy()
    np.testing.assert_allclose(out, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), rtol=1e-4,
                               atol=1e-5)


def test_embedding_padding_row_starts_at_zero_and_gets_no_gradient():
    emb = nn.Embedding(4, 3, padding_idx=1)
    np.testing.assert_array_equal(emb.weight.numpy()[1], 0)
    emb(md.tensor([[1, 2], [1, 1]])).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[1], 0)
    np.testing.assert_array_equal(emb.weight.grad.numpy()[2], 1)


def test_module_to_float64_casts_parameters_and_buffers():
    model = small_cnn().double()
    assert all(v.dtype == np.float64 for k, v in model.state_dict().items()
               if not k.endswith("num_batches_tracked"))
    out = model.eval()(md.tensor(np.ones((1, 1, 8, 8)), dtype=np.float64))
    assert out.dtype == np.float64


def test_a_zero_dimensional_parameter_keeps_its_shape():
    p = nn.Parameter(np.float32(1.5))
    assert p.shape == ()
    assert p.item() == 1.5


def test_a_module_call_on_tensors_enters_no_generator_expression():
    # Every layer of every forward passes through Module.__call__: its test for NumPy arrays
    # among the arguments is a plain loop, not a generator per call.
    from python_calls import generator_frames, python_calls
    layer = nn.ReLU()
    x = md.tensor(np.array([-1.0, 2.0], np.float32))
    layer(x)
    calls = python_calls(lambda: layer(x))
    assert not [c for c in generator_frames(calls) if c[0] == "module.py"], calls
    assert layer(np.array([-1.0, 2.0], np.float32)).numpy().tolist() == [0.0, 2.0]


@pytest.mark.parametrize("layer, shape", [(nn.Conv2d(2, 3, 3), (1, 2, 5, 5)),
                                          (nn.Linear(4, 3), (2, 4)),
                                          (nn.BatchNorm2d(2).eval(), (1, 2, 3, 3))],
                         ids=["conv2d", "linear", "batch_norm"])
def test_a_layers_forward_reads_its_parameters_and_buffers_without_getattr(layer, shape):
    # Module.__getattr__ is Python's fallback after a failed lookup (an AttributeError built
    # and discarded first); the layers declare their parts so that a forward never reaches it.
    from python_calls import python_calls
    x = md.tensor(np.ones(shape, np.float32))
    with md.no_grad():
        expected = layer(x).numpy()
        calls = python_calls(lambda: layer(x))
    assert ("module.py", "__getattr__") not in calls, calls
    np.testing.assert_array_equal(layer(x).detach().numpy(), expected)


@pytest.mark.parametrize("layer, shape", [(nn.Conv2d(2, 3, 3, stride=2, padding=1), (1, 2, 5, 5)),
                                          (nn.MaxPool2d(2, padding=1), (1, 2, 5, 5))],
                         ids=["conv2d", "max_pool2d"])
def test_a_windowed_layer_reads_its_window_once_when_built(layer, shape):
    # The layer made its sizes pairs in __init__; its forward hands them to the op as they are,
    # where F.conv2d / F.max_pool2d read them again on every call (int_pair, pool_window).
    from python_calls import python_calls
    x = md.tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
    with md.no_grad():
        calls = python_calls(lambda: layer(x))
        out = layer(x).numpy()
    assert not [c for c in calls if c[0] == "size_arguments.py"], calls
    if isinstance(layer, nn.Conv2d):
        expected = F.conv2d(x, layer.weight, layer.bias, 2, 1)
    else:
        expected = F.max_pool2d(x, 2, padding=1)
    np.testing.assert_array_equal(out, expected.detach().numpy())


def test_a_pooling_layers_bad_window_is_refused_when_built_and_a_bad_input_per_call():
    with pytest.raises(ValueError, match="MaxPool2d: kernel_size and stride must be >= 1"):
        nn.MaxPool2d(0)
    with pytest.raises(ValueError, match="MaxPool2d: padding .* at most half the kernel size"):
        nn.MaxPool2d(2, padding=2)
    with pytest.raises(ValueError, match=r"max_pool2d: input must be 4-D .* shape \(2, 5, 5\)"):
        nn.MaxPool2d(2)(md.ones(2, 5, 5))
    with pytest.raises(ValueError, match=r"conv2d: input of shape \(1, 3, 5, 5\) has 3 channels"):
        nn.Conv2d(2, 3, 3)(md.ones(1, 3, 5, 5))
    with pytest.raises(ValueError, match="conv2d: stride and dilation must be >= 1"):
        nn.Conv2d(2, 3, 3, stride=0)(md.ones(1, 2, 5, 5))


def test_a_windowed_layers_sizes_assigned_as_ints_are_read_per_call():
    # Only the pairs __init__ made skip the op's reading; an int assigned since is read as the
    # functional op reads it, and checked as it checks it.
    x = md.tensor(np.arange(2 * 36, dtype=np.float32).reshape(1, 2, 6, 6))
    conv, pool = nn.Conv2d(2, 3, 3), nn.MaxPool2d(2)
    conv.stride, conv.padding, pool.kernel_size, pool.stride = 2, [1, 1], 3, 3
    with md.no_grad():
        expected = F.conv2d(x, conv.weight, conv.bias, 2, 1).numpy()
        np.testing.assert_array_equal(conv(x).numpy(), expected)
        np.testing.assert_array_equal(pool(x).numpy(), F.max_pool2d(x, 3).numpy())
    pool.kernel_size = 0
    with pytest.raises(ValueError, match="max_pool2d: kernel_size and stride must be >= 1"):
        pool(x)


def test_a_small_cnns_inference_enters_few_functions_above_the_backend():
    # Single-sample inference is bound by Python: each function a layer enters above the backend
    # (module, layer, op, Function.apply, argument checks) is paid per layer per forward. The
    # bound is what the small CNN of benchmarks/bench_engine.py's infer row takes now (101
    # before the layers stopped re-reading their windows and apply stopped calling _wrap).
    from minidl.backend import use_cpu_backend
    from minidl.backend.numba_cpu import load_kernels
    from python_calls import package_calls, python_calls
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
    x = md.tensor(np.ones((1, 1, 28, 28), np.float32))
    load_kernels()  # the kernels themselves, not the NumPy stand-ins of a first call
    with md.no_grad():
        expected = model.eval()(x).numpy()
        calls = package_calls(lambda: model(x), ("nn", "ops", "autograd"))
    assert len(calls) <= 71, calls
    assert calls.count(("autograd/function.py", "apply")) == 10  # one op per layer
    # Below the ops, the backend's glue: 90 functions, and NumPy's three swapaxes wrappers,
    # before get_backend, the thread check and the conv and pooling geometry stopped being a
    # call per op or per kernel; 58 before a convolution's output size was remembered and a
    # small product stopped asking whether to split. The count includes the six kernels
    # themselves, which Numba reports as frames while a profiler runs.
    previous = use_cpu_backend("numba")  # the default, whatever MINIDL_CPU_BACKEND says
    try:
        with md.no_grad():
            model(x)
            calls = python_calls(lambda: model(x))
            below = package_calls(lambda: model(x), ("backend",))
    finally:
        use_cpu_backend(previous)
    assert len(below) <= 51, below
    assert not [c for c in calls if c[0] == "fromnumeric.py"], calls
    np.testing.assert_array_equal(model(x).numpy(), expected)


def _attribute_story(module_class) -> list:
    """What reading ``weight``, ``stat`` and ``child`` answers after each of a series of
    registrations, replacements and deletions (a value's description, or the error)."""
    from minidl.nn.module import Module

    module = module_class()
    steps = [
        lambda m: None,
        lambda m: setattr(m, "weight", nn.Parameter(np.ones(2, np.float32))),
        lambda m: m.register_buffer("stat", md.zeros(3)),
        lambda m: m.add_module("child", nn.ReLU()),
        lambda m: setattr(m, "weight", md.ones(4)),       # a plain tensor: not a parameter
        lambda m: m.register_buffer("weight", md.zeros(5)),  # beside the instance's own
        lambda m: setattr(m, "weight", None),
        lambda m: setattr(m, "stat", None),
        lambda m: delattr(m, "child"),
        lambda m: delattr(m, "weight"),
        lambda m: delattr(m, "weight"),
        lambda m: delattr(m, "weight"),                   # once too often: an AttributeError
        lambda m: m.register_parameter("weight", None),
        lambda m: setattr(m, "child", Module()),
    ]
    story = []
    for step in steps:
        try:
            step(module)
        except AttributeError as error:
            story.append(("set", str(error).replace(module_class.__name__, "M")))
        for name in ("weight", "stat", "child"):
            try:
                value = getattr(module, name)
                story.append((name, type(value).__name__,
                              None if value is None or isinstance(value, Module) else value.shape))
            except AttributeError as error:
                story.append((name, str(error).replace(module_class.__name__, "M")))
        story.append((list(module._parameters), list(module._buffers), list(module._modules)))
    return story


def test_declared_parts_read_exactly_as_undeclared_ones():
    from minidl.nn.module import Module, RegisteredAttribute

    class Plain(Module):
        pass

    class Declared(Module):
        weight, stat, child = RegisteredAttribute(), RegisteredAttribute(), RegisteredAttribute()

    plain, declared = _attribute_story(Plain), _attribute_story(Declared)
    assert declared == plain
    assert ("weight", "'M' object has no attribute 'weight'") in plain  # the story reaches it
