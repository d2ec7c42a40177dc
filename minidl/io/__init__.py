"""minidl files: values and bytes, and the safe reader/writer under them.

This is the bottom floor of everything that touches disk: it imports nothing from minidl
outside ``minidl.io`` (a test scans the imports), so the format knows nothing of modules,
optimizers or tensors.  Meanings that need the floors above -- a model file's topology
(``minidl.model_files``), a training checkpoint (``minidl.checkpoint``) -- live there.

Layers, from high to low (each imports only those below it):

* ``values`` (``save``/``load``, ``stored_value``)
* ``writer`` (``write_file``) and ``reader`` (``read_file``, ``read_header``)
* ``header`` (msgpack schema and validation), ``crypto`` (AES-GCM), ``atomic``
  (``write_atomically``), ``checksum``, ``dtypes``, ``errors``
* ``state_tree`` (what a state tree may hold, checked in one walk; arrays and Tensors
  recognised; copies), ``layout``

``SPEC.md`` at the project root describes the bytes on disk.
"""

from .atomic import write_atomically
from .errors import (
    CheckpointError, ChecksumMismatchError, CorruptFileError, DecryptionError,
    MissingFileError, ModelSpecError, NotAMinidlFileError, UnsafeFileError,
    UnsupportedVersionError, WrongKindError)
from .header import TensorRef, get_header_memory_limit, set_header_memory_limit
from .layout import MAJOR_VERSION, MINOR_VERSION
from .reader import FileHeader, read_contents, read_file, read_header, verify_file
from .values import decode_value, encode_value, load, save, stored_value
from .writer import write_file

__all__ = [
    "save", "load",
    "write_file", "read_file", "read_contents", "read_header", "verify_file", "FileHeader",
    "TensorRef", "encode_value", "decode_value", "stored_value", "write_atomically",
    "MAJOR_VERSION", "MINOR_VERSION", "set_header_memory_limit", "get_header_memory_limit",
    "CheckpointError", "MissingFileError", "CorruptFileError", "NotAMinidlFileError",
    "ChecksumMismatchError", "UnsupportedVersionError", "UnsafeFileError", "DecryptionError",
    "WrongKindError", "ModelSpecError",
]
