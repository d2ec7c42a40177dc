"""Hypothesis strategies and helpers for property-testing minidl round trips.

Needs the ``hypothesis`` package; ``import minidl`` does not import this module.

    from hypothesis import given
    from minidl.testing import values, assert_same_value, as_saved

    @given(values())
    def test_my_round_trip(tmp_path_factory, value):
        path = tmp_path_factory.mktemp("rt") / "v.mdl"
        md.save(value, path)
        assert_same_value(md.load(path), as_saved(value))

``minidl.testing.forging.rewrite_header`` edits a file's header and recomputes its
checksums, for tests of what checksums cannot catch.
"""

try:
    from .strategies import (
        Mutation, arrays, as_saved, assert_same_value, mutations, scalars, values)
except ModuleNotFoundError as error:
    if error.name != "hypothesis" and "hypothesis" not in str(error):
        raise
    raise ModuleNotFoundError("minidl.testing needs the 'hypothesis' package: "
                              "pip install 'minidl[test]'", name="hypothesis") from error

__all__ = ["arrays", "scalars", "values", "mutations", "Mutation", "as_saved",
           "assert_same_value"]
