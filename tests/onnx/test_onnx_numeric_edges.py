"""Imported graphs at the numeric edges: Mod's remainder is exact in every float type (fmod
and the floored mod are exact in IEEE arithmetic), and float8 types are refused."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from minidl.onnx import import_model

from onnx_checks import info, save_graph as save


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype,code", [(np.float16, TensorProto.FLOAT16),
                                        (np.float32, TensorProto.FLOAT)])
def test_mod_is_exact(tmp_path, fmod, dtype, code):
    # b·trunc(a/b) rounds in float16 for the first three (16.4375 fmod 2.71484375 is
    # 0.1484375, a - b·q gives 0.15625)
    a = np.array([16.4375, -27.625, -58.03125, -55.09375, 7.5, -0.0, 3.0], dtype)
    b = np.array([2.71484375, -0.07757568359375, -0.4716796875, 1.142578125, -2.0, 2.0, -1.5],
                 dtype)
    path = save(tmp_path, [helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
                [info("a", [7], code), info("b", [7], code)], [info("y", [7], code)])
    out = import_model(path)(a, b)
    exact = (np.fmod if fmod else np.mod)(a, b)  # NumPy's are exact too
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.numpy(), exact)
