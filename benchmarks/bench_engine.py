"""Training-step throughput of minidl against PyTorch CPU (when installed), in one run.

    python benchmarks/bench_engine.py [--threads 1,all] [--seconds 3] [--breakdown]

Rows: training throughput (Adam steps/s) of an MLP 784-512-512-10 (batch 128), LeNet-5 on 28×28
inputs (batch 64), a CIFAR-shaped CNN (3 × conv3×3 + BatchNorm + ReLU + maxpool, 32-64-64
channels, batch 64) and one pre-norm attention block (d=128, 4 heads, sequence 64, batch 32);
an LSTM language model (vocabulary 10k, embedding 128, hidden 256, 35 steps, batch 32) and a
2-layer Transformer encoder (d 128, 4 heads, feed-forward 512, sequence 64, batch 32);
single-sample inference latency of a small CNN with BatchNorm (eval), eager and through
``md.compile``, against PyTorch and onnxruntime; the time of ``import minidl`` and of a fresh
process's first forward pass and first training step, with a warm and with a cold Numba cache.
``--workloads lstm transformer`` times only some rows.

Every row is timed at each thread count of ``--threads`` (default: 1 and every available core),
by the wall clock. Both engines get the same thread budget (``torch.set_num_threads``,
``md.set_num_threads``); ratios are minidl / PyTorch from the same run (for latencies, PyTorch /
minidl, so above 1 is faster everywhere), so they do not depend on how fast this particular
machine is; each engine's speed-up over its own 1-thread rate says how well it uses the cores.
The machine's load average is printed before and after: figures from a machine busy with other
work (load average above its core count) understate the many-thread rates. On such a machine
``--threads 1 --clock cpu`` times each step by the process's CPU time, which leaves out the time
the step spent waiting for a core.

``--breakdown`` prints, instead of the table, where each training step's time goes at 1 thread
and at the largest thread count: minidl by backend primitive, PyTorch by aten op; each part's
speed-up, the share of the 1-thread step that ran on one core, and Amdahl's projection of
steps/s at 8 and 16 threads from the parts' measured parallel fractions. ``--rounds 1
--seconds 0.2`` is a quick run (what the smoke test does); its figures are only a check that
every row runs.

Each engine is timed in its own child process: NumPy's BLAS, Numba and PyTorch each keep a pool
of spinning worker threads, and two pools in one process fight over the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time

import numpy as np

THREADS = 1  # the thread count of a child process (set from --threads)
# Wall time by default; with --clock cpu, the process's CPU time (see main's --clock help).
CLOCK = time.perf_counter


def steps_per_second(step, seconds: float) -> float:
    for _ in range(3):  # warm-up: kernel compilation, allocator, BLAS thread start
        step()
    count, start = 0, CLOCK()
    while CLOCK() - start < seconds:
        step()
        count += 1
    return count / (CLOCK() - start)


# -- models ----------------------------------------------------------------------------------------

def minidl_mlp(nn):
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def minidl_lenet(nn):
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def minidl_cifar(nn):
    layers = []
    for c_in, c_out in ((3, 32), (32, 64), (64, 64)):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(),
                   nn.MaxPool2d(2)]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 4 * 4, 10))


def minidl_attention(nn):
    import minidl as md
    return attention_block(nn, md.softmax, md.matmul)


def attention_block(nn, softmax, matmul, d=128, heads=4):
    """x + attn(LN(x)), then + MLP(LN(·)): the pre-norm transformer block, in either engine's
    ``nn`` (both have Linear, LayerNorm, GELU and the same Module protocol)."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.act, self.fc2 = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            qkv = self.qkv(self.norm1(x)).reshape(b, t, 3, heads, d // heads)
            q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3) for i in range(3))
            scores = matmul(q, k.transpose(-2, -1)) * (d // heads) ** -0.5
            mixed = matmul(softmax(scores, -1), v).permute(0, 2, 1, 3).reshape(b, t, d)
            x = x + self.proj(mixed)
            return x + self.fc2(self.act(self.fc1(self.norm2(x))))
    return Block()


def minidl_small_cnn(nn):
    """The single-sample inference model: two conv + BatchNorm + ReLU + pool stages."""
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 7 * 7, 10))


def _loss(nn, output, target):
    """Cross-entropy for classifiers; mean square for the attention block's sequence output."""
    if output.ndim == 2:
        return nn.functional.cross_entropy(output, target)
    return (output * output).mean()


