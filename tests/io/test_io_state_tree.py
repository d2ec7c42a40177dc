"""State trees: any state_dict survives the header's str-keys-only rule, copies are
independent of the live objects, arrays and Tensors are recognised one way, and every
refusal names the path of the offending field."""

import subprocess
import sys
import textwrap
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import msgpack
from io_file_crafting import craft

from minidl.checkpoint import Checkpoint
from minidl.io import UnsafeFileError, layout, load, read_file, save
from minidl.io.state_tree import (
    ITEMS_MARKER, StateTreeError, TreeSize, UnstorableError, as_array, check_tree, copy_state,
    from_storable, holds_array, to_plain, to_storable)


class Holder:
    def __init__(self, state):
        self.state = state

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.state = state


keys = st.one_of(st.text(max_size=5), st.integers(-5, 5), st.booleans(), st.none(),
                 st.just(ITEMS_MARKER))
leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(max_size=5),
                   st.floats(allow_nan=False), st.binary(max_size=4))
trees = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)), max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(trees)
def test_plain_states_round_trip_exactly(state):
    assert from_storable(to_storable(state)) == state


def test_marker_key_alone_is_not_mistaken_for_an_item_list():
    state = {ITEMS_MARKER: [[1, 2]]}
    stored = to_storable(state)
    assert from_storable(stored) == state
    assert list(stored) == [ITEMS_MARKER] and stored[ITEMS_MARKER] == [[ITEMS_MARKER, [[1, 2]]]]


def test_unstorable_key_is_named():
    with pytest.raises(TypeError, match="frozenset"):
        to_storable({frozenset(): 1}, "opt")


def test_copies_do_not_share_memory():
    live = OrderedDict(w=np.ones(3), nested={"m": [np.zeros(2)]})
    copy = copy_state(live)
    stored = to_storable(live)
    live["w"][:] = 7
    live["nested"]["m"][0][:] = 7
    assert type(copy) is OrderedDict
    assert copy["w"].tolist() == [1, 1, 1] and stored["w"].tolist() == [1, 1, 1]
    assert copy["nested"]["m"][0].tolist() == [0, 0]


def test_int_keyed_state_survives_a_file(tmp_path):
    state = {0: {"step": 3, "buf": np.arange(4.0)}, 1: {"step": 4}, "name": "x"}
    Checkpoint(h=Holder(state)).save(tmp_path / "c.mdl", step=1)
    target = Holder(None)
    Checkpoint(h=target).restore(tmp_path / "c.mdl")
    assert list(target.state) == [0, 1, "name"]
    assert target.state[0]["buf"].tobytes() == np.arange(4.0).tobytes()
    metadata, tensors = read_file(tmp_path / "c.mdl")
    assert metadata["objects"]["h"][ITEMS_MARKER][0][0] == 0


def test_background_save_in_flight_at_exit_is_committed(tmp_path):
    script = textwrap.dedent(f"""
        import numpy as np
        from minidl.checkpoint import Checkpoint, CheckpointManager

        class Big:
            def state_dict(self):
                return {{"x": np.ones(4 << 20)}}
            def load_state_dict(self, state):
                pass

        manager = CheckpointManager(Checkpoint(big=Big()), {str(tmp_path)!r}, async_save=True)
        manager.save(7)
        # no wait(): the interpreter must finish the write before it exits
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-step00000007.mdl"]
    metadata, tensors = read_file(tmp_path / names[0])
    assert metadata["step"] == 7 and tensors["objects/big/x"].sum() == 4 << 20


def test_a_tensor_is_recognised_by_its_protocol_not_by_its_class():
    import minidl as md
    from minidl import nn

    tensor, weight = md.tensor([1.0, 2.0]), nn.Linear(2, 3).weight
    assert holds_array(tensor) and holds_array(weight)
    assert not holds_array(md.Tensor) and not holds_array(np.zeros(1))
    assert np.shares_memory(as_array(tensor), tensor.numpy())
    assert as_array(np.float32(2)).dtype == np.float32 and as_array(np.float32(2)).shape == ()
    assert as_array([1.0, 2.0]) is None and as_array("x") is None


def test_check_tree_names_the_path_of_the_offending_field():
    with pytest.raises(UnstorableError, match=r"^state/layers/1/w: a set is not plain data"):
        check_tree({"layers": [{}, {"w": {1}}]}, "state")
    with pytest.raises(UnstorableError, match=r"^state/layers: dict key 3 of type int"):
        check_tree({"layers": {3: 1}}, "state")
    with pytest.raises(StateTreeError, match=r"^value/0/0: nested deeper than 2 levels"):
        check_tree([[[]]], max_depth=2)
    with pytest.raises(StateTreeError, match=r"^value/a: integer 18446744073709551616 does"):
        check_tree({"a": 1 << 64})
    # An unstorable type is a TypeError (wrong object) and a ValueError (invalid state).
    assert issubclass(UnstorableError, TypeError) and issubclass(UnstorableError, ValueError)
    assert check_tree([[[]]], max_depth=3) == TreeSize(containers=3, items=2)
    assert check_tree({"a": [1, 2]}, key_types=(str,)) == TreeSize(containers=2, items=4)


def test_the_deepest_header_the_reader_accepts_can_be_written(tmp_path):
    # Writer and reader count nesting the same way (containers, the header map being level
    # 1): a value of MAX_NESTING - 2 lists sits at levels 3..MAX_NESTING of the header.
    value = 0
    for _ in range(layout.MAX_NESTING - 2):
        value = [value]
    save(value, tmp_path / "deep.mdl")
    assert load(tmp_path / "deep.mdl") == value
    with pytest.raises(ValueError, match="nested deeper than"):
        save([value], tmp_path / "deeper.mdl")
    assert not (tmp_path / "deeper.mdl").exists()


def test_the_reader_names_where_a_header_holds_foreign_data(tmp_path):
    raw = msgpack.packb({"kind": "values", "tensors": [],
                         "metadata": {"value": {"ok": [1, msgpack.Timestamp(1, 0)]}}},
                        use_bin_type=True)
    path = tmp_path / "t.mdl"
    path.write_bytes(craft(header_bytes=raw))
    with pytest.raises(UnsafeFileError, match=r"Timestamp.*\(at header/metadata/value/ok/1\)"):
        load(path)


def test_to_plain_names_the_field_that_is_not_plain_data():
    assert to_plain({"betas": (0.9, np.float32(0.5))}, "group") == {"betas": [0.9, 0.5]}
    with pytest.raises(TypeError, match=r"^group/betas/1: <object"):
        to_plain({"betas": (0.9, object())}, "group")
