"""Shared pieces of the checkpoint tests: a small training setup and exact state comparison."""

from __future__ import annotations

import numpy as np

import minidl as md
from minidl import nn, optim
from minidl.data import ArrayDataset, DataReader


class Counter:
    """A user object with its own state: any object with state_dict/load_state_dict works."""

    def __init__(self):
        self.count = 0
        self.history = np.zeros(3, np.float64)
        self.tags = {7: "seven"}  # non-str keys must survive the trip too

    def state_dict(self):
        return {"count": self.count, "history": self.history.copy(), "tags": dict(self.tags)}

    def load_state_dict(self, state):
        if not isinstance(state.get("count"), int):
            raise ValueError("Counter: 'count' must be an int")
        self.count = state["count"]
        self.history = np.array(state["history"])
        self.tags = dict(state["tags"])


def make_data():
    rng = np.random.default_rng(42)
    return (rng.standard_normal((96, 6)).astype(np.float32),
            rng.integers(0, 3, 96).astype(np.int64))


def build(seed: int = 0) -> dict:
    """A fresh set of training objects (the model's init depends on ``seed``)."""
    md.manual_seed(seed)
    features, labels = make_data()
    model = nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Dropout(0.25),
                          nn.Linear(12, 3))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    return {
        "model": model,
        "optimizer": opt,
        "scheduler": optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
        "reader": DataReader(ArrayDataset(features, labels), batch_size=10, shuffle=True, seed=3),
        "counter": Counter(),
    }


def train(objects: dict, steps: int) -> None:
    """A few real steps: moves parameters, buffers, slots, schedule, reader, RNG, counter."""
    model, opt = objects["model"], objects["optimizer"]
    model.train()
    for _ in range(steps):
        xb, yb = objects["reader"].next_batch()
        loss = nn.functional.cross_entropy(model(md.tensor(xb)), md.tensor(yb))
        opt.zero_grad()
        loss.backward()
        opt.step()
        objects["scheduler"].step()
        objects["counter"].count += 1
        objects["counter"].history += float(loss.item())


def flatten(value, prefix="") -> dict:
    """Nested state as {path: array-or-scalar} for exact comparison."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}/{k}"))
        return out
    if isinstance(value, (list, tuple)):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}/{i}"))
        return out
    return {prefix: value}


def snapshot(objects: dict) -> dict:
    """Every object's state (copied) plus the global RNG's."""
    state = {name: obj.state_dict() for name, obj in objects.items()}
    state["rng"] = md.get_rng_state()
    flat = flatten(state)
    return {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in flat.items()}


def assert_bitwise_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b), set(a) ^ set(b)
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape, key
            assert x.tobytes() == y.tobytes(), key
        else:
            assert type(x) is type(y) and x == y, (key, x, y)
