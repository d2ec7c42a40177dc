"""The metric history of a run, and an optional plot of it."""

from __future__ import annotations

import importlib.util
import math
import os


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

    @property
    def history(self) -> dict[str, list[float]]:
        """``{metric: [value per epoch]}``, as Keras's ``History.history``."""
        return self.metrics

    def best_epoch(self, monitor: str, mode: str = "min") -> int | None:
        """Index (into the rows) of the best value of ``monitor``, or None if it has none."""
        values = [(v, i) for i, v in enumerate(self.metrics.get(monitor, [])) if not math.isnan(v)]
        if not values:
            return None
        return (min(values) if mode == "min" else max(values, key=lambda vi: (vi[0], -vi[1])))[1]

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


def matplotlib_available() -> bool:
    """Whether matplotlib can be imported (without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def check_plot_path(path) -> None:
    """Raise now, before any training, if a plot could not be written to ``path`` later."""
    if not matplotlib_available():
        raise ImportError(f"fit: plot_path={os.fspath(path)!r} needs matplotlib, which is not "
                          f"installed: pip install 'minidl[plot]' (or drop plot_path)")
    directory = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"fit: plot_path={os.fspath(path)!r}: directory {directory!r} "
                                f"does not exist")
    if not str(path).lower().endswith(".png"):
        raise ValueError(f"fit: plot_path={os.fspath(path)!r} must name a .png file")


def plot_history(history: History, path, metrics=None, title: str = "Training history") -> None:
    """Write a PNG: one panel of losses and, when recorded, one of accuracies, per epoch.

    The best epoch (lowest ``val_loss``, else lowest ``loss``) is marked with a vertical line on
    every panel. Needs matplotlib (the "plot" extra).
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("plot_history needs matplotlib: pip install 'minidl[plot]'") from error
    from matplotlib.ticker import MaxNLocator

    ordered = sorted(history.metrics, key=lambda m: (m.startswith("val_"), m))  # train, then val
    names = metrics or [m for m in ordered if not m.endswith("accuracy")]
    accuracy = [m for m in ordered if m.endswith("accuracy")] if metrics is None else []
    panels = [(names, "loss")] + ([(accuracy, "accuracy")] if accuracy else [])
    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    epochs = [e + 1 for e in history.epochs]
    monitor = "val_loss" if "val_loss" in history else "loss"
    best = history.best_epoch(monitor, "min")
    for ax, (group, label) in zip(axes[0], panels):
        for name in group:
            ax.plot(epochs, history[name], marker="o", markersize=3, label=name)
        if best is not None:
            ax.axvline(epochs[best], color="grey", linestyle="--", linewidth=1,
                       label=f"best epoch {epochs[best]} ({monitor} "
                             f"{history[monitor][best]:.4f})")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
        ax.set_title(label)
        ax.legend()
        ax.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
