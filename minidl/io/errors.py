"""Exceptions raised for problems with minidl files.

Every problem with a file (missing, truncated, corrupted, hostile, wrong version, wrong
key) is reported as a ``CheckpointError`` subclass whose message starts with the file's
path, so callers need exactly one ``except`` clause and users see which file is bad.
Mistakes in what a *program* asks to save (a dict key that is not a string, an object
msgpack cannot store) are ordinary ``TypeError``/``ValueError``: they are bugs in code,
not problems with a file.
"""

from __future__ import annotations

import os


def printable(text) -> str:
    """``text`` safe to print on a terminal: control characters (escape sequences that
    could recolour, retitle or rewrite the screen), bidi overrides and other invisible
    characters a file may put in its names are shown escaped, as Python's repr does.
    Messages about files go through it wherever they reach a terminal (the command line,
    warnings)."""
    text = str(text)
    return text if text.isprintable() else repr(text)[1:-1]


class CheckpointError(Exception):
    """Base class: something is wrong with a minidl file (or with reading it)."""

    def __init__(self, path, problem: str) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path is not None else problem)


class MissingFileError(CheckpointError):
    """The file does not exist (or is not a regular file that can be opened)."""


class CorruptFileError(CheckpointError):
    """The bytes do not form a valid minidl file: truncated, malformed or damaged."""


class NotAMinidlFileError(CorruptFileError):
    """The file does not start with the minidl magic bytes."""


class ChecksumMismatchError(CorruptFileError):
    """A stored checksum does not match the data (the tensor or the header is named)."""


class UnsupportedVersionError(CheckpointError):
    """The file uses a major format version (or a feature flag) this reader does not know."""


class UnsafeFileError(CheckpointError):
    """The file asks for something a loader must never do: a looser policy, a dtype off
    the allow-list, or code to import."""


class DecryptionError(CheckpointError):
    """The file is encrypted and the key is missing or wrong, or the ciphertext was altered."""


class WrongKindError(CheckpointError):
    """The file is valid but holds another kind of content (e.g. a checkpoint, not a model)."""


class ModelSpecError(CheckpointError):
    """A model file's topology cannot be rebuilt (unknown or unregistered layer, bad args)."""
