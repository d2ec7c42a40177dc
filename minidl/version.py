"""minidl's version, in one place: the package (``md.__version__``), the build
(``pyproject.toml``), the command line (``minidl --version``) and exported ONNX files (their
producer) all read it from here, a module with no imports, so any floor may use it."""

__version__ = "0.1.0"
