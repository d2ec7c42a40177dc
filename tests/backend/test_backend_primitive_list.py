"""Both CPU backends implement every primitive of the seam's list."""

import importlib

import pytest

from minidl.backend.primitives import ALL_PRIMITIVES


@pytest.mark.parametrize("module", ["minidl.backend.reference", "minidl.backend.numba_cpu"])
def test_backend_defines_every_primitive(module):
    backend = importlib.import_module(module)
    missing = [name for name in ALL_PRIMITIVES if not callable(getattr(backend, name, None))]
    assert not missing, f"{module} lacks {missing}"
