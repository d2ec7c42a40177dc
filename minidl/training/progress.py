"""Progress reporting for ``fit``: a tqdm bar when tqdm is installed, one line per epoch if not."""

from __future__ import annotations

import sys
import time


class Progress:
    """Shows steps done, the running loss and throughput (samples/s)."""

    def __init__(self, total_steps: int, initial_step: int, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.samples, self.started = 0, time.perf_counter()
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        self.bar = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True,
                        leave=True)

    def step(self, loss: float, batch_size: int) -> None:
        self.samples += batch_size
        if self.bar is not None:
            rate = self.samples / max(time.perf_counter() - self.started, 1e-9)
            self.bar.set_postfix(loss=f"{loss:.4f}", samples_per_s=f"{rate:.0f}", refresh=False)
            self.bar.update(1)

    def epoch(self, epoch: int, logs: dict) -> None:
        if not self.enabled:
            return
        text = f"epoch {epoch + 1}: " + "  ".join(f"{k} {v:.4f}" for k, v in sorted(logs.items()))
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
