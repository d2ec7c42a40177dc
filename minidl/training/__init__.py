"""A high-level training loop (``md.fit`` / ``Trainer``) with checkpointed, exactly resumable
progress (``CheckpointConfig``), callbacks, metrics, ``evaluate``/``predict``, a progress bar
and a metric history. ``gradient_steps.py`` turns losses into optimizer steps (accumulation,
clipping); ``terminate_on_nan.py`` and ``tensorboard.py`` are two more callbacks.

``trainer.py`` is the loop; ``config.py`` the checkpoint policies; ``resume.py`` and
``run_signature.py`` how a run resumes and what it compares; ``checkpoint_model.py`` the model
inside a checkpoint; ``data_source.py`` what counts as data; ``evaluation.py`` and ``metrics.py``
evaluation and prediction; ``callbacks.py``, ``progress.py`` and ``history.py`` what the user
sees and hooks into; ``by_name.py`` the Keras names ``fit`` takes for a loss and an optimizer.
"""

from .callbacks import (
    Callback, CSVLogger, EarlyStopping, LambdaCallback, LearningRateScheduler, ModelCheckpoint,
    ReduceLROnPlateau,
)
from .checkpoint_model import model_from_checkpoint
from .config import CheckpointConfig
from .evaluation import evaluate, predict
from .history import History, plot_history
from .metrics import (
    Accuracy, F1Score, MeanAbsoluteError, MeanSquaredError, Metric, Precision, Recall,
    TopKAccuracy,
)
from .trainer import Trainer, fit
from .terminate_on_nan import TerminateOnNaN
from .tensorboard import TensorBoard

__all__ = [
    "fit", "Trainer", "CheckpointConfig", "History", "plot_history", "evaluate", "predict",
    "Callback", "EarlyStopping", "ModelCheckpoint", "ReduceLROnPlateau", "LearningRateScheduler",
    "CSVLogger", "LambdaCallback", "TerminateOnNaN", "TensorBoard",
    "Metric", "Accuracy", "TopKAccuracy", "Precision", "Recall", "F1Score", "MeanAbsoluteError",
    "MeanSquaredError",
    "model_from_checkpoint",
]
