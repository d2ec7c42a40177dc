"""Weights in a side file: ONNX "external data", written and read with its paths checked.

A protobuf message cannot exceed 2 GB, so ONNX lets a tensor keep only its name, type and shape
in the model and point at its bytes in another file: ``location`` (a path relative to the
model's directory), ``offset`` and ``length``. That pointer is data from the file, so a hostile
model can aim it anywhere: ``../../etc/passwd``, ``/home/user/.ssh/id_rsa``, or an innocent
name that is a symlink leading out of the directory (the holes behind CVE-2022-25882 and
CVE-2024-27318). Here every location must name a regular file *inside* the model's directory
once symlinks are resolved, and its byte range must lie inside that file and match the tensor's
size. The importer reads external bytes itself, after those checks, so neither onnx nor
onnxruntime ever follows an unchecked path.
"""

from __future__ import annotations

import os

import numpy as np

from .errors import UnsafeExternalDataError

# Automatic external data: a model whose weights exceed this would not fit in one protobuf.
PROTOBUF_SAFE_BYTES = 2**31 - 2**26
AUTOMATIC_MIN_TENSOR_BYTES = 1024   # then: every tensor at least this big goes to the side file
ALIGNMENT = 4096                    # page-aligned offsets let a runtime memory-map each tensor
EXTERNAL = 1                        # TensorProto.DataLocation.EXTERNAL


def checked_location(base_dir: str, location, *, must_exist: bool = True) -> str:
    """The real path of external-data ``location`` under ``base_dir``, or UnsafeExternalDataError.

    A location is accepted only as a relative path without ``..`` components that, with every
    symlink resolved, still names something inside ``base_dir``.
    """
    if not isinstance(location, str) or not location or "\x00" in location:
        raise UnsafeExternalDataError(f"external data location {location!r} is not a file name")
    if (os.path.isabs(location) or location.startswith(("/", "\\")) or "\\" in location
            or ":" in location):
        raise UnsafeExternalDataError(
            f"external data location {location!r} is absolute; only names relative to the "
            f"model's directory are accepted")
    if ".." in location.split("/"):
        raise UnsafeExternalDataError(
            f"external data location {location!r} climbs out of the model's directory ('..')")
    root = os.path.realpath(base_dir)
    resolved = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, resolved]) != root:
        raise UnsafeExternalDataError(
            f"external data location {location!r} resolves to {resolved}, outside the model's "
            f"directory {root} (through a symlink)")
    if must_exist and not os.path.isfile(resolved):
        raise UnsafeExternalDataError(
            f"external data location {location!r} is not a regular file in {root}")
    if os.path.exists(resolved):
        _refuse_hardlinks(resolved, location)
    return resolved


def _refuse_hardlinks(path: str, location) -> None:
    """A file with more than one link may be the same inode as a file outside the directory:
    a hardlink escapes it as a symlink would, but no path comparison can see it."""
    links = os.stat(path).st_nlink
    if links > 1:
        raise UnsafeExternalDataError(
            f"external data location {location!r} is a file with {links} hard links; one of "
            f"them may lie outside the model's directory, so it is refused")


def _all_tensors(graph):
    """Every TensorProto a graph holds: initializers and node attributes, subgraphs included."""
    for tensor in graph.initializer:
        yield tensor
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _all_tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _all_tensors(subgraph)


def _numpy_dtype(tensor):
    """The NumPy dtype of a tensor's raw bytes, or None (strings, types NumPy lacks)."""
    from onnx import helper

    if tensor.data_type == 8:  # strings have no fixed size
        return None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except Exception:
        return None
    return dtype if dtype.kind in "biufc" else None


