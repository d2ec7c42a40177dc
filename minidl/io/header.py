"""The msgpack header: packing it, and unpacking and validating it without trusting it.

Unpacking is where a hostile file first gets a say, so it is locked down: strings must
be valid UTF-8, map keys must be strings and unique, every length is bounded by the
header's own size, the only extension type is the tensor reference, and the decoded
tree may hold only plain data (no timestamps, no unknown objects) nested at most
``MAX_NESTING`` deep.  Validation then checks every index entry (name, dtype, shape,
offset, length, checksum) and that the tensors tile the data section exactly: no
overlaps, no gaps beyond alignment padding, no trailing bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import repeat

import msgpack
import numpy as np

from . import layout
from .dtypes import dtype_from_name
from .errors import CorruptFileError, UnsafeFileError
from .state_tree import StateTreeError, UnstorableError, check_plain_leaf, check_tree

# Extension type 1 is the only one: a reference to a tensor in the index, by name.
TENSOR_REF_EXT = 1

# Plaintext bytes per AES-GCM chunk of an encrypted tensor (a constant of the format).
ENCRYPTION_CHUNK = 1 << 22
GCM_TAG_SIZE = 16

REQUIRED_KEYS = ("kind", "metadata", "tensors")
# Every kind of file the format defines (SPEC sections 6 and 9); any other is refused.
KINDS = ("values", "model", "checkpoint", "checkpoint-shard")
ENTRY_KEYS = ("name", "dtype", "shape", "offset", "length", "checksum")
_KNOWN_SETS = {keys: frozenset(keys) for keys in (REQUIRED_KEYS, ENTRY_KEYS)}

# Fields that would ask a loader to lower its guard or to run code.  They are refused
# wherever a header or an index entry carries them, whatever the minor version.
FORBIDDEN_KEYS = frozenset({
    "allow_pickle", "pickle", "pickled", "verify", "no_verify", "skip_verify", "trust",
    "trusted", "trust_remote_code", "unsafe", "policy", "import", "imports", "module_path",
    "code", "eval", "exec", "callable", "loader", "hook", "hooks", "reduce", "class_path",
})


@dataclass(frozen=True)
class TensorRef:
    """Stands in the metadata tree for the tensor of the given name in the index."""

    name: str


@dataclass(frozen=True)
class TensorEntry:
    """One validated row of the tensor index."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int
    length: int
    checksum: int

    @property
    def nbytes(self) -> int:
        """Plaintext size: product of the shape times the item size."""
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass
class Header:
    """A validated header: what the file holds and where each tensor lies."""

    kind: str
    metadata: dict
    entries: list[TensorEntry] = field(default_factory=list)


def stored_length(nbytes: int, encrypted: bool) -> int:
    """Bytes a tensor of ``nbytes`` plaintext bytes occupies in the data section."""
    if not encrypted:
        return nbytes
    return nbytes + GCM_TAG_SIZE * encryption_chunk_count(nbytes)


