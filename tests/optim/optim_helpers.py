"""Helpers shared by the optimizer tests: Parameters with hand-set gradients."""

import numpy as np

from minidl import Tensor
from minidl.nn import Parameter


def make_param(values, dtype=np.float32):
    """A Parameter holding a copy of ``values``."""
    return Parameter(np.array(values, dtype=dtype))


def set_grad(param, values):
    """Give ``param`` the gradient ``values`` (as the backward pass would)."""
    param.grad = Tensor(np.array(values, dtype=param.data.dtype))


def through_msgpack(state_dict):
    """Send a state dict through msgpack the way a checkpoint would: arrays travel separately.

    Every non-array value must survive msgpack unchanged; arrays are replaced by placeholders,
    packed, and copied back in after unpacking.
    """
    import msgpack

    arrays = []

    def strip(value):
        if isinstance(value, np.ndarray):
            arrays.append(value.copy())
            return {"__array__": len(arrays) - 1}
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [strip(item) for item in value]
        return value

    def restore(value):
        if isinstance(value, dict):
            if set(value) == {"__array__"}:
                return arrays[value["__array__"]]
            return {key: restore(item) for key, item in value.items()}
        if isinstance(value, list):
            return [restore(item) for item in value]
        return value

    packed = msgpack.packb(strip(state_dict), use_bin_type=True)
    return restore(msgpack.unpackb(packed, raw=False, strict_map_key=False))


def assert_same_state(a, b, path="state"):
    """Recursive equality for state dicts: arrays bitwise (and same dtype), the rest with ==."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), path
        assert a.dtype == b.dtype and a.shape == b.shape, path
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), path
        for key in a:
            assert_same_state(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert type(a) is type(b) and a == b, (path, a, b)
