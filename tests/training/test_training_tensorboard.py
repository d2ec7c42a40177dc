"""The TensorBoard callback: the event files it writes, read back record by record, hold each
epoch's metrics, the learning rate, the requested step losses and weight histograms; a resumed
run leaves each step once. Skipped when the tensorboard extra is not installed."""

from __future__ import annotations

import glob
import os
import struct

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.training import CheckpointConfig, TensorBoard

from test_training_resume import CrashAt

event_pb2 = pytest.importorskip("tensorboardX.proto.event_pb2")

rng = np.random.default_rng(0)
X = rng.standard_normal((24, 3)).astype(np.float32)
Y = rng.integers(0, 2, 24)


def read_events(log_dir):
    """Every (tag, step, value-or-histogram) in the event files, oldest file first, and
    ("purge", step, None) for a restart marker. The format is TFRecord: a length (8 bytes),
    its CRC (4), the serialized Event, its CRC (4)."""
    found = []
    for path in sorted(glob.glob(f"{log_dir}/events.out.tfevents.*"), key=os.path.getmtime):
        data = open(path, "rb").read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            if event.HasField("session_log"):
                found.append(("purge", event.step, None))
            for value in event.summary.value:
                found.append((value.tag, event.step,
                              value.histo if value.HasField("histo") else value.simple_value))
    return found


def run(log_dir, checkpoint=None, crash_at=-1, **options):
    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = optim.SGD(model.parameters(), lr=0.1)
    scheduler = optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=8, epochs=2,
                  scheduler=scheduler, progress=False, checkpoint=checkpoint,
                  callbacks=[TensorBoard(log_dir, **options), CrashAt(crash_at)])


def test_epoch_metrics_learning_rate_step_losses_and_histograms_are_written(tmp_path):
    history = run(tmp_path, histogram_freq=1, update_freq=2)
    events = read_events(tmp_path)
    losses = [(step, value) for tag, step, value in events if tag == "epoch/loss"]
    assert losses == [(3, pytest.approx(history.history["loss"][0])),
                      (6, pytest.approx(history.history["loss"][1]))]
    assert [v for t, _, v in events if t == "epoch/accuracy"] == \
        pytest.approx(history.history["accuracy"])
    assert [(s, v) for t, s, v in events if t == "epoch/learning_rate"] == \
        [(3, pytest.approx(0.05)), (6, pytest.approx(0.025))]
    assert [s for t, s, _ in events if t == "step/loss"] == [2, 4, 6]
    histograms = [(t, s, v) for t, s, v in events if t == "0.weight"]
    assert [s for _, s, _ in histograms] == [3, 6] and histograms[-1][2].num == 12


def test_a_resumed_run_writes_each_step_once(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "logs", CheckpointConfig(tmp_path / "ckpt", save_every_steps=2),
            crash_at=5, update_freq="batch")
    run(tmp_path / "logs", CheckpointConfig(tmp_path / "ckpt", save_every_steps=2),
        update_freq="batch")
    events = read_events(tmp_path / "logs")
    # What TensorBoard shows: a purge marker at step s drops the earlier files' events from s on.
    shown = []
    for tag, step, value in events:
        if tag == "purge":
            shown = [(t, s) for t, s in shown if s < step]
        elif tag == "step/loss":
            shown.append((tag, step))
    assert [s for _, s in shown] == [1, 2, 3, 4, 5, 6]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="update_freq"):
        TensorBoard("logs", update_freq=0)
    with pytest.raises(ValueError, match="histogram_freq"):
        TensorBoard("logs", histogram_freq=-1)
