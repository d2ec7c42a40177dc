"""Model files: a module saved as topology plus weights, and rebuilt from the file alone.

A model file is the bottom floor's ``"model"`` kind (``minidl.io``: bytes, checksums, a
plain-data header) given a meaning that only the floors above it know: the header's spec
is a module's topology (``minidl.nn.spec``), its tensors are that module's ``state_dict``,
and a file that turns out to be ONNX goes to ``minidl.onnx``'s importer.  The package sits
one floor above ``io``, ``nn`` and ``onnx`` so that the file format itself knows nothing of
modules; ``minidl.save_model``/``minidl.load_model`` and ``minidl.load`` are its public face.

* ``model_file`` -- ``save_model`` and ``load_model`` for minidl's own format (``device=``
  places the rebuilt module), and a model file's plain contents
* ``plain_contents`` -- ``load``: any minidl file as plain values (a model file as its spec
  and weights), with ``map_location``
* ``routing`` -- which reader a file goes to, decided by its first bytes
"""

from .model_file import MODEL_SUFFIX, load_model, save_model
from .plain_contents import load

__all__ = ["save_model", "load_model", "load", "MODEL_SUFFIX"]