def minidl_step(model_builder, input_shape, batch):
    import minidl as md
    from minidl import nn, optim
    md.manual_seed(0)
    model = model_builder(nn)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((batch,) + input_shape).astype(np.float32))
    y = md.tensor(rng.integers(0, 10, batch))

    def step():
        opt.zero_grad()
        loss = _loss(nn, model(x), y)
        loss.backward()
        opt.step()
    return step


def torch_step(kind, input_shape, batch):
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = TORCH_MODELS[kind](nn, torch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn((batch,) + input_shape)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad()
        loss = _loss(nn, model(x), y)
        loss.backward()
        opt.step()
    return step


# PyTorch's nn has the same layer names and arguments, so most builders serve both engines.
TORCH_MODELS = {
    "mlp": lambda nn, torch: minidl_mlp(nn),
    "lenet": lambda nn, torch: minidl_lenet(nn),
    "cifar": lambda nn, torch: minidl_cifar(nn),
    "attention": lambda nn, torch: attention_block(nn, torch.softmax, torch.matmul),
    "small_cnn": lambda nn, torch: minidl_small_cnn(nn),
}


# -- single-sample inference -----------------------------------------------------------------------

def _running_stats(model, make_batch, no_grad):
    """A few train-mode passes so BatchNorm's running statistics are not the initial 0 and 1."""
    model.train()
    with no_grad():
        for _ in range(3):
            model(make_batch())
    return model.eval()


def inference_call(engine: str):
    """A zero-argument callable running the small CNN on one 1×28×28 sample with ``engine``."""
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((1, 1, 28, 28)).astype(np.float32)
    batch = rng.standard_normal((16, 1, 28, 28)).astype(np.float32)
    if engine == "torch":
        import torch
        model = _running_stats(TORCH_MODELS["small_cnn"](torch.nn, torch),
                               lambda: torch.from_numpy(batch), torch.no_grad)
        x = torch.from_numpy(sample)

        def call():
            with torch.inference_mode():
                return model(x)
        return call
    import minidl as md
    md.manual_seed(0)
    model = _running_stats(minidl_small_cnn(md.nn), lambda: md.tensor(batch), md.no_grad)
    x = md.tensor(sample)
    if engine == "minidl":
        def call():
            with md.no_grad():
                return model(x)
        return call
    if engine == "compiled":
        compiled = md.compile(model, x)
        return lambda: compiled(x)
    # onnxruntime on minidl's own export of the same model.
    import tempfile

    import onnxruntime
    path = os.path.join(tempfile.mkdtemp(), "small_cnn.onnx")
    md.export_onnx(model, path, x)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: sample})


# -- sequence models: the same network written against either library --------------------------

VOCAB, EMBED, HIDDEN, STEPS, BATCH = 10_000, 128, 256, 35, 32
D_MODEL, HEADS, FEED_FORWARD, SEQUENCE = 128, 4, 512, 64


def sequence_step(engine: str, kind: str):
    """One Adam training step of the LSTM language model or the Transformer encoder."""
    if engine == "torch":
        import torch as lib
        from torch import nn
        lib.manual_seed(0)
        tensor = lib.tensor
    else:
        import minidl as lib
        from minidl import nn
        lib.manual_seed(0)
        tensor = lib.tensor
    rng = np.random.default_rng(0)

    class LanguageModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.lstm = nn.LSTM(EMBED, HIDDEN)
            self.head = nn.Linear(HIDDEN, VOCAB)

        def forward(self, tokens):
            return self.head(self.lstm(self.embed(tokens))[0]).reshape(STEPS * BATCH, VOCAB)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer0 = nn.TransformerEncoderLayer(D_MODEL, HEADS, FEED_FORWARD,
                                                     batch_first=True)
            self.layer1 = nn.TransformerEncoderLayer(D_MODEL, HEADS, FEED_FORWARD,
                                                     batch_first=True)
            self.head = nn.Linear(D_MODEL, 10)

        def forward(self, x):
            return self.head(self.layer1(self.layer0(x)).mean(1))

    if kind == "lstm":
        model = LanguageModel()
        x = tensor(rng.integers(0, VOCAB, (STEPS, BATCH)))
        y = tensor(rng.integers(0, VOCAB, STEPS * BATCH))
    else:
        model = Encoder()
        x = tensor(rng.standard_normal((BATCH, SEQUENCE, D_MODEL)).astype(np.float32))
        y = tensor(rng.integers(0, 10, BATCH))
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step


# -- fresh-process costs -----------------------------------------------------------------------------

