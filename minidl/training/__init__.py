"""A high-level training loop (``md.fit`` / ``Trainer``) with checkpointed, exactly resumable
progress (``CheckpointConfig``), callbacks, metrics, ``evaluate``/``predict``, a progress bar
and a metric history."""

from .callbacks import (  # noqa: F401
    Callback, CSVLogger, EarlyStopping, LambdaCallback, LearningRateScheduler, ModelCheckpoint,
    ReduceLROnPlateau,
)
from .config import CheckpointConfig  # noqa: F401
from .evaluation import evaluate, predict  # noqa: F401
from .history import History, plot_history  # noqa: F401
from .metrics import (  # noqa: F401
    Accuracy, F1Score, MeanAbsoluteError, MeanSquaredError, Metric, Precision, Recall,
    TopKAccuracy,
)
from .trainer import Trainer, fit  # noqa: F401
