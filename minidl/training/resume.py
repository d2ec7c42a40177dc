"""Resuming a ``fit`` run: which checkpoint to continue from, what must match, what to do when
the hyper-parameters changed, and saying where training resumed.

``fit`` calls :func:`open_checkpoints` before its first step. It builds the checkpoint
manager from the ``CheckpointConfig``, then either starts a run (a new ``_N`` run claims its
name at once with a step-0 checkpoint, so a crash before its first periodic save cannot make
the next resume pick the older run) or restores one: the model, data and metrics must match
the checkpoint's (:mod:`.run_signature`); changed hyper-parameters, and a changed set of
stateful callbacks, are reported and handled as ``on_change`` says.
"""

from __future__ import annotations

import os

from .. import user_warnings
from . import run_signature
from .callbacks import callback_changes


def open_checkpoints(trainer) -> None:
    """Build the manager, and restore what ``restore``/``restore_from`` ask for."""
    from ..checkpoint import latest_checkpoint
    from ..io import CheckpointError, read_header

    config = trainer.checkpoint_config
    given = trainer.signature_given()
    restore_from = config.restore_from
    if restore_from is not None:
        newest = latest_checkpoint(config.directory, prefix=config.prefix)
        if started_from(newest, config.key) == os.path.realpath(restore_from):
            restore_from = None  # this script ran before: continue the run it started
    new_run = config.restore is False or restore_from is not None
    trainer.manager = config.build_manager(trainer.training_state(), new_run=new_run)
    source = restore_from if restore_from is not None else (
        None if new_run else trainer.manager.latest)
    if source is None:
        if config.restore == "must":
            raise FileNotFoundError(
                f"fit: restore='must', but {config.directory!r} holds no checkpoint of a run "
                f"named {config.prefix!r} to resume")
        trainer.signature = given
        if trainer.manager.prefix != config.prefix:
            # Claim the new run's name at once: a crash before its first periodic save
            # must resume this run, not the older one beside it.
            trainer.manager.save(0, metadata=trainer.checkpoint_metadata())
            trainer.saved_step = 0
            trainer.say(f"starting a new run '{trainer.manager.prefix}' in {config.directory} "
                        f"(runs already there are left as they are)")
        return
    try:  # a model or data that does not fit is refused before anything is restored
        header = read_header(source, key=config.key).metadata
        expected = header.get("metadata", {}).get("fit")
        saved_callbacks = header.get("objects", {}).get("callbacks")
    except (CheckpointError, AttributeError):
        # unreadable: the restore below reports it or falls back
        expected = saved_callbacks = None
    if isinstance(expected, dict):
        check_structure(source, expected.get("structure", {}), given["structure"])
    if config.on_change == "error" and saved_callbacks is not None:
        try:
            changes = callback_changes(saved_callbacks, trainer.callbacks)
        except ValueError:
            changes = []  # malformed: the restore below reports it
        if changes:
            raise ValueError(
                f"fit: cannot resume from {source}: the stateful callbacks given now differ "
                f"from the checkpoint's:\n  " + "\n  ".join(changes) + "\nTo restore the "
                f"states that match use on_change='warn' (or 'override'); to start afresh "
                f"restore=False.")
    step = (trainer.manager.restore(source) if restore_from is not None
            else trainer.manager.restore_latest())
    if step is None:  # the files vanished since we listed them
        trainer.signature = given
        return
    restored = trainer.manager.last_restored.path
    # The file actually restored (an older one when the newest was damaged) says how its
    # run began.
    saved = trainer.manager.last_restored.metadata.get("fit")
    trainer.step = trainer.saved_step = step
    trainer.resumed_from = restored
    trainer.signature = saved if isinstance(saved, dict) else given
    if restore_from is not None:  # a new run from a chosen file: its checkpoints say which
        trainer.signature = dict(trainer.signature, started_from=os.path.realpath(restore_from))
    if isinstance(saved, dict):
        reconcile_hyperparameters(trainer, saved.get("hyperparameters", {}),
                                        given["hyperparameters"])
    report_callback_changes(trainer, trainer.manager.checkpoint.objects["callbacks"].changes)
    trainer.say(f"resumed from {restored} ({where(trainer)})")


def started_from(path: str | None, key) -> str | None:
    """The file the run of checkpoint ``path`` was started from with ``restore_from=``
    (its real path), or None: a script with ``restore_from=FILE`` that runs again continues
    the run it started instead of starting from FILE once more."""
    from ..io import CheckpointError, read_header
    if path is None:
        return None
    try:
        signature = read_header(path, key=key).metadata.get("metadata", {}).get("fit")
    except (CheckpointError, AttributeError):
        return None
    return signature.get("started_from") if isinstance(signature, dict) else None


def where(trainer) -> str:
    """Where training stands, for messages: epoch and batch from 1, and the step."""
    done = trainer.totals.batches
    epoch = getattr(trainer.reader, "epoch", 0)
    if done:
        return f"epoch {epoch + 1}, batch {done}, step {trainer.step}"
    return f"end of epoch {epoch}, step {trainer.step}"


def check_structure(source: str, saved: dict, given: dict) -> None:
    differences = run_signature.differences(saved, given)
    if differences:
        raise ValueError(
            f"fit: cannot resume from {source}: the model or data given now differ from the "
            f"checkpoint's:\n  " + "\n  ".join(differences) +
            "\nStart a new run instead (CheckpointConfig(..., restore=False), or another "
            "directory).")


def reconcile_hyperparameters(trainer, saved: dict, given: dict) -> None:
    differences = run_signature.differences(saved, given)
    if not differences:
        return
    listing = "\n  " + "\n  ".join(differences)
    choice = trainer.checkpoint_config.on_change
    if choice == "error":
        raise ValueError(
            f"fit: the hyper-parameters given differ from those of the run in "
            f"{trainer.resumed_from}:{listing}\nTo continue with the checkpoint's values use "
            f"on_change='warn'; to apply the new ones on_change='override'; to start "
            f"afresh restore=False.")
    if choice == "override":
        changed = run_signature.changed_names(saved, given)
        run_signature.apply_hyperparameters(trainer.optimizer, trainer.scheduler, given, changed)
        trainer.signature = dict(trainer.signature, hyperparameters=given)
        trainer.say(f"resumed run continues with the hyper-parameters given now:{listing}")
        return
    user_warnings.warn(
        f"fit: resumed from {trainer.resumed_from} with the checkpoint's hyper-parameters, "
        f"which differ from those given now:{listing}\nPass CheckpointConfig(..., "
        f"on_change='override') to use the new values, or restore=False to start a new "
        f"run.")


def report_callback_changes(trainer, changes: list[str]) -> None:
    """Say which callback states were not restored: every callback whose state was saved
    got it back; one given now without a saved state starts afresh (``on_change="error"``
    refused such a change before restoring)."""
    if not changes:
        return
    listing = "\n  " + "\n  ".join(changes)
    if trainer.checkpoint_config.on_change == "override":
        trainer.say(f"resumed run continues with the callbacks given now:{listing}")
        return
    user_warnings.warn(
        f"fit: resumed from {trainer.resumed_from}, but the stateful callbacks given now "
        f"differ from the checkpoint's; the states that match were restored:{listing}\nPass "
        f"CheckpointConfig(..., on_change='override') to accept this without a warning.")
