"""Function.apply, the path every op takes: what it records and what it costs per op.

The cost is pinned by what cannot drift with the machine's load: the Python functions an op
enters (a profiler's call events), never a wall-clock bound.
"""

import contextlib

import numpy as np
import pytest

import minidl as md
from minidl.autograd import tracing
from minidl.autograd.function import Function
from minidl.autograd.tensor import Tensor
from minidl.ops.elementwise import AddFunction
from python_calls import python_calls


@pytest.fixture
def pair():
    a = md.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = md.tensor(np.ones((2, 3), np.float32))
    md.add(a, b)  # load the backend and its kernels before anything is counted
    return a, b


def test_an_op_imports_nothing_per_call(pair):
    # An import statement inside apply ran importlib's Python code on every op.
    a, b = pair
    calls = python_calls(lambda: md.add(a, b))
    assert not [c for c in calls if "importlib" in c[0] or "bootstrap" in c[0]], calls


@pytest.mark.parametrize("grad", [False, True])
def test_apply_is_one_python_frame_when_nothing_is_recorded(pair, grad):
    # No generator expression or comprehension per op: apply walks its inputs in one loop and
    # maps C getters over them.
    a, b = pair
    with contextlib.nullcontext() if grad else md.no_grad():
        calls = python_calls(lambda: md.add(a, b))
    assert [c for c in calls if c[0] == "function.py"] == [("function.py", "apply")]


def test_no_input_requiring_grad_records_no_graph(pair):
    a, b = pair
    out = md.mul(a, b)
    assert out.grad_fn is None and not out.requires_grad
    assert a._consumers is None and b._consumers is None


def test_forward_sees_no_gradient_needed_without_recording():
    seen = []

    class Probe(Function):
        def forward(self, x, y):
            seen.append(self.needs_input_grad)
            return self.backend.add(x, y)

        def backward(self, grad):
            return grad, grad

    x = md.tensor([1.0, 2.0], requires_grad=True)
    y = md.tensor([3.0, 4.0])
    with md.no_grad():
        assert Probe.apply(x, y).grad_fn is None
    out = Probe.apply(x, y)
    assert seen == [(False, False), (True, False)]
    assert out.grad_fn is not None and out.requires_grad


def test_a_view_shares_the_version_counter_without_recording():
    x = md.tensor([1.0, 2.0, 3.0, 4.0])
    with md.no_grad():
        view = x.reshape(2, 2)
    x.add_(1.0)
    assert view._version == x._version == 1
    assert view.numpy().ravel().tolist() == [2.0, 3.0, 4.0, 5.0]


def test_inputs_on_different_devices_are_refused_without_recording(monkeypatch, pair):
    a, b = pair
    other = md.tensor([1.0])
    monkeypatch.setattr(other, "device", "cuda:0")
    with md.no_grad(), pytest.raises(ValueError, match="AddFunction: inputs are on different "
                                                       "devices"):
        AddFunction.apply(a, other)


def test_a_stale_view_is_refused_only_when_recorded():
    x = md.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    base = x * 1.0
    view = base.reshape(2, 2)
    with md.no_grad():
        base.add_(1.0)
        assert (view * 2.0).numpy().ravel().tolist() == [4.0, 6.0, 8.0, 10.0]
    with pytest.raises(RuntimeError, match="view taken before its memory was edited"):
        view * 2.0


def test_the_tracer_sees_ops_that_record_nothing(pair):
    a, b = pair
    seen = []

    class Tracer:
        def on_function(self, cls, inputs, attrs, out):
            seen.append(cls.__name__)

        def on_module(self, module, args, kwargs, run):
            return run()

    with md.no_grad(), tracing.tracing(Tracer()):
        md.add(a, b)
    assert seen == ["AddFunction"]


