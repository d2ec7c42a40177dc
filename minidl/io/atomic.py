"""Replace a file all at once or not at all.

The bytes go to a temporary file in the same directory (same filesystem, so the final
rename is atomic), which is flushed and fsynced before ``os.replace`` puts it in place;
the directory is then fsynced so the rename itself survives a power cut.  Whatever
fails (an exception, a full disk, Ctrl-C), the previous file at ``path`` is untouched
and the temporary file is removed.  Only a hard kill can leave a temporary file behind,
and it never carries the final name.

**Whose temporary file is it?**  Several processes may write into one directory (a trainer
saving while an evaluator reads).  A temporary name says who is writing it::

    .<final name>.<host>-<pid>-<process start>-<random>.tmp

(``host`` is a short hash of the host name, ``process start`` the kernel's start time of
the writing process where the system tells it, else 0).  A leftover is removed only when
its writer is certainly gone: same host, and no process with that pid -- or one that
started at another time, so the pid was reused.  Files of other hosts, and of writers that
cannot be identified, are removed only once untouched for a day.  Every completed write
cleans up what killed writes of the same target left behind.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import socket
import stat
import time
from typing import BinaryIO, Callable

TEMP_SUFFIX = ".tmp"
# A temporary file nobody can vouch for is kept this long after its last write.
UNOWNED_TEMP_LIFETIME = 24 * 3600

_OWNED = re.compile(r"\.(?P<final>.+)\.(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]{1,10})-"
                    r"(?P<start>[0-9]{1,20})-[0-9a-f]{8}" + re.escape(TEMP_SUFFIX), re.ASCII)
# Names written before owners were recorded: a random part only.
_UNOWNED = re.compile(r"\.(?P<final>.+)\.[0-9a-f]{12}" + re.escape(TEMP_SUFFIX), re.ASCII)


@functools.lru_cache(maxsize=1)
def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started, in the kernel's clock ticks since boot (Linux), 0 when
    it runs but the system does not say when it started, None when there is no such process."""
    if not _process_exists(pid):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()
        return int(fields[19])  # field 22 of proc(5)'s stat; fields[0] is field 3
    except (OSError, ValueError, IndexError):
        return 0  # no /proc (macOS), or it hides other users' processes


def _process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists; True where that cannot be asked safely."""
    if os.name != "posix":
        return True  # os.kill would terminate it on Windows: assume alive, never delete
    try:
        os.kill(pid, 0)  # signal 0: only the existence and permission checks
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # another user's process (it exists), or a pid too large to ask about
    return True


def temp_path_for(path: str) -> str:
    """A fresh hidden name beside ``path`` for the file being written, naming its writer."""
    directory, name = os.path.split(os.path.abspath(path))
    pid = os.getpid()
    owner = f"{_host_tag()}-{pid}-{process_start_time(pid) or 0}-{secrets.token_hex(4)}"
    return os.path.join(directory, f".{name}.{owner}{TEMP_SUFFIX}")


def final_name_of_temp(name: str) -> str | None:
    """The final file name a temporary name from :func:`temp_path_for` was for, else None.

    Lets a directory's owner recognise (and clean up) what an interrupted write left behind.
    """
    match = _OWNED.fullmatch(name) or _UNOWNED.fullmatch(name)
    return match.group("final") if match else None


def temp_is_abandoned(directory: str, name: str, now: float | None = None) -> bool:
    """Whether the temporary file ``name`` in ``directory`` belongs to a write that can no
    longer finish: its writer is certainly dead, or nobody can vouch for a file untouched
    for :data:`UNOWNED_TEMP_LIFETIME` seconds."""
    match = _OWNED.fullmatch(name)
    if match and match.group("host") == _host_tag():
        start = process_start_time(int(match.group("pid")))
        if start is None:
            return True  # no such process
        recorded = int(match.group("start"))
        if start and recorded and start != recorded:
            return True  # the pid now belongs to a later process
        return False  # alive (or cannot be told apart from alive)
    if not (match or _UNOWNED.fullmatch(name)):
        return False
    try:
        modified = os.lstat(os.path.join(directory, name)).st_mtime
    except OSError:
        return False
    return (time.time() if now is None else now) - modified > UNOWNED_TEMP_LIFETIME


def remove_abandoned_temps(path) -> list[str]:
    """Remove the abandoned temporary files of writes to ``path``; returns their names."""
    directory, final = os.path.split(os.path.abspath(os.fspath(path)))
    removed = []
    try:
        names = [entry.name for entry in os.scandir(directory)
                 if entry.name.startswith(f".{final}.") and entry.name.endswith(TEMP_SUFFIX)]
    except OSError:
        return removed
    for name in names:
        if final_name_of_temp(name) == final and temp_is_abandoned(directory, name):
            try:
                os.remove(os.path.join(directory, name))
                removed.append(name)
            except OSError:
                pass  # gone already, or not ours to remove
    return removed


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


def write_atomically(path, write_fn: Callable[[BinaryIO], None], *, durable: bool = True,
                     mode: int | None = None) -> None:
    """Call ``write_fn(file)`` on a temporary file, then atomically move it to ``path``.

    ``durable=False`` skips the fsyncs (faster, still atomic against crashes of the
    process but not of the machine).  The new file keeps the permission bits of the file
    it replaces; a new file gets ``mode`` (default ``0o666``, less the umask either way).
    After a successful write, leftovers of killed writes to ``path`` are removed.
    """
    path = os.fspath(path)
    if os.path.isdir(path):  # else the rename fails, naming our temporary file
        raise IsADirectoryError(f"{path}: is a directory; give the name of a file to write, "
                                f"e.g. {os.path.join(path, 'model.mdl')}")
    try:
        replaced_mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        replaced_mode = None
    temp = temp_path_for(path)
    # O_EXCL: never a file someone else created under our temporary name.  A new file gets
    # ``mode`` less the umask (the kernel applies it); a replacement, the old file's bits.
    create_mode = 0o600 if replaced_mode is not None else (0o666 if mode is None else mode)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 create_mode)
    try:
        with os.fdopen(fd, "wb") as file:
            if replaced_mode is not None:
                _chmod(file, temp, replaced_mode)
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
    remove_abandoned_temps(path)


def _chmod(file, name: str, mode: int) -> None:
    try:
        os.fchmod(file.fileno(), mode)
    except (AttributeError, OSError):  # no fchmod (Windows): by name
        try:
            os.chmod(name, mode)
        except OSError:
            pass

