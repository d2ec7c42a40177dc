"""Editing a minidl file's header the way a forger (or another program's bug) would.

Checksums detect damage, not deliberate edits: whoever changes the header can recompute
the header and prelude checksums (SPEC.md says how).  Tests use :func:`rewrite_header` to
make exactly such files and check that what the checksums cannot catch is caught
elsewhere (a tensor checksum that binds the dtype, a schema check, a state check).
"""

from __future__ import annotations

import os
import struct

import msgpack

from ..io import layout
from ..io.checksum import checksum


def rewrite_header(path, change) -> None:
    """Decode ``path``'s (unencrypted) header, call ``change(tree)`` to edit it in place,
    and write the file back with the header re-encoded and every header-level checksum
    recomputed.  Tensor bytes and index checksums are left as they were.

    Map keys may be bytes and extension types come back as ``msgpack.ExtType``, so any
    edit, hostile ones included, can be expressed.
    """
    path = os.fspath(path)
    with open(path, "rb") as file:
        data = file.read()
    length = struct.unpack_from("<Q", data, 16)[0]
    data_start = layout.align_up(layout.PRELUDE_SIZE + length)
    tree = msgpack.unpackb(data[layout.PRELUDE_SIZE:layout.PRELUDE_SIZE + length], raw=False,
                           strict_map_key=False,
                           ext_hook=lambda code, raw: msgpack.ExtType(code, raw))
    change(tree)
    header = msgpack.packb(tree, use_bin_type=True)
    prelude = bytearray(data[:layout.PRELUDE_SIZE])
    struct.pack_into("<QQ", prelude, 16, len(header), checksum(header))
    major = struct.unpack_from("<H", prelude, 8)[0]
    if major >= 2:
        struct.pack_into("<Q", prelude, 44, checksum(bytes(prelude[:44])))
    padding = bytes(layout.align_up(layout.PRELUDE_SIZE + len(header))
                    - layout.PRELUDE_SIZE - len(header))
    with open(path, "wb") as file:
        file.write(bytes(prelude) + header + padding + data[data_start:])
