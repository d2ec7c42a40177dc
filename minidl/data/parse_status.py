"""What the text parsers report about a chunk: ``OK``, or the code of what is wrong with its first
bad line, and the message each code stands for.

The codes live here, below both the plain-Python parsers (``parsing.py``) and their Numba twins
(``parse_kernels.py``), so that neither imports the other for them. The kernels never raise (a
compiled loop cannot build the message); they return a code, and the reader turns it into an
error naming the file and the line with ``ERROR_MESSAGES``.
"""

OK, WRONG_FIELD_COUNT, NOT_A_NUMBER, NO_STREAM, UNKNOWN_STREAM, REPEATED_STREAM, \
    WRONG_VALUE_COUNT, MISSING_STREAM, SPARSE_IN_DENSE, NOT_INDEX_VALUE, BAD_INDEX, \
    REPEATED_INDEX = range(12)

ERROR_MESSAGES = {
    WRONG_FIELD_COUNT: "expected {width} fields",
    NOT_A_NUMBER: "a value is not a number",
    NO_STREAM: "no '|name' stream on the line",
    UNKNOWN_STREAM: "a stream name is not one of {names}",
    REPEATED_STREAM: "a stream appears twice",
    WRONG_VALUE_COUNT: "a stream does not have its declared number of values {dims}",
    MISSING_STREAM: "a stream is missing (expected all of {names})",
    SPARSE_IN_DENSE: "an index:value entry in a dense stream (dense streams: {dense}; declare a "
                     "sparse one as {{'dim': ..., 'sparse': True}})",
    NOT_INDEX_VALUE: "an entry of a sparse stream is not index:value (sparse streams: {sparse})",
    BAD_INDEX: "a sparse index is not an integer from 0 to dimension - 1 {dims}",
    REPEATED_INDEX: "a sparse index appears twice in one stream",
}
