"""Imported graphs at the numeric edges: Mod's remainder is exact in every float type (fmod
and the floored mod are exact in IEEE arithmetic), and float8 types are refused."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import minidl as md
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


@pytest.mark.parametrize("name", ["float8_e5m2", "float8_e4m3fn", "bfloat16"])
def test_float8_and_other_extension_dtypes_are_refused(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1.0, 57344.0], dtype=getattr(ml_dtypes, name))
    with pytest.raises(TypeError, match=f"unsupported dtype {name}"):
        md.tensor(values)


def test_cast_like_to_float8_e5m2_is_refused(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    path = save(tmp_path, [helper.make_node("CastLike", ["x", "like"], ["y"])],
                [info("x", [2]), info("like", [1], TensorProto.FLOAT8E5M2)],
                [info("y", [2], TensorProto.FLOAT8E5M2)], opset=19)
    # Refused when the graph's declared inputs are read at import, or else at the call: either
    # way by name, never computed with a wrong saturation.
    with pytest.raises((TypeError, ValueError), match="float8_e5m2"):
        module = import_model(path)
        module(np.float32([1.0, 60000.0]), np.array([0.0], ml_dtypes.float8_e5m2))
