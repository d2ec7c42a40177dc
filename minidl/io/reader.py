"""Reading a minidl file without trusting it.

Order of business: the 64-byte prelude (magic, version, flags, header length), then the
header bytes and their checksum, then the header's schema and the index's arithmetic
(shapes, lengths, offsets against the real file size).  Only when all of that holds is a
single tensor byte read, and only then is memory allocated for it, in amounts the file
size has already justified.  Every failure becomes a ``CheckpointError`` naming the file.
"""

from __future__ import annotations

import mmap as mmap_module
import os
import stat
from dataclasses import dataclass

import numpy as np

from . import crypto, layout
from .dtypes import dtype_name
from .checksum import StreamingChecksum, checksum, tensor_checksum
from .errors import (
    ChecksumMismatchError, CheckpointError, CorruptFileError, DecryptionError,
    MissingFileError, NotAMinidlFileError, UnsupportedVersionError, WrongKindError)
from .header import (
    ENCRYPTION_CHUNK, GCM_TAG_SIZE, Header, TensorEntry, unpack_header, validate_header)


@dataclass
class FileHeader:
    """Everything known about a file after its header was read and validated."""

    path: str
    prelude: layout.Prelude
    header: Header
    file_size: int

    @property
    def kind(self) -> str:
        return self.header.kind

    @property
    def metadata(self) -> dict:
        return self.header.metadata

    @property
    def entries(self) -> list[TensorEntry]:
        return self.header.entries

    @property
    def version(self) -> str:
        return f"{self.prelude.major}.{self.prelude.minor}"

    @property
    def encrypted(self) -> bool:
        return self.prelude.encrypted


def _suffix_hint(path) -> str:
    """A hint when ``path`` lacks the ``.mdl`` that a file beside it has (a name typed
    without its suffix, as Keras users do): the name is suggested, never read silently."""
    with_suffix = os.fspath(path) + ".mdl"
    return f" (did you mean {with_suffix}?)" if os.path.isfile(with_suffix) else ""


def open_regular_file(path):
    """Open ``path`` for binary reading, refusing anything that is not a regular file.

    A FIFO, a socket or a device would block the reader forever or feed it endless bytes,
    and checking with ``os.stat`` first leaves a window in which the name can be swapped.
    So the file is opened without blocking (``O_NONBLOCK`` makes opening a FIFO return at
    once), the open descriptor is checked with ``fstat``, and only a regular file is
    switched back to ordinary blocking reads. Every file minidl reads is opened here.

    The descriptor has one owner at every moment: the opener until it hands the checked
    descriptor over, then ``open`` (which closes it if it fails, a Ctrl-C included) and its
    file object. Closing it here as well once closed a descriptor twice -- with threads,
    possibly another thread's file that had been given the same number in between.
    """
    try:
        return open(path, "rb", opener=_open_checked_descriptor)
    except FileNotFoundError:
        raise MissingFileError(path, "no such file" + _suffix_hint(path)) from None
    except IsADirectoryError:
        raise MissingFileError(path, "is a directory, not a minidl file") from None
    except OSError as exc:
        raise CheckpointError(path, f"cannot open: {exc.strerror or exc}") from None


