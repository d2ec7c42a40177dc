import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
