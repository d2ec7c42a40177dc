"""``minidl export-onnx MODEL.mdl OUT.onnx --input-shape 1,1,8,8``: a saved model as ONNX.

The model file is rebuilt with ``minidl.load_model`` (data only, nothing from the file is
executed), or, given a training checkpoint written by ``fit``, its model part is (see
:mod:`minidl.training.checkpoint_model`); the example input is zeros of the given shape and
dtype, enough to trace the forward pass. The batch axis is made dynamic unless ``--static-batch`` is given.
"""

from __future__ import annotations

import sys

HELP = "export a minidl model file to ONNX, traced on zeros of --input-shape"


def add_arguments(parser) -> None:
    from . import add_key_argument

    parser.add_argument("model", help="a minidl model file (from minidl.save_model), or a "
                                      "checkpoint written by fit (its model part)")
    parser.add_argument("output", help="the ONNX file to write")
    parser.add_argument("--input-shape", required=True, action="append", metavar="N,C,...",
                        help="shape of the example input, comma separated; repeat it for a model "
                             "with several inputs")
    parser.add_argument("--input-dtype", default="float32",
                        help="dtype of the example input(s) (default float32; int64 for token ids)")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset (default: minidl's)")
    parser.add_argument("--static-batch", action="store_true",
                        help="keep the example's batch size instead of a symbolic 'batch' axis")
    parser.add_argument("--external-data-threshold", type=int, default=None, metavar="BYTES",
                        help="store tensors of at least BYTES bytes in OUT.onnx.data")
    add_key_argument(parser)


def _shape(text: str) -> tuple:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--input-shape {text!r} is not a comma-separated list of integers") \
            from None
    if not shape or any(n < 0 for n in shape):
        raise ValueError(f"--input-shape {text!r} must list non-negative sizes")
    return shape


def _load(path: str, key):
    """A model file's model, or the model part of a ``fit`` checkpoint."""
    from ..io import read_header
    from ..io.errors import WrongKindError
    from ..model_files import load_model

    try:
        return load_model(path, key=key)
    except WrongKindError:
        if read_header(path, key=key).kind != "checkpoint":
            raise
    from ..training.checkpoint_model import model_from_checkpoint
    return model_from_checkpoint(path, key=key)


def run(args) -> int:
    import numpy as np

    from . import printable, read_key
    from ..autograd.tensor import tensor
    from ..io import CheckpointError
    from ..onnx import UnsupportedOperatorError, export_onnx

    try:
        shapes = [_shape(text) for text in args.input_shape]
        dtype = np.dtype(args.input_dtype)
    except (ValueError, TypeError) as error:
        print(f"minidl export-onnx: {printable(error)}", file=sys.stderr)
        return 2
    try:
        model = _load(args.model, read_key(args))
    except (CheckpointError, OSError) as error:
        print(f"minidl export-onnx: {printable(error)}", file=sys.stderr)
        return 1
    examples = [tensor(np.zeros(shape, dtype)) for shape in shapes]
    try:
        export_onnx(model, args.output, examples[0] if len(examples) == 1 else examples,
                    opset=args.opset, dynamic_batch=not args.static_batch,
                    external_data_threshold=args.external_data_threshold)
    except (UnsupportedOperatorError, ValueError, TypeError, OSError) as error:
        print(f"minidl export-onnx: {printable(error)}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0