def test_an_op_reads_the_grad_mode_and_wraps_its_output_without_further_calls(pair):
    # is_grad_enabled(), Tensor._hold and Tensor._wrap were one call each per op; apply reads
    # the mode and sets the output's fields itself.
    a, b = pair
    with md.no_grad():
        calls = python_calls(lambda: md.add(a, b))
    assert not [c for c in calls if c[0] in ("grad_mode.py", "tensor.py")], calls


@pytest.mark.parametrize("grad", [False, True])
def test_an_ops_output_has_every_field_of_a_wrapped_tensor(pair, grad):
    # apply builds its output as Tensor._wrap does, inline: a slot added to Tensor and set by
    # _wrap alone would be missing from every op's output.
    a, b = (t.detach().requires_grad_(grad) for t in pair)
    out = md.add(a, b)
    wrapped = Tensor._wrap(out.data, out.device, out.requires_grad)
    for slot in Tensor.__slots__:
        if slot not in ("__weakref__", "_node", "_version_cell", "data"):
            assert getattr(out, slot) == getattr(wrapped, slot), slot
    assert out._version_cell == [0] and out._version_cell is not a._version_cell
    assert (out._node is not None) == grad


def test_a_subclass_holding_data_gets_every_field_of_a_wrapped_tensor():
    # Parameter(tensor) holds a copy through Tensor._hold, which takes _wrap's fields.
    source = md.tensor([1.0, 2.0])
    parameter = md.nn.Parameter(source)
    assert parameter.requires_grad and parameter.grad is None and parameter.grad_fn is None
    assert parameter._version == 0 and parameter._version_cell is not source._version_cell
    parameter.data[0] = 5.0
    assert source.numpy().tolist() == [1.0, 2.0]


def test_the_grad_mode_apply_reads_is_per_thread_and_starts_enabled():
    import threading
    x = md.tensor([1.0, 2.0], requires_grad=True)
    recorded = {}

    def in_a_new_thread():
        recorded["enabled"] = md.is_grad_enabled()
        recorded["graph"] = (x * 2.0).grad_fn is not None

    with md.no_grad():
        worker = threading.Thread(target=in_a_new_thread)
        worker.start()
        worker.join()
        assert (x * 2.0).grad_fn is None and not md.is_grad_enabled()
    assert recorded == {"enabled": True, "graph": True}
    assert md.is_grad_enabled()


@pytest.mark.parametrize("mode", [md.no_grad, md.enable_grad, md.inference_mode],
                         ids=["no_grad", "enable_grad", "inference_mode"])
def test_a_grad_mode_block_reads_and_writes_the_mode_itself(mode):
    # ``with md.no_grad(): model(x)`` is every inference call's frame: entering and leaving
    # runs the context manager's own methods and nothing else.
    def block():
        with mode():
            pass

    for outside in (True, False):
        md.set_grad_enabled(outside)
        try:
            calls = [c for c in python_calls(block) if c[0] == "grad_mode.py"]
            assert md.is_grad_enabled() is outside  # restored on leaving
        finally:
            md.set_grad_enabled(True)
        assert [c[1] for c in calls if c[1] != "__init__"] == ["__enter__", "__exit__"], calls
    with mode():
        assert md.is_grad_enabled() is (mode is md.enable_grad)


def test_an_op_finds_its_backend_without_calling_get_backend_and_follows_a_new_choice(pair):
    # get_backend was one Python call per op; apply reads its answers (backends_by_name) first,
    # which a change of the CPU implementation empties, so the next op asks again.
    from minidl.backend import use_cpu_backend
    from minidl.backend.numba_cpu import NumbaCpuBackend
    from minidl.backend.reference import ReferenceBackend
    a, b = pair
    calls = python_calls(lambda: md.add(a, b))
    assert not [c for c in calls if c[1] == "get_backend"], calls
    seen = []

    class Probe(Function):
        def forward(self, x):
            seen.append(type(self.backend))
            return x

    previous = use_cpu_backend("numpy")
    try:
        Probe.apply(a)
    finally:
        use_cpu_backend(previous)
    Probe.apply(a)
    assert seen == [ReferenceBackend, NumbaCpuBackend]