_FIRST_STEP = """
import time
t0 = time.perf_counter()
import numpy as np, minidl as md
from minidl import nn, optim
t1 = time.perf_counter()
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(8 * 14 * 14, 10)).eval()
with md.no_grad():
    model(md.tensor(np.zeros((1, 1, 28, 28), np.float32)))
t2 = time.perf_counter()
model.train()
opt = optim.Adam(model.parameters(), lr=1e-3)
x = md.tensor(np.zeros((8, 1, 28, 28), np.float32)); y = md.tensor(np.zeros(8, np.int64))
loss = nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step()
t3 = time.perf_counter()
print(t1 - t0, t2 - t0, t3 - t2)
"""


def fresh_process_times(cold: bool) -> tuple[float, float, float]:
    """Best of three fresh processes: (import, import + first forward, first training step).

    Warm: Numba's cache directory already holds every kernel (a first run filled it). Cold: each
    process gets an empty cache directory, so every kernel it touches compiles.
    """
    import tempfile
    env = dict(os.environ)
    runs = []
    if not cold:
        subprocess.run([sys.executable, "-c", _FIRST_STEP], check=True, capture_output=True)
    for _ in range(3):
        if cold:
            env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")
        out = subprocess.run([sys.executable, "-c", _FIRST_STEP], check=True, env=env,
                             capture_output=True, text=True).stdout.split()
        runs.append(tuple(float(v) for v in out))
    return tuple(min(run[i] for run in runs) for i in range(3))


WORKLOADS = {"mlp": (minidl_mlp, (784,), 128), "lenet": (minidl_lenet, (1, 28, 28), 64),
             "cifar": (minidl_cifar, (3, 32, 32), 64),
             "attention": (minidl_attention, (64, 128), 32)}

TRAINING_ROWS = (
    ("MLP 784-512-512-10, batch 128, Adam", "mlp", ">= 1.2x"),
    ("LeNet-5 28x28, batch 64, Adam", "lenet", ">= 1.0x"),
    ("CIFAR CNN 3x(conv3x3+BN+ReLU+pool) 32-64-64, b64, Adam", "cifar", ">= 1.0x"),
    ("pre-norm attention block d=128 seq 64, b32, Adam", "attention", ">= 1.0x"),
    ("LSTM LM 10k/128/256, seq 35, batch 32, Adam", "lstm", ">= 1.0x"),
    ("Transformer enc. 2x(d 128, 4 heads), seq 64, batch 32", "transformer", ">= 0.8x"))


def make_call(engine: str, kind: str):
    """The zero-argument callable one child times: a training step, or a single-sample call."""
    if kind == "infer":
        return inference_call(engine)
    if kind in ("lstm", "transformer"):
        return sequence_step(engine, kind)
    builder, shape, batch = WORKLOADS[kind]
    return torch_step(kind, shape, batch) if engine == "torch" else \
        minidl_step(builder, shape, batch)


def use_threads(engine: str) -> None:
    """Give the child's engine its thread budget (PyTorch: its intra-op pool; minidl: BLAS and
    Numba together)."""
    if engine == "torch":
        import torch
        torch.set_num_threads(THREADS)
    else:
        import minidl
        minidl.set_num_threads(THREADS)


def worker(engine: str, kind: str, seconds: float) -> None:
    """Child process: time one engine on one workload, print calls/s."""
    use_threads(engine)
    print(steps_per_second(make_call(engine, kind), seconds))


