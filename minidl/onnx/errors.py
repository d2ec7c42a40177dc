"""The errors the ONNX exporter and importer raise on purpose."""

from __future__ import annotations


class UnsupportedOperatorError(ValueError):
    """A graph uses operators this side cannot express; ``operators`` lists every one of them.

    All of them are collected before raising, so one attempt tells the whole story instead of
    one missing op per try.
    """

    def __init__(self, message: str, operators=()):
        super().__init__(message)
        self.operators = sorted(set(operators))


class UnsafeExternalDataError(ValueError):
    """An external-data reference points outside the model's directory (or is otherwise unsafe).

    ONNX lets a tensor's bytes live in a side file named by a path stored in the model. A model
    from an untrusted source could name ``../../home/user/.ssh/id_rsa`` or an absolute path and
    make the loader read (or a saver overwrite) a file it was never meant to touch; such
    references are refused before any byte is read.
    """