def encryption_chunk_count(nbytes: int) -> int:
    """Number of AES-GCM chunks a tensor of ``nbytes`` plaintext bytes is split into."""
    return -(-nbytes // ENCRYPTION_CHUNK)


# ---------------------------------------------------------------------------- packing

def _pack_default(obj):
    if isinstance(obj, TensorRef):
        return msgpack.ExtType(TENSOR_REF_EXT, obj.name.encode("utf-8"))
    raise TypeError(f"cannot store an object of type {type(obj).__name__} in a minidl header")


def _check_header_leaf(value, path: str) -> None:
    """A header leaf is a msgpack scalar or a tensor reference."""
    if not isinstance(value, TensorRef):
        check_plain_leaf(value, path)


def pack_header(kind: str, metadata: dict, entries: list[dict]) -> bytes:
    """Serialise a header map; TypeError/ValueError naming the field when it holds values a
    reader would refuse (keys that are not str, other objects, nesting too deep)."""
    header = {"kind": kind, "metadata": metadata, "tensors": entries}
    size = check_tree(header, "header", check_leaf=_check_header_leaf)
    decoded_cost = size.containers * CONTAINER_COST + size.items * ITEM_COST
    packed = msgpack.packb(header, use_bin_type=True, default=_pack_default, strict_types=False)
    # The data section is at least the tensors' bytes (padding only adds): a reader's budget
    # is never smaller than this one.
    data_bytes = sum(entry["length"] for entry in entries)
    if decoded_cost + len(packed) > decoding_budget(data_bytes):
        raise ValueError("the header holds more small maps, arrays and items than readers "
                         "decode (see minidl.io.set_header_memory_limit); store large data "
                         "as arrays, not metadata")
    return packed


# -------------------------------------------------------------------------- unpacking

# What decoding may cost.  msgpack is dense -- an empty map is one byte, a Python dict
# over a hundred -- so a header's byte cap alone would let 256 MiB of empty maps cost
# 36 GiB.  Decoding therefore keeps an estimate of the memory it has built (per map or
# array, per element, plus the bytes of strings) and stops once it passes the budget of
# :func:`decoding_budget`; each container's length is capped too, so that no single array
# is preallocated past it.  The constants are close to CPython's real costs (a dict or list
# object, a slot plus a small object; a short string costs what the estimate says).
#
# The budget is what keeps the promise that reading any file needs at most 2 x its size +
# 64 MB: a fixed part (DEFAULT_DECODED_LIMIT), which the readers that hold the decoded tree
# and one working copy of it at once (``minidl inspect``, a checkpoint restore) stay within
# twice over, plus half the data section, which only files whose tensors are that big
# anyway may spend. The header's own bytes are held twice on top (read, and re-encoded to
# check its form): within the 2 x file size.
CONTAINER_COST = 128
ITEM_COST = 56
DEFAULT_DECODED_LIMIT = 16 << 20
_decoded_limit = DEFAULT_DECODED_LIMIT


def decoding_budget(data_bytes: int) -> int:
    """Estimated bytes of Python objects a header may decode to, in a file whose data
    section is ``data_bytes`` long: the limit plus half the data section."""
    return _decoded_limit + max(0, data_bytes) // 2


def set_header_memory_limit(limit: int) -> int:
    """Let headers decode to (an estimated) ``limit`` bytes of Python objects, plus half the
    size of the file's data section; returns the previous limit.  The default, 16 MiB, is
    far above what minidl itself writes and keeps every reader within 2 x the file size +
    64 MB; raise it for trusted files with huge metadata trees (the memory promise then grows
    by about twice the raise)."""
    global _decoded_limit
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValueError(f"the header memory limit must be a positive int, got {limit!r}")
    previous, _decoded_limit = _decoded_limit, limit
    return previous


def get_header_memory_limit() -> int:
    """The current limit of :func:`set_header_memory_limit`."""
    return _decoded_limit


class _Refused(Exception):
    """Raised inside msgpack hooks; turned into a CheckpointError naming the file."""

    def __init__(self, error_type, problem):
        super().__init__(problem)
        self.error_type, self.problem = error_type, problem


class _DecodeBudget:
    """The msgpack container hooks: count what decoding builds, and refuse keys that are
    not strings and duplicate keys, as soon as each map or array is complete."""

    def __init__(self, header_size: int, data_bytes: int):
        self.limit = decoding_budget(data_bytes)
        self.spent = header_size  # strings and binaries cost at most their bytes again

    def _spend(self, items: int) -> None:
        self.spent += CONTAINER_COST + ITEM_COST * items
        if self.spent > self.limit:
            raise _Refused(CorruptFileError, f"header decodes to more than {self.limit} bytes "
                                             f"of objects (raise the limit with minidl.io."
                                             f"set_header_memory_limit if the file is trusted)")

    def pairs(self, pairs):
        self._spend(2 * len(pairs))
        result = dict(pairs)
        # msgpack also allows binary keys; the format does not (and code that reads the
        # header, like ``key.startswith``, would trip over them), so they are damage.
        if len(result) != len(pairs) or not all(map(isinstance, result, repeat(str))):
            seen = set()
            for key, _ in pairs:
                if not isinstance(key, str):
                    raise _Refused(CorruptFileError, f"header has a map key that is not a "
                                                     f"string ({type(key).__name__} {key!r:.40})")
                if key in seen:
                    raise _Refused(CorruptFileError, f"header has a duplicate map key {key!r}")
                seen.add(key)
        return result

    def array(self, items):
        self._spend(len(items))
        return items


def _ext_hook(code, data):
    if code != TENSOR_REF_EXT:
        raise _Refused(UnsafeFileError, f"header uses unknown msgpack extension type {code}")
    try:
        return TensorRef(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Refused(CorruptFileError, "tensor reference is not valid UTF-8") from None


# Exact types: msgpack builds no subclasses, so anything else (a Timestamp) is foreign.
_PLAIN_LEAF_TYPES = frozenset({str, bytes, int, float, bool, type(None), TensorRef})


def _check_decoded_leaf(value, path: str) -> None:
    if type(value) not in _PLAIN_LEAF_TYPES:
        raise UnstorableError(path, f"holds a {type(value).__name__}, not plain data")


def unpack_header(path, raw: bytes, data_bytes: int = 0) -> dict:
    """Decode header bytes into a plain tree, refusing anything not plain data, and
    stopping early when the decoded tree would cost more memory than the budget of a file
    whose data section is ``data_bytes`` long (:func:`decoding_budget`)."""
    budget = _DecodeBudget(len(raw), data_bytes)
    max_items = min(len(raw), budget.limit // ITEM_COST)
    try:
        tree = msgpack.unpackb(
            raw, raw=False, unicode_errors="strict", strict_map_key=True, use_list=True,
            object_pairs_hook=budget.pairs, list_hook=budget.array, ext_hook=_ext_hook,
            max_str_len=len(raw), max_bin_len=len(raw), max_array_len=max_items,
            max_map_len=max_items // 2, max_ext_len=len(raw))
    except _Refused as refused:
        raise refused.error_type(path, refused.problem) from None
    except RecursionError:
        raise CorruptFileError(path, "header is nested too deeply") from None
    except ValueError as exc:
        if "exceeds max_" not in str(exc):  # msgpack's words for a length over our caps
            raise CorruptFileError(path, f"header is not valid msgpack ({exc})") from None
        raise CorruptFileError(path, f"header holds a map or array longer than the "
                                     f"{budget.limit}-byte decoding budget allows ({exc}; raise "
                                     f"it with minidl.io.set_header_memory_limit if the file is "
                                     f"trusted)") from None
    except Exception as exc:  # msgpack reports malformed input with several types
        raise CorruptFileError(path, f"header is not valid msgpack ({exc})") from None
    if not isinstance(tree, dict):
        raise CorruptFileError(path, "header is not a msgpack map")
    _check_decoded_tree(path, tree)
    # One tree, one encoding: re-encoding must give back the very bytes.  This refuses
    # 32-bit floats (the format's floats are 64-bit) and values stored longer than needed,
    # so no two headers differ in bytes but not in meaning.
    if msgpack.packb(tree, use_bin_type=True, default=_pack_default) != raw:
        raise CorruptFileError(path, "header is not in msgpack's shortest form (a 32-bit "
                                     "float, or a value stored in more bytes than needed)")
    return tree


def _check_decoded_tree(path, tree) -> None:
    """Depth and leaf types, with memory that grows with the nesting, never with the number
    of items (see :func:`~minidl.io.state_tree.check_tree`); keys were checked by the
    decoder's hooks."""
    try:
        check_tree(tree, "header", check_leaf=_check_decoded_leaf)
    except UnstorableError as exc:
        raise UnsafeFileError(path, f"header {exc.problem} (at {exc.path})") from None
    except StateTreeError as exc:
        raise CorruptFileError(path, f"header is {exc.problem} (at {exc.path})") from None


# ------------------------------------------------------------------------- validation

def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_keys(path, mapping: dict, known: tuple, where: str, newer_minor: bool) -> None:
    if mapping.keys() == _KNOWN_SETS[known]:  # the usual case, checked in C: nothing to refuse
        return
    for key in mapping:
        if key in FORBIDDEN_KEYS or key.startswith("__"):
            raise UnsafeFileError(path, f"{where} carries the field {key!r}, which a minidl "
                                        "loader never honours (no pickle, no code, no skipped checks)")
    missing = [k for k in known if k not in mapping]
    if missing:
        raise CorruptFileError(path, f"{where} lacks the field(s) {', '.join(missing)}")
    unknown = [k for k in mapping if k not in known]
    # Minor versions only ever add optional fields, so a newer file's extra fields can
    # be ignored; in a file of our own minor version they mean damage or forgery.
    if unknown and not newer_minor:
        raise CorruptFileError(path, f"{where} has unknown field(s) {', '.join(map(repr, unknown))}")


def validate_header(path, tree: dict, prelude: layout.Prelude, file_size: int) -> Header:
    """Check the header's schema and that its index tiles the data section exactly."""
    newer_minor = prelude.minor > layout.MINOR_VERSION
    _check_keys(path, tree, REQUIRED_KEYS, "header", newer_minor)
    kind, metadata, raw_entries = tree["kind"], tree["metadata"], tree["tensors"]
    if kind not in KINDS:
        raise CorruptFileError(path, f"header field 'kind' is {str(kind)[:64]!r}, not one of "
                                     f"{', '.join(map(repr, KINDS))}")
    if not isinstance(metadata, dict):
        raise CorruptFileError(path, "header field 'metadata' must be a map")
    if not isinstance(raw_entries, list):
        raise CorruptFileError(path, "header field 'tensors' must be an array")
    if len(raw_entries) > layout.MAX_TENSORS:
        raise CorruptFileError(path, f"header lists more than {layout.MAX_TENSORS} tensors")

    data_size = file_size - prelude.data_start
    if data_size < 0:
        raise CorruptFileError(path, "file ends inside the header padding")
    entries, names, expected_offset = [], set(), 0
    for position, raw in enumerate(raw_entries):
        entry = _validate_entry(path, raw, position, prelude, newer_minor, data_size)
        if entry.name in names:
            raise CorruptFileError(path, f"tensor {entry.name!r} is listed twice")
        names.add(entry.name)
        # Tensors follow each other in index order, each at the next 64-byte boundary:
        # anything else is an overlap, a gap, or an attempt to alias another tensor.
        if entry.offset != expected_offset:
            raise CorruptFileError(
                path, f"tensor {entry.name!r} starts at offset {entry.offset}, expected "
                      f"{expected_offset} (tensors must be packed in order, 64-byte aligned)")
        end = entry.offset + entry.length
        if end > data_size:
            raise CorruptFileError(path, f"tensor {entry.name!r} ends past the end of the file "
                                         f"(needs {end} data bytes, file has {data_size})")
        entries.append(entry)
        expected_offset = layout.align_up(end)
    data_end = entries[-1].offset + entries[-1].length if entries else 0
    if data_end != data_size:
        raise CorruptFileError(path, f"{data_size - data_end} unexpected bytes after the last tensor")
    return Header(kind, metadata, entries)


def _validate_entry(path, raw, position, prelude, newer_minor, data_size) -> TensorEntry:
    where = f"tensor #{position}"
    if not isinstance(raw, dict):
        raise CorruptFileError(path, f"{where} in the index is not a map")
    _check_keys(path, raw, ENTRY_KEYS, where, newer_minor)
    name = raw["name"]
    if not isinstance(name, str) or not 0 < len(name) <= 4096:
        raise CorruptFileError(path, f"{where} has an invalid name")
    where = f"tensor {name!r}"
    dtype = dtype_from_name(raw["dtype"])
    if dtype is None:
        raise UnsafeFileError(path, f"{where} has dtype {raw['dtype']!r}, which is not on the "
                                    "allow-list (plain numeric and bool types only)")
    shape = raw["shape"]
    if not isinstance(shape, list) or len(shape) > layout.MAX_NDIM:
        raise CorruptFileError(path, f"{where} has an invalid shape")
    if not (all(map(_is_int, shape)) and min(shape, default=0) >= 0):
        raise CorruptFileError(path, f"{where} has a shape with negative or non-integer dims: {shape}")
    # Python integers cannot overflow, so the product is exact however hostile the dims;
    # comparing it to the bytes actually present rejects absurd shapes before any allocation.
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > data_size:
        raise CorruptFileError(path, f"{where} claims {nbytes} bytes, more than the file holds")
    offset, length, check = raw["offset"], raw["length"], raw["checksum"]
    if not (_is_int(offset) and offset >= 0):
        raise CorruptFileError(path, f"{where} has an invalid offset {offset!r}")
    if not (_is_int(length) and length == stored_length(nbytes, prelude.encrypted)):
        raise CorruptFileError(path, f"{where} has length {length!r}, but its shape {shape} and "
                                     f"dtype {dtype.name} need {stored_length(nbytes, prelude.encrypted)}")
    if not (_is_int(check) and 0 <= check < 1 << 64):
        raise CorruptFileError(path, f"{where} has an invalid checksum field")
    return TensorEntry(name, dtype, tuple(shape), offset, length, check)


__all__ = ["TensorRef", "TensorEntry", "Header", "pack_header", "unpack_header",
           "validate_header", "stored_length"]
