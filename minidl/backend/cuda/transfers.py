"""The count of host<->device crossings, kept below every module that makes one.

:mod:`.device` copies arrays, :mod:`.deferred_checks` reads the flags that kernels raised; both
count here, and the tests read the count to prove that a training step moves nothing but what
the user asks for.
"""

from __future__ import annotations

from collections import Counter

transfers: Counter = Counter()
"""Host<->device crossings: "from_numpy"/"to_numpy" copies, "checks" (single flag reads that
stop the host) and "deferred_checks" (pending checks read at a synchronisation)."""
