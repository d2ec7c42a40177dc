"""In-place ops and version counters: edits of tensors saved for backward raise (as PyTorch),
gradients flow through in-place ops and item assignment, leaves are protected."""

import numpy as np
import pytest

import minidl as md

torch_or_skip = pytest.importorskip


def test_editing_a_saved_output_raises_instead_of_a_silent_zero_gradient():
    x = md.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.exp()
    z = (y * y).sum()
    y.fill_(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_editing_through_a_view_is_seen():
    x = md.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x.exp()
    loss = y.sum()  # Exp keeps its output
    with md.no_grad():  # (with grad on, editing a view of a graph tensor is refused outright)
        y.reshape(-1)[0:1].zero_()
    with pytest.raises(RuntimeError, match="version 1; expected version 0"):
        loss.backward()


def test_editing_an_unsaved_tensor_is_fine():
    # Add saves nothing, so editing its input afterwards does not matter (PyTorch agrees).
    x = md.tensor([1.0, 2.0], requires_grad=True)
    a = x * 2
    b = (a + 1).sum()
    a.add_(5)
    b.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_an_optimizer_step_invalidates_graphs_built_before_it():
    w = md.nn.Parameter(np.ones((2, 2), np.float32))
    x = md.tensor(np.ones((3, 2), np.float32), requires_grad=True)
    loss = (x @ w).sum()
    w.grad = md.tensor(np.ones((2, 2), np.float32))
    md.optim.SGD([w], lr=0.1).step()
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


def test_gradients_flow_through_in_place_ops():
    x = md.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x * 2
    y.add_(x, alpha=3).mul_(x).sub_(1).div_(2)  # y = (5x·x - 1) / 2
    y.clamp_(min=-100.0)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 5 * x.numpy())


def test_augmented_assignment_updates_the_same_tensor():
    w = md.nn.Parameter(np.array([1.0, 2.0], np.float32))
    w.grad = md.tensor([10.0, 20.0])
    same = w
    with md.no_grad():
        w -= 0.1 * w.grad  # the PyTorch manual SGD step
    assert w is same and isinstance(w, md.nn.Parameter)
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0], atol=1e-7)
    assert w._version == 1


@pytest.mark.parametrize("edit", [lambda w: w.add_(1), lambda w: w.zero_(),
                                  lambda w: w.copy_(np.zeros(2)), lambda w: w.__setitem__(0, 1.0)])
def test_in_place_on_a_leaf_that_requires_grad_raises(edit):
    w = md.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        edit(w)
    with md.no_grad():
        edit(w)  # allowed for updates, as in PyTorch


def test_in_place_cannot_change_the_dtype_kind():
    a = md.tensor([1, 2])
    with pytest.raises(RuntimeError, match="can't be cast"):
        a.add_(0.5)
    a.add_(1)
    np.testing.assert_array_equal(a.numpy(), [2, 3])
    f = md.tensor([1.0, 2.0])
    f.copy_(md.tensor([3.0, 4.0], dtype=np.float64))
    assert f.dtype == np.float32 and f.tolist() == [3.0, 4.0]


def test_item_assignment_is_differentiable():
    x = md.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    v = md.tensor(10.0, requires_grad=True)
    y = x * 1.0
    y[1:3] = v * 2
    (y * md.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), [1.0, 20.0, 20.0, 4.0])
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 0.0, 4.0])
    np.testing.assert_array_equal(v.grad.numpy(), 2 * (2.0 + 3.0))


def test_item_assignment_with_masks_and_index_tensors():
    a = md.zeros(2, 3)
    a[a.detach() == 0] = 1.0
    a[md.tensor([0]), md.tensor([2])] = md.tensor([7.0])
    np.testing.assert_array_equal(a.numpy(), [[1, 1, 7], [1, 1, 1]])


def test_index_put_accumulates_repeated_indices():
    a = md.zeros(3)
    v = md.tensor([1.0, 2.0, 3.0], requires_grad=True)
    out = md.index_put(a, (md.tensor([0, 0, 2]),), v, accumulate=True)
    np.testing.assert_array_equal(out.detach().numpy(), [3.0, 0.0, 3.0])
    (out * md.tensor([1.0, 5.0, 7.0])).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), [1.0, 1.0, 7.0])
    a.index_put_((md.tensor([1]),), md.tensor([4.0]))
    np.testing.assert_array_equal(a.numpy(), [0.0, 4.0, 0.0])


def test_item_assignment_matches_torch():
    torch = torch_or_skip("torch")
    data = np.arange(12, dtype=np.float64).reshape(3, 4)
    ours = md.tensor(data, requires_grad=True)
    theirs = torch.tensor(data, requires_grad=True)
    pairs = ((ours, md.tensor([5.0, 6.0], dtype=np.float64, requires_grad=True)),
             (theirs, torch.tensor([5.0, 6.0], dtype=torch.float64, requires_grad=True)))
    for t, v in pairs:
        y = t.exp() * 1.0
        y[1, 2:] = v
        y[:, 0] = y[:, 1] * 3  # (y[:, 1] ** 2 would raise in both: pow keeps its input)
        (y * y).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy())
    np.testing.assert_allclose(pairs[0][1].grad.numpy(), pairs[1][1].grad.numpy())


def test_nodes_that_read_a_tensor_before_an_edit_keep_the_old_history():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    a = (y + 1).sum()  # read y before the edit
    y.mul_(3)          # the edit must not scale a's gradient
    a.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_in_place_edits_are_refused_while_tracing_for_export():
    from minidl.autograd import tracing

    class Recorder:
        def on_function(self, function_class, inputs, attrs, output):
            pass

    x = md.tensor([1.0, 2.0])
    with tracing.tracing(Recorder()):
        with pytest.raises(RuntimeError, match="out of place"):
            x += 1
        with pytest.raises(RuntimeError, match="index_put"):
            x[0] = 5.0
    assert x.tolist() == [1.0, 2.0]


def test_views_and_in_place_edits_never_give_silently_wrong_gradients():
    x = md.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="edit the base"):
        y[0:2].mul_(3)  # the edit would not reach y's history
    view = y[0:2]
    y.mul_(3)  # the view's values change with it, its history does not
    with pytest.raises(RuntimeError, match="Take the view again"):
        (view * 1).sum()
    (y[0:2] * 1).sum().backward()  # a view taken after the edit is fine
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0, 0.0])


def test_a_constant_read_by_every_step_does_not_accumulate_bookkeeping():
    constant = md.tensor([1.0, 2.0])
    w = md.tensor([1.0, 1.0], requires_grad=True)
    for _ in range(500):
        (w * constant).sum().backward()
    assert len(constant._consumers) <= 16  # finished steps' nodes are pruned
    assert w._consumers is None  # parameters cannot be edited in place mid-graph: not tracked
