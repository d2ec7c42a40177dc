"""One thread budget: ``md.set_num_threads`` governs NumPy's BLAS pool and Numba's kernels,
whichever thread calls them."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

_IN_ANOTHER_THREAD = """
import threading
import numpy as np
import minidl as md
from minidl.backend import get_backend
from minidl.backend.numba_cpu import load_kernels
md.set_num_threads(1)
load_kernels()  # Numba loaded, and told, on the main thread (as after a first training step)
seen = []

def train_here():
    import numba
    backend = get_backend("cpu")
    backend.softmax(np.ones((2, 4), np.float32), -1)  # a Numba kernel, called from this thread
    seen.append(numba.get_num_threads())

worker = threading.Thread(target=train_here)
worker.start()
worker.join()
print(seen[0])
"""


def _printed(script: str, numba_threads: int, *args: str) -> list:
    """What ``script`` prints (split on whitespace), run in a fresh process whose Numba pool is
    ``numba_threads`` wide (a thread count is per process, and these tests set their own)."""
    env = dict(os.environ, NUMBA_NUM_THREADS=str(numba_threads))
    out = subprocess.run([sys.executable, "-c", script, *args], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_budget_reaches_kernels_called_from_another_thread():
    # Numba's thread count is per calling thread: a budget set on the main thread must still
    # hold in a thread that trains (a server's worker, a background fit), as BLAS's does.
    assert _printed(_IN_ANOTHER_THREAD, 2) == ["1"]


def test_the_budget_reaches_openblas_itself():
    import minidl as md
    from minidl.backend import threads
    libraries = threads._loaded_openblas()
    if not libraries:
        pytest.skip("NumPy here does not use OpenBLAS")
    before = md.get_num_threads()
    try:
        md.set_num_threads(1)
        assert threads._call_first(libraries[0], threads._OPENBLAS_GETTERS) == 1
    finally:
        md.set_num_threads(before)


def _train(steps: int = 2):
    """Parameters after a few Adam steps of a net that passes through every threaded kernel:
    convolution (im2col/col2im), bias adds and their gradients' sums, batch norm, ReLU,
    max-pool, layer norm, GELU, dropout's random mask, an LSTM, an embedding, softmax, Adam."""
    import numpy as np

    import minidl as md
    from minidl import nn, optim

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                      nn.MaxPool2d(2))
            self.norm, self.fc, self.act = nn.LayerNorm(16), nn.Linear(16, 16), nn.GELU()
            self.drop, self.rnn = nn.Dropout(0.25), nn.LSTM(16, 16, batch_first=True)
            self.position = nn.Embedding(10, 16)  # token 3 twice: its gradient sums two rows
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            h = self.conv(x).reshape(x.shape[0], 4, 16)  # (batch, 4 tokens, 16 features)
            h = h + self.position(md.tensor(np.array([1, 3, 3, 7])))
            h = self.rnn(self.drop(self.act(self.fc(self.norm(h)))))[0]
            h = md.matmul(md.softmax(md.matmul(h, h.transpose(-2, -1)), -1), h)
            return self.head(h.mean(1))

    md.manual_seed(0)
    model = Net()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((6, 2, 8, 8)).astype(np.float32))
    y = md.tensor(rng.integers(0, 3, 6))
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.numpy().copy() for p in model.parameters()]


