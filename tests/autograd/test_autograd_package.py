"""``minidl.autograd`` is a regular package whose names are the ones ``minidl`` gives out."""

import subprocess
import sys

import minidl as md
import minidl.autograd as autograd
from minidl.autograd import engine, function


def test_autograd_is_a_package_with_its_own_init():
    # A folder without __init__.py imports as a namespace package: no docstring, no __file__,
    # and packaging tools that look for packages leave it out.
    assert autograd.__file__ is not None and autograd.__file__.endswith("__init__.py")
    assert "backward" in autograd.__doc__


def test_the_package_exports_the_objects_minidl_uses():
    assert autograd.Tensor is md.Tensor and autograd.no_grad is md.no_grad
    assert autograd.backward is engine.backward and autograd.Function is function.Function
    assert set(autograd.__all__) <= set(dir(autograd))


def test_importing_autograd_first_has_no_cycle_and_loads_no_kernels():
    # Numba arrives with the CPU backend at the first op, never at import.
    code = ("import sys, minidl.autograd as a; print('numba' in sys.modules); "
            "x = a.Tensor([1.0, 2.0], requires_grad=True); (x * x).sum().backward(); "
            "print(x.grad.numpy().tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["False", "[2.0, 4.0]"]
