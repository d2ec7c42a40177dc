"""The ONNX backend node conformance cases for every operator the importer claims.

The cases are generated from the installed onnx package's own definitions (see
``conformance.py``); each is imported, run, and its outputs compared in dtype, shape and value.
"""

import collections

import pytest

from minidl.onnx.interpreter import ONNX_OPS

from conformance import in_scope_cases, run_all


@pytest.fixture(scope="module")
def results():
    cases = in_scope_cases(set(ONNX_OPS))
    assert len(cases) > 900  # the generator really produced the suite
    return run_all(cases)


def test_conformance_cases_pass_and_none_is_silently_wrong(results):
    outcomes = collections.Counter(outcome for _, outcome, _ in results.values())
    bad = {name: detail for name, (_, outcome, detail) in results.items()
           if outcome in ("wrong", "crash")}
    assert not bad, f"silent wrong results or crashes: {bad}"
    assert outcomes["pass"] / len(results) >= 0.95, outcomes
    # Every claimed operator with cases has at least one that passes.
    per_op = collections.defaultdict(set)
    for op, outcome, _ in results.values():
        per_op[op].add(outcome)
    assert not [op for op, seen in per_op.items() if "pass" not in seen]


def test_a_refusal_names_what_is_missing(results):
    for name, (_, outcome, detail) in results.items():
        if outcome == "refused":
            # An operator or opset minidl lacks, or a case the ONNX checker itself rejects.
            assert any(reason in detail for reason in
                       ("unsupported", "cannot", "not supported", "invalid")), (name, detail)
