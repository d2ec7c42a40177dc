"""fit(accumulate_grad_batches=, clip_grad_norm=, clip_grad_value=) and TerminateOnNaN: each
does what a hand-written loop does, and a run interrupted anywhere (inside an accumulation
window too) resumes bitwise."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.training import CheckpointConfig, TerminateOnNaN

from test_training_resume import CrashAt

rng = np.random.default_rng(0)
X = rng.standard_normal((40, 3)).astype(np.float32)
Y = (X @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)


def setup():
    md.manual_seed(0)
    model = nn.Linear(3, 1)
    return model, optim.Adam(model.parameters(), lr=0.05)


def by_hand(batch_size, accumulate=1, clip_norm=None, clip_value=None, epochs=2):
    """The loop fit is meant to run, written out: windows of ``accumulate`` batches, each loss
    divided by it, the window closed at the end of an epoch."""
    model, opt = setup()
    batches = [(X[i:i + batch_size], Y[i:i + batch_size]) for i in range(0, 40, batch_size)]
    for _ in range(epochs):
        for start in range(0, len(batches), accumulate):
            opt.zero_grad()
            for x, y in batches[start:start + accumulate]:
                loss = nn.functional.mse_loss(model(md.tensor(x)), md.tensor(y))
                (loss * (1.0 / accumulate) if accumulate > 1 else loss).backward()
            if clip_value is not None:
                nn.utils.clip_grad_value_(model.parameters(), clip_value)
            if clip_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            opt.step()
    return model, opt


def with_fit(batch_size, epochs=2, directory=None, callbacks=(), **options):
    model, opt = setup()
    checkpoint = CheckpointConfig(directory, save_every_steps=1) if directory else None
    md.fit(model, nn.MSELoss(), opt, (X, Y), batch_size=batch_size, epochs=epochs,
           shuffle=False, progress=False, checkpoint=checkpoint, callbacks=list(callbacks),
           **options)
    return model, opt


def same(a, b):
    return all(x.tobytes() == y.tobytes()
               for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("options", [
    {"accumulate_grad_batches": 3},  # 5 batches an epoch: windows of 3 and 2
    {"clip_grad_norm": 0.5}, {"clip_grad_value": 0.1},
    {"accumulate_grad_batches": 2, "clip_grad_norm": 0.3},
])
def test_fit_steps_as_the_hand_written_loop_does(options):
    model, opt = with_fit(8, **options)
    reference, reference_opt = by_hand(8, options.get("accumulate_grad_batches", 1),
                                       options.get("clip_grad_norm"),
                                       options.get("clip_grad_value"))
    assert same(model, reference)
    steps = opt.state_dict()["state"][0]["step"]
    assert steps == reference_opt.state_dict()["state"][0]["step"]
    assert steps == (4 if options.get("accumulate_grad_batches") == 3 else
                     6 if options.get("accumulate_grad_batches") == 2 else 10)


def test_accumulating_small_batches_approximates_one_large_batch():
    small, _ = with_fit(5, accumulate_grad_batches=4, epochs=1)
    large, _ = with_fit(20, epochs=1)
    for a, b in zip(small.state_dict().values(), large.state_dict().values()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("crash_at", [2, 4, 7])  # inside a window, at its end, in epoch 2
def test_a_run_interrupted_inside_an_accumulation_window_resumes_bitwise(crash_at, tmp_path):
    options = {"accumulate_grad_batches": 3, "clip_grad_norm": 0.4}
    straight, _ = with_fit(8, **options)
    with pytest.raises(KeyboardInterrupt):
        with_fit(8, directory=tmp_path, callbacks=[CrashAt(crash_at)], **options)
    resumed, _ = with_fit(8, directory=tmp_path, callbacks=[CrashAt(-1)], **options)
    assert same(resumed, straight)


def test_bad_step_options_are_named():
    for options, name in (({"accumulate_grad_batches": 0}, "accumulate_grad_batches"),
                          ({"clip_grad_norm": -1.0}, "clip_grad_norm"),
                          ({"clip_grad_value": float("nan")}, "clip_grad_value")):
        with pytest.raises(ValueError, match=name):
            with_fit(8, **options)


def test_terminate_on_nan_stops_at_the_first_bad_step_and_stays_stopped(tmp_path, capsys):
    bad_x = X.copy()
    bad_x[21] = np.nan  # in the third batch of 8

    def run():
        model, opt = setup()
        return md.fit(model, nn.MSELoss(), opt, (bad_x, Y), batch_size=8, epochs=3,
                      shuffle=False, progress=False, callbacks=[TerminateOnNaN()],
                      checkpoint=CheckpointConfig(tmp_path, save_every_steps=1)), model

    history, model = run()
    assert "loss of step 3 is nan" in capsys.readouterr().err
    assert len(history) == 0  # stopped inside the first epoch
    weights = {k: v.copy() for k, v in model.state_dict().items()}
    _, again = run()  # a re-run restores the stopped run and does not train on
    assert all(np.array_equal(v, again.state_dict()[k], equal_nan=True)
               for k, v in weights.items())


def test_resuming_with_another_accumulation_is_refused_with_the_difference(tmp_path):
    with_fit(8, directory=tmp_path, epochs=1, accumulate_grad_batches=3)
    for options in ({}, {"accumulate_grad_batches": 2}):
        with pytest.raises(ValueError, match="fit/accumulate_grad_batches: checkpoint 3"):
            with_fit(8, directory=tmp_path, **options)
    with_fit(8, directory=tmp_path, accumulate_grad_batches=3)  # the same setting resumes
