"""Fetching a data set's files once, into a cache directory, and trusting them only by their
SHA-256.

A file is used only when its SHA-256 is the one published for it, so a truncated download, a
changed mirror or a damaged disk is refused with the reason instead of training on wrong data.
A download streams into a temporary file beside the target and is hashed on the way; it takes
the final name only when the hash matches (:func:`minidl.io.atomic.write_atomically`), so a
failed or interrupted download never leaves a file that looks complete.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request

_CHUNK = 1 << 20
# Seconds without a byte before a mirror counts as unreachable.
_TIMEOUT_SECONDS = 60


class DatasetFileError(RuntimeError):
    """A data set file is missing (and could not be downloaded) or damaged."""


def sha256_of(path: str) -> str:
    """The hex SHA-256 of the file at ``path``, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(url: str, path: str, sha256: str) -> None:
    from ..io.atomic import write_atomically

    def write(out):
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=_TIMEOUT_SECONDS) as response:
            for block in iter(lambda: response.read(_CHUNK), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != sha256:
            raise DatasetFileError(f"{url} sent a file whose SHA-256 is {digest.hexdigest()}, "
                                   f"expected {sha256}")

    write_atomically(path, write, durable=False)


def fetch(directory: str, filename: str, sha256: str, mirrors, download: bool) -> str:
    """The path of ``filename`` in ``directory``, checked against ``sha256``.

    A missing file is downloaded from the first of ``mirrors`` (base URLs) that delivers it
    intact when ``download`` is true, else refused; a file with the wrong hash is refused --
    or, with ``download``, replaced by a fresh copy.
    """
    path = os.path.join(directory, filename)
    if os.path.exists(path):
        actual = sha256_of(path)
        if actual == sha256:
            return path
        if not download:
            raise DatasetFileError(
                f"{path} is damaged or not the expected file: its SHA-256 is {actual}, expected "
                f"{sha256}; delete it, or pass download=True to fetch it again")
    elif not download:
        raise DatasetFileError(f"{path} does not exist; pass download=True to fetch it, or put "
                               f"the file there yourself")
    os.makedirs(directory, exist_ok=True)
    failures = []
    for mirror in mirrors:
        url = mirror.rstrip("/") + "/" + filename
        try:
            _download(url, path, sha256)
            return path
        except (OSError, urllib.error.URLError, DatasetFileError) as error:
            failures.append(f"{url}: {error}")
    raise DatasetFileError(
        f"could not download {filename} (are you offline?) -- " + "; ".join(failures) +
        f". Put the file with SHA-256 {sha256} at {path} yourself to use it offline")
