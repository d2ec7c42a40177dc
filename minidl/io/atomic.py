"""Replace a file all at once or not at all.

The bytes go to a temporary file in the same directory (same filesystem, so the final
rename is atomic), which is flushed and fsynced before ``os.replace`` puts it in place;
the directory is then fsynced so the rename itself survives a power cut.  Whatever
fails (an exception, a full disk, Ctrl-C), the previous file at ``path`` is untouched
and the temporary file is removed.  Only a hard kill can leave a temporary file behind,
and it never carries the final name.
"""

from __future__ import annotations

import os
import secrets
from typing import BinaryIO, Callable

TEMP_SUFFIX = ".tmp"


def temp_path_for(path: str) -> str:
    """A fresh hidden name beside ``path`` for the file being written."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")


def final_name_of_temp(name: str) -> str | None:
    """The final file name a temporary name from :func:`temp_path_for` was for, else None.

    Lets a directory's owner recognise (and clean up) what an interrupted write left behind.
    """
    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
        return None
    final, _, random_part = name[1:-len(TEMP_SUFFIX)].rpartition(".")
    return final if final and len(random_part) == 12 and all(
        c in "0123456789abcdef" for c in random_part) else None


def fsync_directory(directory: str) -> None:
    """Make a rename inside ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # e.g. Windows: directory entries are made durable by the rename itself
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the data itself is synced
    finally:
        os.close(fd)


def write_atomically(path, write_fn: Callable[[BinaryIO], None], *, durable: bool = True) -> None:
    """Call ``write_fn(file)`` on a temporary file, then atomically move it to ``path``.

    ``durable=False`` skips the fsyncs (faster, still atomic against crashes of the
    process but not of the machine).
    """
    path = os.fspath(path)
    temp = temp_path_for(path)
    # 0o666 and O_EXCL: the usual permissions after the umask, and never a file someone
    # else created under our temporary name.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            write_fn(file)
            file.flush()
            if durable:
                os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    if durable:
        fsync_directory(os.path.dirname(os.path.abspath(path)))
