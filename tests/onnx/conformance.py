"""The ONNX backend node conformance cases, generated from the installed ``onnx`` package.

The ``onnx`` wheel no longer ships the cases' data files; it ships the Python definitions that
write them (``onnx.backend.test.case.node``): each calls ``expect(node, inputs, outputs)`` and
``collect_testcases()`` gathers every (model, inputs, expected outputs) they produce. This module
runs each case whose operator minidl's importer claims and sorts the outcome into

* ``pass``: every output has the expected dtype, shape and values (the case's rtol/atol;
  float16 outputs to 2 units in the last place);
* ``refused``: import or the forward pass raised an error naming what is not supported;
* ``wrong``: it ran and produced something else — a silent wrong result, never acceptable.

``python tests/onnx/conformance.py`` prints the figures per operator and every case that does
not pass.
"""

from __future__ import annotations

import collections
import functools
import sys
import warnings

import numpy as np

# Element types declared out of scope: minidl computes in NumPy's types, which have no float8,
# 4-bit, 2-bit, bfloat16, string or complex arrays.
OUT_OF_SCOPE_TYPES = {"FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
                      "FLOAT8E8M0", "UINT4", "INT4", "FLOAT4E2M1", "BFLOAT16", "STRING",
                      "COMPLEX64", "COMPLEX128", "UINT2", "INT2"}


@functools.lru_cache(maxsize=None)
def all_cases() -> tuple:
    """Every node case the installed onnx defines (generated once per process: ~8 s)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(node.collect_testcases())


def _case_op(case, by_name) -> str:
    """The operator a case tests: its single node's type (expanded cases: their source's)."""
    base = case.name.split("_expanded")[0]
    source = by_name.get(base, case)
    nodes = source.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else ""


def _element_types(model) -> set:
    from onnx import TensorProto

    names = set()
    values = list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info)
    for value in values:
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            names.add(kind.upper() if kind else "NONE")
            continue
        names.add(TensorProto.DataType.Name(value.type.tensor_type.elem_type))
    for node in model.graph.node:
        for attribute in node.attribute:
            if attribute.name == "to":
                names.add(TensorProto.DataType.Name(attribute.i))
    return names


def in_scope_cases(supported) -> list:
    """(op, case) for every case of a supported operator that uses only in-scope types."""
    cases = all_cases()
    by_name = {c.name: c for c in cases}
    chosen = []
    for case in cases:
        op = _case_op(case, by_name)
        if op in supported and not (_element_types(case.model) & OUT_OF_SCOPE_TYPES):
            chosen.append((op, case))
    return chosen


# float16 has 11 significant bits: a sum computed in another order (a matrix product, a
# softmax) may round 2 units in the last place away, a relative 2·2⁻¹⁰, which is more than the
# cases' rtol of 1e-3. onnxruntime differs from the expected values by as much.
FLOAT16_RTOL = 2 * 2.0 ** -10


def _matches(actual, expected, rtol, atol) -> bool:
    expected = np.asarray(expected)
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    if expected.dtype.kind in "biu":
        return bool(np.array_equal(actual, expected))
    if expected.dtype == np.float16:
        rtol = max(rtol, FLOAT16_RTOL)
    return bool(np.allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True))


def _array(value) -> np.ndarray:
    """A case's input or output: an array, or a TensorProto (cases with float16 and friends)."""
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


def run_case(case) -> tuple:
    """(outcome, detail) for one case: 'pass', 'refused' (with the error) or 'wrong'."""
    import minidl as md
    from minidl.onnx.importer import module_from_proto

    inputs, expected = ([_array(v) for v in values] for values in case.data_sets[0])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = module_from_proto(case.model)
            with md.no_grad():
                outputs = module(*[np.asarray(x) for x in inputs])
    except (ValueError, TypeError, IndexError, NotImplementedError) as error:
        return "refused", f"{type(error).__name__}: {error}"
    except Exception as error:  # noqa: BLE001 - reported as a crash, the worst refusal
        return "crash", f"{type(error).__name__}: {error}"
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    if _draws_a_dropout_mask(case, inputs):
        return _check_random_dropout(inputs, [o.numpy() for o in outputs])
    if len(outputs) != len(expected):
        return "wrong", f"{len(outputs)} outputs, expected {len(expected)}"
    for index, (out, want) in enumerate(zip(outputs, expected)):
        actual = out.numpy()
        if not _matches(actual, want, case.rtol, case.atol):
            want = np.asarray(want)
            return "wrong", (f"output {index}: got {actual.dtype}{list(actual.shape)}, expected "
                             f"{want.dtype}{list(want.shape)}")
    return "pass", ""


def _draws_a_dropout_mask(case, inputs) -> bool:
    """A Dropout told to train with a ratio above 0: its expected outputs came from the case
    writer's random generator, so only their law can be checked, not their values."""
    node = case.model.graph.node
    return (len(node) == 1 and node[0].op_type == "Dropout" and len(inputs) == 3
            and bool(inputs[2]) and float(inputs[1]) > 0)


def _check_random_dropout(inputs, outputs) -> tuple:
    """Each element is dropped (0) or kept and scaled by 1/(1 − ratio); the mask says which;
    the share dropped is near the ratio (60 elements: within 0.25 is > 4 standard deviations)."""
    x, ratio = inputs[0], float(inputs[1])
    y = outputs[0]
    kept = outputs[1] if len(outputs) > 1 else y != 0
    if kept.dtype != np.bool_ or kept.shape != x.shape:
        return "wrong", f"mask is {kept.dtype}{list(kept.shape)}"
    scaled = np.allclose(y[kept], x[kept] / (1 - ratio), rtol=1e-6) and not y[~kept].any()
    if not scaled or abs((~kept).mean() - ratio) > 0.25:
        return "wrong", f"not a dropout of ratio {ratio}: {(~kept).mean():.2f} dropped"
    return "pass", ""


def run_all(cases) -> dict:
    """{case name: (op, outcome, detail)}."""
    return {case.name: (op, *run_case(case)) for op, case in cases}


def main() -> int:
    from minidl.onnx.interpreter import ONNX_OPS

    results = run_all(in_scope_cases(set(ONNX_OPS)))
    per_op = collections.defaultdict(collections.Counter)
    for op, outcome, _ in results.values():
        per_op[op][outcome] += 1
    for op in sorted(per_op):
        counts = per_op[op]
        print(f"{op:28s} pass {counts['pass']:3d}  refused {counts['refused']:3d}  "
              f"wrong {counts['wrong']:3d}  crash {counts['crash']:3d}")
    for name, (op, outcome, detail) in sorted(results.items()):
        if outcome != "pass":
            print(f"{outcome:8s} {name}: {detail[:200]}")
    total = collections.Counter(outcome for _, outcome, _ in results.values())
    print(f"{len(per_op)} operators, {len(results)} cases: {total['pass']} pass "
          f"({100 * total['pass'] / max(len(results), 1):.1f} %), {total['refused']} refused, "
          f"{total['crash']} crashed, {total['wrong']} wrong")
    return 0


if __name__ == "__main__":
    sys.exit(main())
