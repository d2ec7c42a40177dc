"""``TerminateOnNaN``: stop training at the first step whose loss is not finite (Keras's)."""

from __future__ import annotations

import math

from .callbacks import Callback


class TerminateOnNaN(Callback):
    """Ends training after a step whose loss is nan or ±inf, saying so.

    Once a loss is nan every later step is too (the weights are nan), so training on only
    burns time -- and, with periodic checkpoints, overwrites good ones. The stop is part of the
    checkpointed state: running the script again does not train on from the bad weights.
    """

    def __init__(self):
        self.stopped_at: int | None = None

    def on_step_end(self, trainer, step, logs):
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(loss):
            self.stopped_at = step
            trainer.say(f"TerminateOnNaN: the loss of step {step} is {loss}; training stops")
            trainer.stop_training = True
