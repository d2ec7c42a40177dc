"""State trees: any state_dict survives the header's str-keys-only rule, and copies are
independent of the live objects."""

import subprocess
import sys
import textwrap
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minidl.checkpoint import Checkpoint
from minidl.io.state_tree import ITEMS_MARKER, copy_state, from_storable, to_storable
from minidl.io import read_file


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