def _child(flag: str, engine: str, kind: str, seconds: float, threads: int, clock: str):
    """Run this script as a child in ``flag`` mode; its stdout, or None (with the reason on
    stderr) if it failed, as an engine lacking a feature (an older minidl without
    ``md.compile``) does."""
    out = subprocess.run([sys.executable, __file__, flag, engine, kind, "--seconds", str(seconds),
                          "--threads", str(threads), "--clock", clock],
                         capture_output=True, text=True)
    if out.returncode:
        print(f"{engine} on {kind} at {threads} thread(s) failed: "
              f"{out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return out.stdout


def measure(engine: str, kind: str, seconds: float, threads: int) -> float:
    """Calls/s of one engine on one workload at ``threads`` threads in a child process; nan if
    the child failed."""
    out = _child("--worker", engine, kind, seconds, threads,
                 "cpu" if CLOCK is time.process_time else "wall")
    return float("nan") if out is None else float(out.split()[-1])


def best_rates(engines, kind: str, seconds: float, rounds: int, threads: int) -> dict:
    """Each engine's best calls/s over ``rounds`` alternating runs.

    A shared or virtual machine has slow spells of seconds; alternating the engines exposes all
    of them to those spells alike instead of letting one spell land on one engine.
    """
    best = {engine: 0.0 for engine in engines}
    for _ in range(rounds):
        for engine in engines:
            rate = measure(engine, kind, seconds, threads)
            best[engine] = rate if rate != rate else max(best[engine], rate)  # nan stays nan
    return best


# -- where the time goes: per-primitive breakdown and Amdahl's projection -------------------------

@contextlib.contextmanager
def minidl_primitive_times():
    """Time every primitive of the CPU backend by the wall clock while the block runs; yields the
    dict the timers add to (primitive name -> seconds). A primitive called from inside another
    counts as its caller's time, so the totals never overlap."""
    import minidl.backend as backends
    from minidl.backend.primitives import ALL_PRIMITIVES
    backend = backends.get_backend("cpu")
    totals: dict[str, float] = {}
    inside = [False]

    def timed(name, function):
        def call(*args, **kwargs):
            if inside[0]:
                return function(*args, **kwargs)
            inside[0] = True
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                totals[name] = totals.get(name, 0.0) + time.perf_counter() - start
                inside[0] = False
        return call

    # Instance attributes shadow the class's; deleting them afterwards restores the backend.
    for name in ALL_PRIMITIVES:
        setattr(backend, name, timed(name, getattr(backend, name)))
    try:
        yield totals
    finally:
        for name in ALL_PRIMITIVES:
            delattr(backend, name)


def breakdown_worker(engine: str, kind: str, seconds: float) -> None:
    """Child process: run steps for about ``seconds`` with each engine's per-op timing on, print
    JSON ``{"step": s, "parts": {name: s}}``, seconds per step. minidl's parts are its backend
    primitives; PyTorch's are aten ops by self time (the profiler's wall time on the calling
    thread, which spans the op's intra-op parallel work). What the parts leave of the step is
    "outside ops": Python, autograd bookkeeping, and the timers' own cost (PyTorch's profiler
    costs several microseconds an op, minidl's timers well under one)."""
    import json
    use_threads(engine)
    step = make_call(engine, kind)
    for _ in range(3):
        step()
    if engine == "torch":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            count, elapsed = timed_steps(step, seconds)
        parts = {event.key: event.self_cpu_time_total / 1e6
                 for event in profiler.key_averages()}
    else:
        with minidl_primitive_times() as parts:
            count, elapsed = timed_steps(step, seconds)
    parts = {name: total / count for name, total in parts.items() if total > 0}
    print(json.dumps({"step": elapsed / count, "parts": parts}))


def timed_steps(step, seconds: float) -> tuple[int, float]:
    """(steps run, seconds they took): steps for about ``seconds``."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    return count, time.perf_counter() - start


def parallel_fraction(one_thread: float, n_threads: float, n: int) -> float:
    """Amdahl's parallel fraction p of a part that took ``one_thread`` seconds on one thread and
    ``n_threads`` on ``n``: T(n) = T(1)·((1 - p) + p/n), so p = (1 - T(n)/T(1)) / (1 - 1/n),
    clipped to [0, 1] (a part that got slower counts as serial)."""
    if one_thread <= 0 or n < 2:
        return 0.0
    return min(1.0, max(0.0, (1.0 - n_threads / one_thread) / (1.0 - 1.0 / n)))


def amdahl_projection(parts_1: dict, parts_n: dict, n: int, targets) -> tuple[float, dict]:
    """(share of the one-thread step that ran on one core, {threads: projected steps/s}).

    Each part (primitive, or the time outside them) gets its own parallel fraction from its
    times at 1 and ``n`` threads; the step at ``k`` threads is the sum of the parts' Amdahl
    times, Σ T₁·((1 - p) + p/k). A part seen at one thread count only counts as serial."""
    serial, total, at = 0.0, 0.0, {k: 0.0 for k in targets}
    for name, one in parts_1.items():
        p = parallel_fraction(one, parts_n.get(name, one), n)
        serial += one * (1.0 - p)
        total += one
        for k in targets:
            at[k] += one * ((1.0 - p) + p / k)
    return (serial / total if total else 0.0), {k: 1.0 / t for k, t in at.items() if t > 0}


def with_outside(result: dict) -> dict:
    """A breakdown's parts plus "outside ops", the step time no part accounts for."""
    parts = dict(result["parts"])
    parts["(outside ops)"] = max(0.0, result["step"] - sum(parts.values()))
    return parts


ENGINE_NAMES = {"minidl": "minidl", "torch": "PyTorch", "compiled": "md.compile",
                "ort": "onnxruntime"}


def print_breakdown(label: str, kind: str, engines, seconds: float, n: int,
                    targets=(8, 16), top: int = 10) -> None:
    """Per engine: the parts' milliseconds per step at 1 and ``n`` threads and their speed-up,
    the share of step time that stayed on one core, and Amdahl's steps/s at ``targets``."""
    import json
    print(f"\n{label}: time per step by part, 1 and {n} threads (wall clock)")
    for engine in engines:
        runs = [_child("--worker-breakdown", engine, kind, seconds, t, "wall") for t in (1, n)]
        if None in runs:
            continue
        one, many = (json.loads(out.splitlines()[-1]) for out in runs)
        parts_1, parts_n = with_outside(one), with_outside(many)
        ranked = sorted(parts_1, key=parts_1.get, reverse=True)
        shown = [name for name in ranked if name != "(outside ops)"][:top]
        rest = [name for name in ranked if name not in shown and name != "(outside ops)"]
        lines = [(name, parts_1[name], parts_n.get(name, 0.0)) for name in shown]
        if rest:
            lines.append((f"({len(rest)} other ops)", sum(parts_1[r] for r in rest),
                          sum(parts_n.get(r, 0.0) for r in rest)))
        lines.append(("(outside ops)", parts_1["(outside ops)"], parts_n["(outside ops)"]))
        lines.append(("step", one["step"], many["step"]))
        name_width = max(len(name) for name, *_ in lines)
        print(f"  {ENGINE_NAMES[engine]:<{name_width}}  {'1T ms':>8}  {f'{n}T ms':>8}  "
              f"{'share 1T':>8}  {'speed-up':>8}")
        for name, t1, tn in lines:
            speedup = f"{t1 / tn:.2f}" if tn > 0 else "-"
            print(f"  {name:<{name_width}}  {t1 * 1e3:8.2f}  {tn * 1e3:8.2f}  "
                  f"{t1 / one['step']:8.1%}  {speedup:>8}")
        serial_share, projected = amdahl_projection(parts_1, parts_n, n, targets)
        rates = ", ".join(f"{k}T {rate:.1f}" for k, rate in projected.items())
        print(f"  {ENGINE_NAMES[engine]}: {serial_share:.0%} of the 1-thread step ran on one "
              f"core; steps/s measured 1T {1 / one['step']:.1f}, {n}T {1 / many['step']:.1f}; "
              f"Amdahl projection {rates}\n")


def available_cores() -> int:
    """The cores this process may run on (a ``taskset`` or container limit), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_counts(text: str) -> list[int]:
    """``--threads``: "1,2" -> [1, 2]; "all" stands for every available core."""
    counts = []
    for item in text.split(","):
        item = item.strip().lower()
        count = available_cores() if item == "all" else int(item) if item.isdigit() else 0
        if count < 1:
            raise argparse.ArgumentTypeError(f"expected positive thread counts or "
                                             f"'all' separated by commas, got {text!r}")
        if count not in counts:
            counts.append(count)
    return counts


def _times(ours: float, ones: dict, key: str) -> str:
    """A speed-up over the same engine's 1-thread rate, or "" at 1 thread or without one."""
    base = ones.get(key)
    return f"{ours / base:.2f}" if base and ours == ours else ""


def throughput_rows(args, engines) -> list:
    """The table's rows: every workload at every thread count (and the start-up rows once)."""
    rows, one_thread = [], {}
    for label, kind, target in TRAINING_ROWS:
        if kind not in args.workloads:
            continue
        for threads in args.threads:
            rates = best_rates(engines, kind, args.seconds, args.rounds, threads)
            if threads == 1:
                one_thread[kind] = rates
            ours, theirs = rates["minidl"], rates.get("torch")
            base = one_thread.get(kind, {})
            rows.append((label, threads, f"{ours:.1f} steps/s",
                         f"{theirs:.1f} steps/s" if theirs else "n/a",
                         f"{ours / theirs:.2f}x" if theirs else "n/a",
                         _times(ours, base, "minidl"),
                         _times(theirs, base, "torch") if theirs else "", target))
            label = ""  # the workload's name only on its first row

    # Latencies: the ratio is PyTorch's latency over ours (above 1: minidl is faster).
    if "infer" in args.workloads:
        try:
            import onnxruntime  # noqa: F401
            infer_engines = engines + ("compiled", "ort")
        except ImportError:
            infer_engines = engines + ("compiled",)
        for threads in args.threads:
            rates = best_rates(infer_engines, "infer", args.seconds, args.rounds, threads)
            micros = {engine: 1e6 / rate for engine, rate in rates.items()}
            torch_us = micros.get("torch")
            for label, engine, target in (("single-sample small CNN+BN, model(x)", "minidl", ""),
                                          ("single-sample small CNN+BN, md.compile", "compiled",
                                           ">= 2x (<= 0.5 of PyTorch's latency)")):
                rows.append((label, threads, f"{micros[engine]:.0f} us",
                             f"{torch_us:.0f} us" if torch_us else "n/a",
                             f"{torch_us / micros[engine]:.2f}x" if torch_us else "n/a", "", "",
                             target))
            if "ort" in micros:
                rows.append(("  same, onnxruntime (md.compile / ort latency)", threads,
                             f"{micros['ort']:.0f} us", "",
                             f"{micros['compiled'] / micros['ort']:.2f}", "", "", "<= 3"))

    if "startup" in args.workloads:
        import_s, warm_forward_s, warm_step_s = fresh_process_times(cold=False)
        _, cold_forward_s, cold_step_s = fresh_process_times(cold=True)
        for label, value, target in (
                ("import minidl (fresh process)", f"{import_s * 1000:.0f} ms", "<= 300 ms"),
                ("import + first forward, warm Numba cache", f"{warm_forward_s:.2f} s", "<= 0.3 s"),
                ("import + first forward, cold Numba cache", f"{cold_forward_s:.2f} s", "<= 3 s"),
                ("then first training step, warm / cold cache",
                 f"{warm_step_s:.2f} / {cold_step_s:.2f} s", "<= 2 s warm")):
            rows.append((label, "", value, "", "", "", "", target))
    return rows


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


def main(argv=None) -> int:
    global THREADS, CLOCK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timing window per run")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs per engine")
    parser.add_argument("--workloads", nargs="+",
                        default=["mlp", "lenet", "cifar", "attention", "lstm", "transformer",
                                 "infer", "startup"],
                        help="which rows to time (mlp, lenet, cifar, attention, lstm, "
                             "transformer, infer, startup)")
    parser.add_argument("--threads", type=thread_counts, default=thread_counts("1,all"),
                        help="thread counts to time each engine at, e.g. 1,2,4 ('all': every "
                             f"available core; default 1,all = 1,{available_cores()})")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time steps by the wall clock, or by the process's CPU time: on a "
                             "machine shared with other work, CPU time leaves out the time a "
                             "step waits for a core. Needs --threads 1 (CPU time sums every "
                             "thread); the start-up rows stay wall-clock")
    parser.add_argument("--breakdown", action="store_true",
                        help="instead of the throughput table: each training workload's time per "
                             "primitive (minidl) and per aten op (PyTorch) at 1 thread and at the "
                             "largest --threads count, the share of the step that ran on one "
                             "core, and Amdahl's projection of steps/s at 8 and 16 threads")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "WORKLOAD"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-breakdown", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    THREADS = args.threads[-1]  # a child gets exactly one count
    if args.clock == "cpu" and args.threads != [1]:
        parser.error("--clock cpu needs --threads 1: CPU time sums the time of every thread")
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.worker:
        return worker(*args.worker, args.seconds) or 0
    if args.worker_breakdown:
        return breakdown_worker(*args.worker_breakdown, args.seconds) or 0
    try:
        import torch
    except ImportError:
        torch = None
    engines = ("minidl", "torch") if torch else ("minidl",)
    load_before = load_average()

    if args.breakdown:
        n = max(args.threads)
        if n < 2:
            parser.error("--breakdown compares 1 thread with more: give --threads with a count "
                         "above 1")
        for label, kind, _ in TRAINING_ROWS:
            if kind in args.workloads:
                print_breakdown(label, kind, engines, args.seconds, n)
        print(f"load average (1, 5, 15 min): {load_before} before, {load_average()} after")
        return 0

    rows = throughput_rows(args, engines)
    print(f"threads: {','.join(map(str, args.threads))} of {available_cores()} cores; "
          f"clock: {args.clock}; torch: {torch.__version__ if torch else 'not installed'}; "
          f"load average (1, 5, 15 min): {load_before} before, {load_average()} after")
    header = ("benchmark", "threads", "minidl", "PyTorch", "ratio", "minidl xT/1T",
              "PyTorch xT/1T", "target")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths)] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
