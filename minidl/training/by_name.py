"""Losses and optimizers by Keras's names: ``fit(model, "mse", "adam", ...)``.

Keras users write ``compile(loss="mse", optimizer="adam")``. ``fit`` takes objects (a loss
module or function, an optimizer over the model's parameters), and also these names, which
build the same objects with default hyper-parameters. An optimizer named gets Keras's default
learning rate for that name (Keras users expect ``"adam"`` to mean lr=0.001, ``"sgd"``
lr=0.01), every other setting minidl's (PyTorch's) default.

The cross-entropy names take the model's raw scores (logits), as PyTorch's losses do, where
Keras's default expects probabilities: a model for them ends without a Softmax/Sigmoid.
"""

from __future__ import annotations

from .. import nn, optim

LOSSES = {
    "mse": nn.MSELoss, "mean_squared_error": nn.MSELoss,
    "categorical_crossentropy": nn.CrossEntropyLoss,
    "sparse_categorical_crossentropy": nn.CrossEntropyLoss,
    "cross_entropy": nn.CrossEntropyLoss, "crossentropy": nn.CrossEntropyLoss,
    "binary_crossentropy": nn.BCEWithLogitsLoss, "nll": nn.NLLLoss,
}

# name: (class, Keras's default learning rate for it)
OPTIMIZERS = {
    "sgd": (optim.SGD, 0.01), "adam": (optim.Adam, 0.001), "adamw": (optim.AdamW, 0.001),
    "rmsprop": (optim.RMSprop, 0.001), "adagrad": (optim.Adagrad, 0.001),
    "adadelta": (optim.Adadelta, 0.001), "nadam": (optim.NAdam, 0.001),
    "radam": (optim.RAdam, 0.001),
}


def loss_from(loss):
    """``loss`` itself when it is callable, else the loss module its name stands for."""
    if isinstance(loss, str):
        if loss.lower() not in LOSSES:
            raise ValueError(f"fit: unknown loss {loss!r}; known names: {sorted(LOSSES)}, or "
                             f"pass a loss object, e.g. nn.CrossEntropyLoss()")
        return LOSSES[loss.lower()]()
    if not callable(loss):
        raise TypeError(f"fit: the loss must be a loss object or function (e.g. "
                        f"nn.CrossEntropyLoss()) or a name such as 'mse', got "
                        f"{type(loss).__name__}")
    return loss


def optimizer_from(optimizer, model):
    """``optimizer`` itself when it is one, else the optimizer its name stands for, over
    ``model``'s parameters."""
    if isinstance(optimizer, str):
        if optimizer.lower() not in OPTIMIZERS:
            raise ValueError(f"fit: unknown optimizer {optimizer!r}; known names: "
                             f"{sorted(OPTIMIZERS)}, or pass an optimizer object, e.g. "
                             f"optim.Adam(model.parameters(), lr=1e-3)")
        optimizer_class, rate = OPTIMIZERS[optimizer.lower()]
        return optimizer_class(model.parameters(), lr=rate)
    if not (callable(getattr(optimizer, "step", None))
            and callable(getattr(optimizer, "zero_grad", None))):
        raise TypeError(f"fit: the optimizer must be an optimizer over the model's parameters "
                        f"(e.g. optim.Adam(model.parameters(), lr=1e-3)) or a name such as "
                        f"'adam', got {type(optimizer).__name__}")
    return optimizer