def test_training_is_bitwise_the_same_at_any_thread_count(monkeypatch):
    numba = pytest.importorskip("numba")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba has one thread here")
    import minidl as md
    from minidl.backend.numba_cpu import (conv, elementwise, nn_kernels, optim_kernels, pool,
                                          random_kernels, reductions, rnn_kernels, row_threads)
    # Every kernel takes its threaded loop even on these small shapes.
    for module in (conv, pool, nn_kernels, row_threads, elementwise, reductions):
        monkeypatch.setattr(module, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(conv, "COLUMNS_PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(reductions, "THREADED_MIN_WORK", 0)
    monkeypatch.setattr(reductions, "MIN_BLOCK_ROWS", 2)  # bias gradients summed in many blocks
    monkeypatch.setattr(optim_kernels, "PARALLEL_MIN_ELEMENTS", 0)
    monkeypatch.setattr(random_kernels, "PARALLEL_MIN_SAMPLES", 0)
    monkeypatch.setattr(rnn_kernels, "PARALLEL_MIN_GATES", 0)
    before = md.get_num_threads()
    try:
        runs = []
        for threads in (1, 2):
            md.set_num_threads(threads)
            runs.append(_train())
    finally:
        md.set_num_threads(before)
    for one, two in zip(*runs):
        np.testing.assert_array_equal(one, two)


def test_a_region_wakes_as_many_threads_as_its_work_is_worth():
    from minidl.backend import threads
    floor = threads.REGION_MIN_WORK
    assert [threads.threads_worth(floor * k) for k in (1, 2, 4, 16, 64, 256)] == \
        [2, 2, 4, 8, 16, 32]
    for count in range(3, 40):
        whole_from = threads.whole_count_from(count)
        assert threads.threads_worth(whole_from) >= count > threads.threads_worth(whole_from - 1)
    assert threads.whole_count_from(2) == threads.whole_count_from(1) == 0


_REGION_SIZES = """
import numba
import numpy as np
import minidl as md
from minidl.backend import get_backend, threads
from minidl.backend.numba_cpu import load_kernels, loading, nn_kernels
from minidl.backend.reference import product_threads

seen = []
def recording(kernel):
    def call(*args, **kwargs):
        seen.append(numba.get_num_threads())
        return kernel(*args, **kwargs)
    return call

nn_kernels.gelu_forward = recording(nn_kernels.gelu_forward)  # before the backend binds it
md.set_num_threads(8)
load_kernels()
product_threads.native_parts.make_calls = recording(product_threads.native_parts.make_calls)
made = loading._kernel
loading._kernel = lambda module, name: recording(made(module, name))
backend = get_backend("cpu")
floor = threads.REGION_MIN_WORK
for size in (floor, 4 * floor, 16 * floor, 64 * floor):  # elementwise: a threaded add
    x = np.ones(size, np.float32)
    backend.add(x, x)
backend.gelu_forward(np.ones(4 * floor, np.float32), "none")  # a bound kernel
a = np.ones((512, 128), np.float32)
backend.matmul(a, np.ones((128, 128), np.float32))  # 2^23 multiply-adds: 4 parts
seen.append(numba.get_num_threads())  # given back after each
print(*seen)
"""


def test_kernels_and_product_parts_run_on_the_threads_their_work_is_worth():
    # At a budget of 8 (Numba's pool made 8 wide on any machine), a region wakes only the
    # threads its work pays for, and the budget is given back after.
    assert _printed(_REGION_SIZES, 8) == ["2", "4", "8", "8", "4", "4", "8"]


_BITS_AT = """
import sys
import numpy as np
import minidl as md
from minidl.backend import get_backend
from minidl.backend.numba_cpu import load_kernels
md.set_num_threads(int(sys.argv[1]))
load_kernels()
backend = get_backend("cpu")
x = np.random.default_rng(0).standard_normal((1024, 768)).astype(np.float32)
y = backend.gelu_forward(backend.add(x, x[0]), "none")
total = backend.sum(backend.mul(y, y), 0)
product = backend.matmul(y[:512, :128], y[:128, :128])
import hashlib
print(hashlib.sha256(b"".join(v.tobytes() for v in (y, total, product))).hexdigest())
"""


def test_regions_of_fewer_threads_keep_the_one_thread_bits():
    assert _printed(_BITS_AT, 8, "1") == _printed(_BITS_AT, 8, "8")


_USERS_OWN_COUNT = """
import numba
import numpy as np
from minidl.backend import get_backend, threads
from minidl.backend.numba_cpu import load_kernels
load_kernels()
numba.set_num_threads(3)  # the user's own Numba count; md.set_num_threads never called
x = np.ones(threads.REGION_MIN_WORK, np.float32)  # worth 2 threads
get_backend("cpu").add(x, x)
print(numba.get_num_threads())
"""


def test_a_region_gives_back_the_users_own_numba_count():
    assert _printed(_USERS_OWN_COUNT, 8) == ["3"]
