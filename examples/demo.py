"""minidl demo: train a small CNN on the 8×8 handwritten digits and report its test accuracy.

    bash scripts/demo.sh            # sets up .venv, then runs this file
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import minidl as md
from minidl import nn, optim
from minidl.data import ArrayDataset, DataReader
from minidl.datasets import load_digits


def build_model() -> nn.Module:
    """The API.md CNN, a little wider: conv-bn-relu-pool, then a linear classifier."""
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 2 * 2, 10),
    )


def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    model.eval()
    with md.no_grad():
        predictions = model(md.tensor(images)).argmax(axis=1).numpy()
    model.train()
    return float((predictions == labels).mean())


def train(epochs: int, seed: int = 0) -> tuple[nn.Module, list[float]]:
    md.manual_seed(seed)
    train_x, train_y = load_digits("train")
    model = build_model()
    opt = optim.Adam(model.parameters(), lr=3e-3)
    reader = DataReader(ArrayDataset(train_x, train_y), batch_size=32, shuffle=True, seed=seed)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(reader))
    losses = []
    for epoch in range(epochs):
        total, count = 0.0, 0
        for xb, yb in reader:
            loss = nn.functional.cross_entropy(model(md.tensor(xb)), md.tensor(yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total, count = total + loss.item() * len(yb), count + len(yb)
        losses.append(total / count)
        print(f"epoch {epoch + 1:2d}/{epochs}  loss {losses[-1]:.4f}")
    return model, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args()

    start = time.perf_counter()
    model, _ = train(args.epochs)
    test_x, test_y = load_digits("test")
    acc = accuracy(model, test_x, test_y)
    print(f"test accuracy {acc:.2%} on {len(test_y)} held-out digits "
          f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
