"""Following the batch axis through shape-changing ops.

A graph exported with a dynamic batch must not bake the example's batch size into the shapes it
writes down. These helpers say where the batch axis ends up after an op, and rewrite a concrete
Reshape target so the batch entry becomes "-1" (ONNX: infer this one from the element count).
"""

from __future__ import annotations

import math


def after_broadcast(batch_axes_and_ndims, out_ndim: int):
    """Batch axis of an elementwise result: operands align on their trailing axes."""
    for axis, ndim in batch_axes_and_ndims:
        if axis is not None:
            return axis + out_ndim - ndim
    return None


def after_reduction(axis, reduced_axes, keepdims: bool):
    """Batch axis after reducing ``reduced_axes`` (None: all of them); None once it is reduced."""
    if axis is None or reduced_axes is None or axis in reduced_axes:
        return None
    return axis if keepdims else axis - sum(1 for a in reduced_axes if a < axis)


def reshape_target(in_shape, out_shape, axis):
    """(target for ONNX Reshape, batch axis of the result) for a reshape traced on an example.

    If the batch axis survives as a whole output axis (the usual flatten/unflatten of the other
    axes), that entry becomes -1 and the result keeps a batch axis. If it is merged with other
    axes into one output axis, that axis becomes -1 and the batch is no longer an axis of its
    own. Otherwise the example's shape is written as it is (and works at that batch size only).
    """
    target = [int(n) for n in out_shape]
    if axis is None:
        return target, None
    batch = in_shape[axis]
    before, after = math.prod(in_shape[:axis]), math.prod(in_shape[axis + 1:])
    candidates = [j for j in range(len(out_shape))
                  if math.prod(out_shape[:j]) == before and out_shape[j] == batch
                  and math.prod(out_shape[j + 1:]) == after]
    if candidates:
        j = axis if axis in candidates else candidates[0]
        target[j] = -1
        return target, j
    for j in range(len(out_shape)):
        if (math.prod(out_shape[:j]) == before and batch and out_shape[j] % batch == 0
                and math.prod(out_shape[j + 1:]) * (out_shape[j] // batch) == after):
            target[j] = -1
            return target, None
    return target, None
