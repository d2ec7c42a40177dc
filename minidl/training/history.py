"""The metric history of a run, and an optional plot of it."""

from __future__ import annotations

import math


class History:
    """Per-epoch metrics (``history["loss"]``, ``history["val_accuracy"]``, ...) plus the step
    at which each epoch ended. It has ``state_dict``/``load_state_dict`` so a resumed run returns
    the same history as an uninterrupted one."""

    def __init__(self):
        self.epochs: list[int] = []
        self.steps: list[int] = []
        self.metrics: dict[str, list[float]] = {}

    def record(self, epoch: int, step: int, values: dict) -> None:
        self.epochs.append(int(epoch))
        self.steps.append(int(step))
        for name in set(self.metrics) | set(values):
            column = self.metrics.setdefault(name, [math.nan] * (len(self.epochs) - 1))
            column.append(float(values.get(name, math.nan)))

    def __getitem__(self, name: str) -> list[float]:
        return self.metrics[name]

    def __contains__(self, name: str) -> bool:
        return name in self.metrics

    def __len__(self) -> int:
        return len(self.epochs)

    def state_dict(self) -> dict:
        return {"kind": "minidl.History", "epochs": list(self.epochs), "steps": list(self.steps),
                "metrics": {k: list(v) for k, v in self.metrics.items()}}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("kind") != "minidl.History":
            raise ValueError("History.load_state_dict: not a History state (field 'kind')")
        epochs, steps, metrics = state.get("epochs"), state.get("steps"), state.get("metrics")
        if not (isinstance(epochs, list) and isinstance(steps, list) and isinstance(metrics, dict)
                and len(epochs) == len(steps)
                and all(isinstance(v, list) and len(v) == len(epochs) for v in metrics.values())):
            raise ValueError("History.load_state_dict: fields 'epochs', 'steps' and 'metrics' "
                             "must be lists of one length")
        self.epochs, self.steps = [int(e) for e in epochs], [int(s) for s in steps]
        self.metrics = {str(k): [float(x) for x in v] for k, v in metrics.items()}

    def __repr__(self) -> str:
        return f"History(epochs={len(self)}, metrics={sorted(self.metrics)})"


def plot_history(history: History, path, metrics=None) -> None:
    """Write a PNG of loss (and accuracy, if recorded) per epoch; needs matplotlib (the "plot"
    extra)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("plot_history needs matplotlib: pip install 'minidl[plot]'") from error
    names = metrics or [m for m in history.metrics if not m.endswith("accuracy")]
    accuracy = [m for m in history.metrics if m.endswith("accuracy")] if metrics is None else []
    panels = [names] + ([accuracy] if accuracy else [])
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5), squeeze=False)
    epochs = [e + 1 for e in history.epochs]
    for ax, group in zip(axes[0], panels):
        for name in group:
            ax.plot(epochs, history[name], marker="o", label=name)
        ax.set_xlabel("epoch")
        ax.legend()
        ax.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
