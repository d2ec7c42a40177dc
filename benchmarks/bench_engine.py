"""Training-step throughput of minidl against PyTorch CPU (when installed), in one run.

    python benchmarks/bench_engine.py [--seconds 3]

Rows: training throughput (Adam steps/s) of an MLP 784-512-512-10 (batch 128), LeNet-5 on 28×28
inputs (batch 64), a CIFAR-shaped CNN (3 × conv3×3 + BatchNorm + ReLU + maxpool, 32-64-64
channels, batch 64) and one pre-norm attention block (d=128, 4 heads, sequence 64, batch 32);
an LSTM language model (vocabulary 10k, embedding 128, hidden 256, 35 steps, batch 32) and a
2-layer Transformer encoder (d 128, 4 heads, feed-forward 512, sequence 64, batch 32);
single-sample inference latency of a small CNN with BatchNorm (eval), eager and through
``md.compile``, against PyTorch and onnxruntime; the time of ``import minidl`` and of a fresh
process's first forward pass and first training step, with a warm and with a cold Numba cache.
Both engines use the same number of threads; ratios are minidl / PyTorch from the same run (for
latencies, PyTorch / minidl, so above 1 is faster everywhere), so they do not depend on how fast
this particular machine is. ``--workloads lstm transformer`` times only some rows. On a machine
shared with other work, ``--threads 1 --clock cpu`` times each step by the process's CPU time,
which leaves out the time the step spent waiting for a core.

Each engine is timed in its own child process: NumPy's BLAS, Numba and PyTorch each keep a pool
of spinning worker threads, and two pools in one process fight over the cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

THREADS = os.cpu_count() or 1
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


def worker(engine: str, kind: str, seconds: float) -> None:
    """Child process: time one engine on one workload, print calls/s."""
    if engine == "torch":
        import torch
        torch.set_num_threads(THREADS)
    else:
        import minidl
        minidl.set_num_threads(THREADS)
    if kind == "infer":
        step = inference_call(engine)
    elif kind in ("lstm", "transformer"):
        step = sequence_step(engine, kind)
    else:
        builder, shape, batch = WORKLOADS[kind]
        step = torch_step(kind, shape, batch) if engine == "torch" else \
            minidl_step(builder, shape, batch)
    print(steps_per_second(step, seconds))


def measure(engine: str, kind: str, seconds: float) -> float:
    """Calls/s of one engine on one workload in a child process; nan if the child failed (an
    engine that lacks a feature, such as an older minidl without ``md.compile``)."""
    out = subprocess.run([sys.executable, __file__, "--worker", engine, kind,
                          "--seconds", str(seconds), "--threads", str(THREADS),
                          "--clock", "cpu" if CLOCK is time.process_time else "wall"],
                         capture_output=True, text=True)
    if out.returncode:
        print(f"{engine} on {kind} failed: {out.stderr.strip().splitlines()[-1:]}",
              file=sys.stderr)
        return float("nan")
    return float(out.stdout.split()[-1])


def best_rates(engines, kind: str, seconds: float, rounds: int) -> dict:
    """Each engine's best calls/s over ``rounds`` alternating runs.

    A shared or virtual machine has slow spells of seconds; alternating the engines exposes all
    of them to those spells alike instead of letting one spell land on one engine.
    """
    best = {engine: 0.0 for engine in engines}
    for _ in range(rounds):
        for engine in engines:
            rate = measure(engine, kind, seconds)
            best[engine] = rate if rate != rate else max(best[engine], rate)  # nan stays nan
    return best


def main() -> None:
    global THREADS, CLOCK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timing window per run")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs per engine")
    parser.add_argument("--workloads", nargs="+",
                        default=["mlp", "lenet", "cifar", "attention", "lstm", "transformer",
                                 "infer", "startup"],
                        help="which rows to time (mlp, lenet, cifar, attention, lstm, "
                             "transformer, infer, startup)")
    parser.add_argument("--threads", type=int, default=THREADS,
                        help="threads per engine (1 gives steadier ratios on a busy machine)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time steps by the wall clock, or by the process's CPU time: on a "
                             "machine shared with other work, CPU time leaves out the time a "
                             "step waits for a core. Needs --threads 1 (CPU time sums every "
                             "thread); the start-up rows stay wall-clock")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    THREADS = args.threads
    if args.clock == "cpu" and THREADS != 1:
        parser.error("--clock cpu needs --threads 1: CPU time sums the time of every thread")
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.worker:
        return worker(*args.worker, args.seconds)
    try:
        import torch
    except ImportError:
        torch = None

    engines = ("minidl", "torch") if torch else ("minidl",)
    rows = []
    for label, kind, target in (
            ("MLP 784-512-512-10, batch 128, Adam", "mlp", ">= 1.2x"),
            ("LeNet-5 28x28, batch 64, Adam", "lenet", ">= 1.0x"),
            ("CIFAR CNN 3x(conv3x3+BN+ReLU+pool) 32-64-64, b64, Adam", "cifar", ">= 1.0x"),
            ("pre-norm attention block d=128 seq 64, b32, Adam", "attention", ">= 1.0x"),
            ("LSTM LM 10k/128/256, seq 35, batch 32, Adam", "lstm", ">= 1.0x"),
            ("Transformer enc. 2x(d 128, 4 heads), seq 64, batch 32", "transformer", ">= 0.8x")):
        if kind not in args.workloads:
            continue
        rates = best_rates(engines, kind, args.seconds, args.rounds)
        ours, theirs = rates["minidl"], rates.get("torch")
        rows.append((label, f"{ours:.1f} steps/s",
                     f"{theirs:.1f} steps/s" if theirs else "n/a",
                     f"{ours / theirs:.2f}x" if theirs else "n/a", target))

    # Latencies: the ratio is PyTorch's latency over ours (above 1: minidl is faster).
    if "infer" in args.workloads:
        try:
            import onnxruntime  # noqa: F401
            infer_engines = engines + ("compiled", "ort")
        except ImportError:
            infer_engines = engines + ("compiled",)
        rates = best_rates(infer_engines, "infer", args.seconds, args.rounds)
        micros = {engine: 1e6 / rate for engine, rate in rates.items()}
        torch_us = micros.get("torch")
        for label, engine, target in (("single-sample small CNN+BN, model(x)", "minidl", ""),
                                      ("single-sample small CNN+BN, md.compile", "compiled",
                                       ">= 2x (<= 0.5 of PyTorch's latency)")):
            rows.append((label, f"{micros[engine]:.0f} us",
                         f"{torch_us:.0f} us" if torch_us else "n/a",
                         f"{torch_us / micros[engine]:.2f}x" if torch_us else "n/a", target))
        if "ort" in micros:
            rows.append(("  same, onnxruntime (md.compile / ort latency)", f"{micros['ort']:.0f} us",
                         "", f"{micros['compiled'] / micros['ort']:.2f}", "<= 3"))

    if "startup" in args.workloads:
        import_s, warm_forward_s, warm_step_s = fresh_process_times(cold=False)
        _, cold_forward_s, cold_step_s = fresh_process_times(cold=True)
        rows.append(("import minidl (fresh process)", f"{import_s * 1000:.0f} ms", "", "",
                     "<= 300 ms"))
        rows.append(("import + first forward, warm Numba cache", f"{warm_forward_s:.2f} s", "", "",
                     "<= 0.3 s"))
        rows.append(("import + first forward, cold Numba cache", f"{cold_forward_s:.2f} s", "", "",
                     "<= 3 s"))
        rows.append(("then first training step, warm / cold cache",
                     f"{warm_step_s:.2f} / {cold_step_s:.2f} s", "", "", "<= 2 s warm"))

    print(f"threads: {THREADS}; clock: {args.clock}; "
          f"torch: {torch.__version__ if torch else 'not installed'}")
    header = ("benchmark", "minidl", "PyTorch", "ratio", "target")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(5)]
    for row in [header, tuple("-" * w for w in widths)] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
