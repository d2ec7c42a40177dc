"""minidl demo: train a CNN on the 8×8 digits, kill the training with SIGKILL halfway, resume it,
and show that the result is bit-for-bit the run that was never interrupted.

    bash scripts/demo.sh                 # sets up .venv, then runs this file
    bash scripts/demo.sh --epochs 4      # shorter
    bash scripts/demo.sh --keep          # keep the run directories (checkpoints, model, ONNX)
    bash scripts/demo.sh --plot out.png  # where the loss/accuracy plot goes

Each training run is a child process (``--child``) that calls ``md.fit`` with a checkpoint
directory; re-running the same command resumes from the latest checkpoint. The parent runs it
once straight through, once killed and restarted, compares the final states, reports the test
accuracy, exports the model to ONNX and writes a plot of the metrics per epoch. Output is
flushed line by line, so it shows as it comes also through a pipe (``| tee demo.log``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import minidl as md
from minidl import nn, optim
from minidl.data import ArrayDataset, DataReader
from minidl.datasets import load_digits
from minidl.training import Callback


# Under demo_output/, which git ignores: a demo run from a checkout leaves it clean.
DEFAULT_PLOT = os.path.join("demo_output", "demo_history.png")


def build_model() -> nn.Module:
    """The API.md CNN, a little wider: conv-bn-relu-pool twice, then a linear classifier."""
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 2 * 2, 10),
    )


class AnnounceSteps(Callback):
    """Tells the parent process how far training has got (one line per step)."""

    def on_step_end(self, trainer, step, logs):
        print(f"step {step}", flush=True)


def child(run_dir: str, epochs: int, plot_path: str | None) -> None:
    """One training process: resumes from ``run_dir`` if it holds checkpoints."""
    md.manual_seed(0)
    train_x, train_y = load_digits("train")
    model = build_model()
    opt = optim.Adam(model.parameters(), lr=3e-3)
    reader = DataReader(ArrayDataset(train_x, train_y), batch_size=32, shuffle=True, seed=0)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(reader))
    md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=epochs, scheduler=sched,
           validation_data=load_digits("test"), callbacks=[AnnounceSteps()], plot_path=plot_path,
           checkpoint=md.CheckpointConfig(run_dir, prefix="digits", save_every_steps=25,
                                          max_to_keep=2))
    md.save_model(model, os.path.join(run_dir, "final.mdl"))


class StepBar:
    """The parent's view of a child's progress: a bar on a terminal, nothing extra otherwise
    (the child's one line per epoch is shown in both cases)."""

    hinted = False  # whether the hint about tqdm was printed

    def __init__(self, total: int, initial: int):
        self.bar = None
        if sys.stdout.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, initial=initial, unit="step", leave=False,
                                dynamic_ncols=True)
            except ImportError:
                if not StepBar.hinted:  # once, not for every child run
                    StepBar.hinted = True
                    print("   (no progress bar: it needs tqdm, pip install 'minidl[progress]')")

    def update(self, step: int) -> None:
        if self.bar is not None:
            self.bar.update(step - self.bar.n)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_child(run_dir: str, epochs: int, total_steps: int, kill_at_step: int | None = None,
              plot_path: str | None = None) -> int | None:
    """Run a training child, relaying its epoch lines; SIGKILL it once it reports
    ``kill_at_step``. Returns the step it was killed at (None if it finished)."""
    command = [sys.executable, "-u", os.path.abspath(__file__), "--child", run_dir, "--epochs",
               str(epochs)] + (["--plot", plot_path] if plot_path else [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    killed_at = None
    bar = StepBar(total_steps, 0)
    try:
        for line in process.stdout:
            if line.startswith("step "):
                step = int(line.split()[1])
                bar.update(step)
                if kill_at_step is not None and step >= kill_at_step:
                    process.send_signal(signal.SIGKILL)  # no clean-up, no atexit: a real crash
                    killed_at = step
                    break
            else:
                bar.write("   " + line.rstrip())
    finally:
        bar.close()
    process.wait()
    if killed_at is None and process.returncode != 0:
        raise SystemExit(f"training child failed with exit code {process.returncode}")
    return killed_at


def arrays_identical(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and
        a[k].tobytes() == b[k].tobytes() for k in a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--child", metavar="RUN_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true",
                        help="keep the run directories (checkpoints, final model, ONNX file) "
                             "and print where they are")
    parser.add_argument("--plot", default=None, metavar="PATH",
                        help=f"PNG plot of loss and accuracy per epoch (default: "
                             f"{DEFAULT_PLOT}; needs matplotlib)")
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.epochs, args.plot)
    sys.stdout.reconfigure(line_buffering=True)  # show each line at once, also through a pipe
    plot_path = os.path.abspath(args.plot or DEFAULT_PLOT)
    if importlib.util.find_spec("matplotlib") is None:
        print("(no plot: matplotlib is not installed; pip install 'minidl[plot]')")
        plot_path = None
    elif args.plot is None:
        os.makedirs(os.path.dirname(plot_path), exist_ok=True)

    workdir = tempfile.mkdtemp(prefix="minidl-demo-")
    steps_total = args.epochs * -(-len(load_digits("train")[1]) // 32)
    try:
        start = time.perf_counter()
        print(f"1. Training straight through: {args.epochs} epochs, {steps_total} steps")
        straight = os.path.join(workdir, "straight")
        run_child(straight, args.epochs, steps_total)

        print("2. Training again, killed with SIGKILL halfway, then started again")
        resumed = os.path.join(workdir, "resumed")
        killed_at = run_child(resumed, args.epochs, steps_total,
                              kill_at_step=steps_total // 2 + 7)
        manager_files = sorted(f for f in os.listdir(resumed) if f.endswith(".mdl"))
        print(f"   killed at step {killed_at}; committed checkpoints on disk: {manager_files}")
        run_child(resumed, args.epochs, steps_total, plot_path=plot_path)

        a = md.load_model(os.path.join(straight, "final.mdl"))
        b = md.load_model(os.path.join(resumed, "final.mdl"))
        same = arrays_identical(a.state_dict(), b.state_dict())
        print(f"3. Final weights, biases and batch-norm statistics bit-for-bit identical: "
              f"{'YES' if same else 'NO'}")

        test_x, test_y = load_digits("test")
        b.eval()
        with md.no_grad():
            accuracy = float((b(md.tensor(test_x)).argmax(axis=1).numpy() == test_y).mean())
        print(f"4. Test accuracy of the resumed model: {accuracy:.2%} on {len(test_y)} "
              f"held-out digits")

        onnx_path = os.path.join(workdir, "digits.onnx")
        try:
            md.export_onnx(b, onnx_path, example_input=md.tensor(test_x[:1]))
            message = f"exported to ONNX ({os.path.getsize(onnx_path) // 1024} KiB)"
            try:
                import onnxruntime
                session = onnxruntime.InferenceSession(onnx_path,
                                                       providers=["CPUExecutionProvider"])
                name = session.get_inputs()[0].name
                theirs = session.run(None, {name: test_x})[0]
                with md.no_grad():
                    ours = b(md.tensor(test_x)).numpy()
                message += (f"; onnxruntime agrees to {np.abs(theirs - ours).max():.1e} "
                            f"on all {len(test_x)} test digits")
            except ImportError:
                pass
        except (ImportError, ModuleNotFoundError) as error:
            message = f"ONNX export skipped ({error})"
        print(f"5. {message}")
        if plot_path is not None:
            print(f"6. Loss and accuracy per epoch plotted in {plot_path}")
        print(f"Done in {time.perf_counter() - start:.0f} s.")
        if not same:
            raise SystemExit(1)
    finally:
        if args.keep:
            print(f"run directories kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