def _open_checked_descriptor(path, flags: int) -> int:
    """``open``'s opener: a blocking read-only descriptor of ``path``, a regular file."""
    flags = (os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise MissingFileError(path, "is a directory, not a minidl file")
        if not stat.S_ISREG(mode):
            raise NotAMinidlFileError(path, "is not a regular file (a pipe, socket or device "
                                            "is never read as a minidl file)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return fd  # inside the try: until it is handed over, an interrupt still closes it
    except BaseException:
        os.close(fd)  # not handed over yet: still ours alone to close
        raise


def _read_exactly(path, file, size: int, what: str) -> bytes:
    data = file.read(size)
    if len(data) != size:
        raise CorruptFileError(path, f"file is truncated: {what} needs {size} bytes, "
                                     f"only {len(data)} remain")
    return data


def _read_prelude(path, file, file_size: int) -> layout.Prelude:
    raw = file.read(layout.PRELUDE_SIZE)
    if len(raw) < layout.PRELUDE_SIZE:
        if raw[:len(layout.MAGIC)] != layout.MAGIC[:len(raw)] or not raw:
            raise NotAMinidlFileError(path, "not a minidl file (empty or wrong magic bytes)")
        raise CorruptFileError(path, f"file is truncated: {len(raw)} bytes, the fixed "
                                     f"prelude alone is {layout.PRELUDE_SIZE}")
    magic, prelude = layout.Prelude.unpack(raw)
    if magic != layout.MAGIC:
        raise NotAMinidlFileError(path, "not a minidl file (wrong magic bytes)")
    if prelude.major not in layout.READABLE_MAJOR_VERSIONS:
        raise UnsupportedVersionError(
            path, f"format version {prelude.major}.{prelude.minor} is not supported; this "
                  f"reader understands major versions "
                  f"{', '.join(map(str, layout.READABLE_MAJOR_VERSIONS))}")
    # From version 2 on the prelude carries its own checksum, so a flipped bit in the
    # version, flags or lengths is reported as damage instead of being believed.  (A
    # version 2 file damaged into claiming version 1 still fails: its checksum sits in
    # bytes that version 1 requires to be zero.)
    if prelude.major >= 2 and prelude.stored_checksum != layout.computed_prelude_checksum(raw):
        raise ChecksumMismatchError(path, "prelude checksum mismatch: the first 64 bytes "
                                          "(version, flags, header length) are damaged")
    if prelude.flags & ~layout.KNOWN_FLAGS:
        raise UnsupportedVersionError(path, f"file uses unknown feature flags {prelude.flags:#x}")
    if prelude.unused_bytes != bytes(len(prelude.unused_bytes)):
        raise CorruptFileError(path, "reserved prelude bytes are not zero")
    if not prelude.encrypted and prelude.nonce_base != bytes(layout.NONCE_SIZE):
        raise CorruptFileError(path, "nonce field is set in an unencrypted file")
    if prelude.header_length == 0 or prelude.header_length > layout.MAX_HEADER_BYTES:
        raise CorruptFileError(path, f"header length {prelude.header_length} is outside "
                                     f"1..{layout.MAX_HEADER_BYTES}")
    if layout.PRELUDE_SIZE + prelude.header_length > file_size:
        raise CorruptFileError(path, f"header length {prelude.header_length} runs past the end "
                                     f"of the {file_size}-byte file")
    return prelude


def _read_header(path, file, key) -> FileHeader:
    try:
        file_size = os.fstat(file.fileno()).st_size
        prelude = _read_prelude(path, file, file_size)
        stored = _read_exactly(path, file, prelude.header_length, "the header")
    except OSError as exc:
        raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    if checksum(stored) != prelude.header_checksum:
        raise ChecksumMismatchError(path, "header checksum mismatch: the header is damaged")
    if prelude.encrypted:
        if key is None:
            raise DecryptionError(path, "file is encrypted; a key is needed to read it "
                                            "(key= in Python, --key-file on the command line)")
        cipher = _cipher_for_reading(path, key)
        if len(stored) <= GCM_TAG_SIZE:
            raise CorruptFileError(path, "encrypted header is shorter than its tag")
        stored = crypto.decrypt_chunk(path, cipher, prelude.nonce_base, 0, stored, "the header",
                                      associated_data=prelude.pack()[:16])
    elif key is not None:
        # A reader who expects an encrypted (hence authenticated) file must not silently
        # accept a plaintext one that anybody could have written.
        raise DecryptionError(path, "a key was given but the file is not encrypted")
    tree = unpack_header(path, stored,
                         file_size - layout.PRELUDE_SIZE - prelude.header_length)
    header = validate_header(path, tree, prelude, file_size)
    return FileHeader(os.fspath(path), prelude, header, file_size)


def _cipher_for_reading(path, key):
    try:
        return crypto.new_cipher(crypto.check_key(key))
    except (TypeError, ValueError) as exc:
        raise DecryptionError(path, f"unusable key: {exc}") from None
    except ImportError as exc:
        raise DecryptionError(path, str(exc)) from None


def read_header(path, *, key: bytes | None = None) -> FileHeader:
    """Open ``path`` and validate its prelude and header; no tensor data is read.

    This costs one small read whatever the file size (it is what ``load(mmap=True)``
    does at open).  Raises ``CheckpointError`` subclasses on any problem.
    """
    path = os.fspath(path)
    with open_regular_file(path) as file:
        return _read_header(path, file, key)


def expected_data_checksum(info: "FileHeader", entry: TensorEntry, data_checksum: int) -> int:
    """What the index must say for bytes whose plain checksum is ``data_checksum``.

    Version 2 binds the bytes to the entry's name, dtype and shape; version 1 did not.
    """
    if info.prelude.major < 2:
        return data_checksum
    return tensor_checksum(data_checksum, entry.name, dtype_name(entry.dtype), entry.shape)


def _check_tensor(path, info: "FileHeader", entry: TensorEntry, stored) -> None:
    if expected_data_checksum(info, entry, checksum(stored) if entry.length else 0) \
            != entry.checksum:
        raise ChecksumMismatchError(path, f"checksum mismatch in tensor {entry.name!r}: "
                                          "its bytes are damaged")
    _check_bool_bytes(path, entry, stored)


def _check_bool_bytes(path, entry: TensorEntry, plain) -> None:
    """NumPy reads any non-zero byte as True, but such an array misbehaves (``a == True``
    is False for a 2); the format allows only the bytes 0 and 1."""
    if entry.dtype.kind == "b" and entry.nbytes and \
            np.frombuffer(plain, dtype=np.uint8, count=entry.nbytes).max() > 1:
        raise CorruptFileError(path, f"bool tensor {entry.name!r} holds bytes other than 0 and 1")


def _check_padding(path, padding, where: str) -> None:
    if any(padding):
        raise CorruptFileError(path, f"non-zero padding bytes {where}")


def _check_gap(path, file, start: int, length: int, where: str) -> None:
    """The ``length`` padding bytes at ``start`` are zero (SPEC section 4)."""
    if length:
        file.seek(start)
        _check_padding(path, file.read(length), where)


def _read_plain(path, file, info: FileHeader, verify: bool) -> dict[str, np.ndarray]:
    tensors = {}
    data_start = info.prelude.data_start
    header_end = layout.PRELUDE_SIZE + info.prelude.header_length
    if verify:
        _check_gap(path, file, header_end, data_start - header_end, "after the header")
    position = 0
    for entry in info.entries:
        if verify:
            _check_gap(path, file, data_start + position, entry.offset - position,
                       f"before {entry.name!r}")
        array = np.empty(entry.shape, dtype=entry.dtype)
        if not entry.length:  # nothing stored: no I/O, but the index entry is still checked
            if verify:
                _check_tensor(path, info, entry, b"")
            tensors[entry.name] = array
            position = entry.offset
            continue
        target = memoryview(array.reshape(-1).view(np.uint8))
        file.seek(data_start + entry.offset)
        done = 0
        while done < entry.length:
            got = file.readinto(target[done:])
            if not got:
                raise CorruptFileError(path, f"file is truncated inside tensor {entry.name!r}")
            done += got
        if verify:
            _check_tensor(path, info, entry, target)
        tensors[entry.name] = array
        position = entry.offset + entry.length
    return tensors


def _read_encrypted(path, file, info: FileHeader, key, verify: bool) -> dict[str, np.ndarray]:
    cipher = _cipher_for_reading(path, key)
    base = info.prelude.nonce_base
    data_start = info.prelude.data_start
    header_end = layout.PRELUDE_SIZE + info.prelude.header_length
    if verify:  # padding is not encrypted, hence not authenticated: checked like plain files
        _check_gap(path, file, header_end, data_start - header_end, "after the header")
    tensors, counter, position = {}, 1, 0
    for entry in info.entries:
        if verify:
            _check_gap(path, file, data_start + position, entry.offset - position,
                       f"before {entry.name!r}")
        position = entry.offset + entry.length
        array = np.empty(entry.shape, dtype=entry.dtype)
        target = memoryview(array.reshape(-1).view(np.uint8))
        file.seek(info.prelude.data_start + entry.offset)
        stream = StreamingChecksum()
        for start in range(0, entry.nbytes, ENCRYPTION_CHUNK):
            plain_size = min(ENCRYPTION_CHUNK, entry.nbytes - start)
            stored = _read_exactly(path, file, plain_size + GCM_TAG_SIZE, f"tensor {entry.name!r}")
            stream.update(stored)
            target[start:start + plain_size] = crypto.decrypt_chunk(
                path, cipher, base, counter, stored, f"tensor {entry.name!r}")
            counter += 1
        # GCM already authenticated every chunk; the checksum tells plain damage
        # apart from a wrong key in the error message, so it is checked first.
        if verify and expected_data_checksum(info, entry, stream.digest()) != entry.checksum:
            raise ChecksumMismatchError(path, f"checksum mismatch in tensor {entry.name!r}")
        _check_bool_bytes(path, entry, target)
        tensors[entry.name] = array
    return tensors


def _map_tensors(path, file, info: FileHeader, verify: bool,
                 writable: bool) -> dict[str, np.ndarray]:
    if info.file_size == info.prelude.data_start:  # nothing to map (mmap refuses size 0)
        return {e.name: np.empty(e.shape, dtype=e.dtype) for e in info.entries}
    # ACCESS_COPY: pages are shared with the page cache until written, then privately
    # copied -- writable arrays that never write back to the file.
    access = mmap_module.ACCESS_COPY if writable else mmap_module.ACCESS_READ
    mapped = mmap_module.mmap(file.fileno(), 0, access=access)
    data_start = info.prelude.data_start
    if verify:
        _check_padding(path, mapped[layout.PRELUDE_SIZE + info.prelude.header_length:data_start],
                       "after the header")
    tensors, position = {}, 0
    for entry in info.entries:
        start = data_start + entry.offset
        if verify:
            _check_padding(path, mapped[data_start + position:start], f"before {entry.name!r}")
            _check_tensor(path, info, entry, memoryview(mapped)[start:start + entry.length])
        # Read-only views straight into the page cache: nothing is copied or allocated.
        flat = np.frombuffer(mapped, dtype=entry.dtype, count=entry.nbytes // entry.dtype.itemsize,
                             offset=start)
        tensors[entry.name] = flat.reshape(entry.shape)
        position = entry.offset + entry.length
    return tensors


def read_contents(path, *, mmap: bool = False, verify: bool = True,
                  key: bytes | None = None, writable: bool = False,
                  before_data=None) -> tuple[FileHeader, dict[str, np.ndarray]]:
    """Read a minidl file: its validated header and its tensors by name, in file order.

    Every checksum (and the padding) is verified before anything is returned, whether the
    tensors are read into memory or mapped (``mmap=True``: read-only zero-copy arrays;
    verifying reads each mapped byte once, which also brings the pages into the cache).
    ``verify=False`` skips the tensor checksums -- the header is always checked -- and
    is the only way to get a truly lazy mapped open; the bytes are then trusted unread.
    Encrypted files (``key=``) are always decrypted, hence authenticated, into memory.
    ``writable=True`` makes mapped arrays copy-on-write (writes stay in this process).
    ``before_data(info)``, if given, is called with the validated header before any tensor
    byte is read -- the place to refuse a file whose index does not fit what is expected.
    Raises only ``CheckpointError`` subclasses for problems with the file.
    """
    path = os.fspath(path)
    if verify is None:  # the former "verify unless mapped" spelling means: verify
        verify = True
    with open_regular_file(path) as file:
        info = _read_header(path, file, key)
        if before_data is not None:
            before_data(info)
        try:
            if info.encrypted:
                tensors = _read_encrypted(path, file, info, key, verify)
            elif mmap:
                tensors = _map_tensors(path, file, info, verify, writable)
            else:
                tensors = _read_plain(path, file, info, verify)
        except OSError as exc:
            raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
        except (ValueError, MemoryError) as exc:  # e.g. file shrank under us
            raise CorruptFileError(path, f"cannot read tensor data ({exc})") from None
    return info, tensors


def read_file(path, *, mmap: bool = False, verify: bool = True,
              key: bytes | None = None, kind: str | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a minidl file as ``(metadata, tensors)``; see ``read_contents`` for the options.

    ``kind``, when given, is the kind the caller expects ("values", "model",
    "checkpoint"); a file of another kind raises ``WrongKindError`` before any tensor
    is read.  TensorRef objects in ``metadata`` name entries of ``tensors``.
    """
    def check_kind(info: FileHeader) -> None:
        if info.kind != kind:
            raise WrongKindError(path, f"holds a {info.kind!r} file, not a {kind!r} file")

    # The kind is checked on the header that the tensors are then read under: one open, one
    # parse, so the file cannot be swapped between a check and the read it guards.
    info, tensors = read_contents(path, mmap=mmap, verify=verify, key=key,
                                  before_data=None if kind is None else check_kind)
    return info.metadata, tensors


def verify_file(path, *, key: bytes | None = None) -> FileHeader:
    """Check every checksum (and padding) of a file without keeping its tensors."""
    info, _ = read_contents(path, mmap=True, verify=True, key=key)
    return info

