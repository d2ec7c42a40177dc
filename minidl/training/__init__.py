"""A high-level training loop (``md.fit`` / ``Trainer``) with checkpointed, exactly resumable
progress, callbacks (EarlyStopping, ModelCheckpoint), a progress bar and a metric history."""

from .callbacks import Callback, EarlyStopping, ModelCheckpoint  # noqa: F401
from .history import History, plot_history  # noqa: F401
from .trainer import Trainer, fit  # noqa: F401