def _expected_bytes(tensor):
    from onnx import helper

    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except Exception:
        return None
    if tensor.data_type == 8:  # strings have no fixed size
        return None
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def load_external_data(model, base_dir: str, max_tensor_bytes: int | None = None) -> dict:
    """Check every external reference of ``model`` and read the bytes; returns the
    initializers' arrays by name.

    Everything is checked before anything is read -- the location, the byte range, and the
    size against ``max_tensor_bytes`` (the bound the importer puts on every tensor), so a
    small model pointing at a huge (or sparse) side file is refused without reading or
    allocating. An initializer is read straight into its NumPy array, once (the model keeps
    pointing at the side file: its checker reads the model file itself); any other tensor
    (a node attribute's) gets its bytes in the message.
    """
    plans = []
    for tensor in _all_tensors(model.graph):
        if tensor.data_location != EXTERNAL:
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        where = f"tensor {tensor.name!r}"
        path = checked_location(base_dir, entries.get("location"))
        try:
            offset = int(entries.get("offset", 0))
            length = int(entries["length"]) if "length" in entries else None
        except ValueError:
            raise UnsafeExternalDataError(f"{where}: offset/length are not integers") from None
        size = os.path.getsize(path)
        expected = _expected_bytes(tensor)
        if length is None:
            length = expected if expected is not None else size - offset
        for what, count in (("declares", expected), ("points at", length)):
            if max_tensor_bytes is not None and count is not None and count > max_tensor_bytes:
                raise UnsafeExternalDataError(
                    f"{where} {what} {count} bytes of external data, beyond the bound of "
                    f"{max_tensor_bytes} bytes (raise it with import_model(..., "
                    f"max_tensor_bytes=N) if it is meant)")
        if offset < 0 or length < 0 or offset + length > size:
            raise UnsafeExternalDataError(
                f"{where}: bytes [{offset}, {offset + length}) lie outside "
                f"{entries['location']!r} ({size} bytes)")
        if expected is not None and length != expected:
            raise UnsafeExternalDataError(
                f"{where}: {length} external bytes for a tensor of {expected} bytes")
        plans.append((tensor, path, offset, length))
    initializers = {id(tensor) for tensor in model.graph.initializer}
    arrays = {}
    for tensor, path, offset, length in plans:
        dtype = _numpy_dtype(tensor)
        if id(tensor) in initializers and dtype is not None:
            array = np.empty(tuple(tensor.dims), dtype.newbyteorder("<"))
            _read_range(path, offset, length, into=memoryview(array.reshape(-1).view(np.uint8)))
            arrays[tensor.name] = array.astype(dtype.newbyteorder("="), copy=False)
        else:
            tensor.raw_data = _read_range(path, offset, length)
            tensor.data_location = 0  # DEFAULT: the bytes are in the message now
            del tensor.external_data[:]
    return arrays


def embed_external_arrays(model, arrays: dict) -> None:
    """Put arrays read by :func:`load_external_data` into their initializers' messages: the
    model is then self-contained (what ``onnx.version_converter`` needs)."""
    for tensor in model.graph.initializer:
        if tensor.name in arrays:
            tensor.raw_data = np.ascontiguousarray(arrays[tensor.name]).astype(
                arrays[tensor.name].dtype.newbyteorder("<"), copy=False).tobytes()
            tensor.data_location = 0
            del tensor.external_data[:]


def _read_range(path: str, offset: int, length: int, into=None):
    """``length`` bytes of the regular file ``path`` from ``offset``: in one new bytes object,
    or into the writable buffer ``into`` (returned).

    Opened as minidl opens every file it reads (a name swapped for a FIFO or a device since
    the checks is refused, not read), and checked for hard links once more.
    """
    from ..io import CheckpointError
    from ..io.reader import open_regular_file

    try:
        file = open_regular_file(path)
    except CheckpointError as error:
        raise UnsafeExternalDataError(f"external data {error}") from None
    with file:
        if os.fstat(file.fileno()).st_nlink > 1:  # linked since the checks
            _refuse_hardlinks(path, path)
        file.seek(offset)
        if into is None:
            data = file.read(length)  # a read of a known size fills one bytes object
            got = len(data)
        else:
            data, got = into, 0
            while got < length and (count := file.readinto(into[got:])):
                got += count
    if got != length:
        raise UnsafeExternalDataError(f"external data {path}: shrank to fewer than "
                                      f"{offset + length} bytes while it was read")
    return data


def side_file_name(model_path: str) -> str:
    """The name of a model's weight file: the model's own name plus ``.data``, beside it."""
    return os.path.basename(os.fspath(model_path)) + ".data"


def plan_external(arrays: dict, threshold) -> set:
    """Names of the arrays that go to the side file (``threshold``: bytes, or None = automatic)."""
    if threshold is None:
        total = sum(a.nbytes for a in arrays.values())
        if total <= PROTOBUF_SAFE_BYTES:
            return set()
        threshold = AUTOMATIC_MIN_TENSOR_BYTES
    return {name for name, a in arrays.items() if a.nbytes >= int(threshold)}


def write_side_file(path: str, arrays: dict, names) -> dict:
    """Write the arrays named in ``names`` into the side file of model ``path``, atomically.

    Returns name -> (location, offset, length) for the model to point at.
    """
    from ..io.atomic import write_atomically

    directory = os.path.dirname(os.path.abspath(path))
    location = side_file_name(path)
    checked_location(directory, location, must_exist=False)  # refuses a symlink leading out
    placements, offset = {}, 0
    for name in names:
        offset = -(-offset // ALIGNMENT) * ALIGNMENT
        placements[name] = (location, offset, arrays[name].nbytes)
        offset += arrays[name].nbytes

    def write(file):
        for name in names:
            _, start, _ = placements[name]
            file.seek(start)
            # Little-endian bytes in C order, as ONNX stores raw tensor data.
            file.write(np.ascontiguousarray(arrays[name]).astype(
                arrays[name].dtype.newbyteorder("<"), copy=False).tobytes())
        file.truncate(offset)

    write_atomically(os.path.join(directory, location), write)
    return placements
