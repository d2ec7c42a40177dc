"""fit with checkpoints: new runs beside old ones, resuming the newest run, what a resume says
and compares, unambiguous file names, and options checked before training."""

import os
import warnings

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.checkpoint import naming
from minidl.datasets import load_digits
from minidl.training import Callback, CheckpointConfig, Trainer

X, Y = load_digits("train")
X, Y = X[:256], Y[:256]  # 8 batches of 32 an epoch: quick, and enough to cross epochs


def setup(lr=1e-2, hidden=16):
    md.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    return model, optim.SGD(model.parameters(), lr=lr, momentum=0.9)


class CrashAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, step, logs):
        if step == self.step:
            raise KeyboardInterrupt(f"crash at step {step}")


def train(directory, epochs=2, crash_at=None, lr=1e-2, hidden=16, batch_size=32, optimizer=None,
          metrics=("f1",), **config):
    model, opt = setup(lr, hidden)
    if optimizer is not None:
        opt = optimizer(model.parameters(), lr=lr)
    callbacks = [CrashAt(crash_at)] if crash_at else [CrashAt(-1)]
    config.setdefault("save_every_steps", 3)
    history = md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=batch_size,
                     epochs=epochs, callbacks=callbacks, progress=False, metrics=list(metrics),
                     checkpoint=CheckpointConfig(directory, max_to_keep=None, **config))
    return model, opt, history


def files(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".mdl"))


def same_weights(a, b):
    return all(x.tobytes() == y.tobytes()
               for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_new_run_gets_its_own_name_saves_on_schedule_and_leaves_the_old_run_alone(tmp_path):
    train(tmp_path, epochs=2)
    old = {n: (tmp_path / n).read_bytes() for n in files(tmp_path)}
    assert all(n.startswith("ckpt-") for n in old)
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, epochs=2, restore=False, crash_at=10)
    new = [n for n in files(tmp_path) if n.startswith("ckpt_2-")]
    # periodic saves of the new run happen (they are not skipped as "already saved")
    assert [naming.parse_name("ckpt_2", n).step for n in new] == [0, 3, 6, 9]
    assert {n: (tmp_path / n).read_bytes() for n in old} == old
    # the next plain run resumes the crashed new run, not the older finished one
    resumed_model, _, history = train(tmp_path, epochs=2)
    straight_model, _, straight = train(tmp_path / "straight", epochs=2)
    assert same_weights(resumed_model, straight_model)
    assert history.metrics == straight.metrics


def test_a_crash_before_the_new_runs_first_periodic_save_resumes_the_new_run(tmp_path):
    train(tmp_path, epochs=1)
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, epochs=1, restore=False, crash_at=2)
    trainer_says = md.latest_checkpoint(tmp_path, prefix="ckpt")
    assert os.path.basename(trainer_says) == "ckpt_2-epoch0000-step00000000.mdl"


def test_resume_says_where_it_resumed_from_even_without_progress(tmp_path, capsys):
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, epochs=2, crash_at=11)
    capsys.readouterr()
    train(tmp_path, epochs=2)
    err = capsys.readouterr().err
    expected = tmp_path / "ckpt-epoch0002-batch00001-step00000009.mdl"
    assert f"resumed from {expected} (epoch 2, batch 1, step 9)" in err


def test_names_say_the_epoch_and_the_batch_within_it(tmp_path):
    train(tmp_path, epochs=2, save_every_steps=4)
    assert files(tmp_path) == ["ckpt-epoch0001-batch00004-step00000004.mdl",
                               "ckpt-epoch0001-batch00008-step00000008.mdl",
                               "ckpt-epoch0002-batch00004-step00000012.mdl",
                               "ckpt-epoch0002-batch00008-step00000016.mdl"]


def test_a_changed_learning_rate_is_reported_and_the_user_chooses(tmp_path, capsys):
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, epochs=2, crash_at=5)
    with pytest.warns(UserWarning, match=r"optimizer/0/lr: checkpoint 0\.01, given now 0\.05"):
        _, opt, _ = train(tmp_path, epochs=1, lr=0.05)
    assert opt.param_groups[0]["lr"] == 0.01  # "warn": the checkpoint's value, said out loud

    with pytest.raises(ValueError, match=r"(?s)optimizer/0/lr.*on_change='override'"):
        train(tmp_path, epochs=2, lr=0.05, on_change="error")

    model, opt = setup(lr=0.05)
    trainer = Trainer(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=2,
                      callbacks=[CrashAt(-1)], progress=False, metrics=["f1"],
                      checkpoint=CheckpointConfig(tmp_path, on_change="override",
                                                  save_every_steps=3, max_to_keep=None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.run()
    assert opt.param_groups[0]["lr"] == 0.05
    assert "continues with the hyper-parameters given now" in capsys.readouterr().err
    with warnings.catch_warnings():  # the run now records 0.05: no complaint next time
        warnings.simplefilter("error")
        train(tmp_path, epochs=2, lr=0.05)


def test_override_moves_a_schedule_to_the_new_base_rate(tmp_path):
    def run(lr, crash_at=None, **config):
        model, opt = setup(lr)
        sched = optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
        md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=1,
               scheduler=sched, callbacks=[CrashAt(crash_at or -1)], progress=False,
               checkpoint=CheckpointConfig(tmp_path, save_every_steps=3, **config))
        return opt, sched

    with pytest.raises(KeyboardInterrupt):
        run(0.1, crash_at=7)  # checkpoint at step 6: two halvings
    opt, sched = run(0.4, on_change="override")
    assert sched.base_lrs == [0.4]
    assert opt.param_groups[0]["lr"] == pytest.approx(0.4 * 0.5 ** 2)


@pytest.mark.parametrize("change, message", [
    ({"hidden": 32}, r"model/1\.weight: checkpoint \[16, 64\], given now \[32, 64\]"),
    ({"batch_size": 64}, r"data/batch_size: checkpoint 32, given now 64"),
    ({"optimizer": optim.Adam}, r"optimizer/type: checkpoint 'SGD', given now 'Adam'"),
    ({"metrics": ["f1", "precision"]}, r"metrics: checkpoint \['f1'\], given now "),
])
def test_a_different_model_or_batch_size_cannot_resume_and_says_what_differs(
        tmp_path, change, message):
    train(tmp_path, epochs=1)
    before = files(tmp_path)
    with pytest.raises(ValueError, match=message):
        train(tmp_path, epochs=1, **change)
    assert files(tmp_path) == before


def test_restore_must_refuses_an_empty_directory_and_auto_starts_fresh(tmp_path):
    with pytest.raises(FileNotFoundError, match="restore='must'"):
        train(tmp_path, epochs=1, restore="must")
    train(tmp_path, epochs=1)
    model, _, _ = train(tmp_path, epochs=1, restore="must")
    with pytest.raises(ValueError, match="restore must be"):
        CheckpointConfig(tmp_path, restore="yes")


def test_restore_from_a_chosen_file_continues_as_a_new_run(tmp_path):
    train(tmp_path, epochs=2)
    chosen = tmp_path / "ckpt-epoch0001-batch00006-step00000006.mdl"
    model, _, history = train(tmp_path, epochs=2, restore_from=chosen)
    straight, _, straight_history = train(tmp_path / "straight", epochs=2)
    assert same_weights(model, straight) and history.metrics == straight_history.metrics
    assert any(n.startswith("ckpt_2-") for n in files(tmp_path))


def test_a_rerun_of_an_early_stopped_run_does_not_train_on(tmp_path):
    class Flat(Callback):
        def on_epoch_end(self, trainer, epoch, logs):
            logs["val_loss"] = 1.0

    def run():
        model, opt = setup()
        return md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=10,
                      callbacks=[Flat(), md.training.EarlyStopping(patience=1)],
                      progress=False, checkpoint=str(tmp_path))

    assert len(run()) == 2
    assert len(run()) == 2


def test_plot_path_is_checked_before_training(tmp_path, monkeypatch):
    from minidl.training import history as history_module
    model, opt = setup()
    before = [a.copy() for a in model.state_dict().values()]
    monkeypatch.setattr(history_module, "matplotlib_available", lambda: False)
    with pytest.raises(ImportError, match="needs matplotlib"):
        md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), epochs=1, progress=False,
               plot_path=tmp_path / "h.png")
    monkeypatch.setattr(history_module, "matplotlib_available", lambda: True)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), epochs=1, progress=False,
               plot_path=tmp_path / "missing" / "h.png")
    assert all(np.array_equal(a, b) for a, b in zip(before, model.state_dict().values()))


def test_a_plot_that_fails_after_training_keeps_the_history(tmp_path, monkeypatch):
    from minidl.training import history as history_module
    from minidl.training import trainer as trainer_module
    monkeypatch.setattr(history_module, "matplotlib_available", lambda: True)

    def broken_plot(history, path):
        raise RuntimeError("no display")

    monkeypatch.setattr(trainer_module, "plot_history", broken_plot)
    model, opt = setup()
    with pytest.warns(RuntimeWarning, match="could not write the plot"):
        history = md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), epochs=2, progress=False,
                         plot_path=tmp_path / "h.png")
    assert len(history) == 2


def test_md_load_of_a_fit_checkpoint_gives_the_plain_model_weights(tmp_path):
    model, _, _ = train(tmp_path, epochs=1)
    contents = md.load(md.latest_checkpoint(tmp_path))
    assert contents["step"] == 8
    fresh, _ = setup()
    fresh.load_state_dict(contents["objects"]["model"])
    assert same_weights(fresh, model)


def test_every_manager_policy_is_reachable_through_checkpoint_config(tmp_path):
    pytest.importorskip("cryptography")
    from minidl.io import read_header

    class ValLoss(Callback):  # a val_loss that is best at the end of epoch 2
        def on_epoch_end(self, trainer, epoch, logs):
            logs["val_loss"] = [3.0, 1.0, 2.0, 2.5][epoch]

    key = b"k" * 32
    config = dict(save_every_steps=8, max_to_keep=1, monitor="val_loss", keep_best=1, key=key,
                  metadata={"experiment": "digits"}, async_save=True)

    def run(epochs):
        model, opt = setup()
        md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=epochs,
               callbacks=[ValLoss()], progress=False,
               checkpoint=CheckpointConfig(tmp_path, **config))
        return model

    run(4)
    kept = files(tmp_path)
    assert kept == ["ckpt-epoch0002-batch00008-step00000016.mdl",   # the best by val_loss
                    "ckpt-epoch0004-batch00008-step00000032.mdl"]   # the newest
    header = read_header(tmp_path / kept[-1], key=key)
    assert header.encrypted and header.metadata["metadata"]["experiment"] == "digits"
    with pytest.raises(md.CheckpointError):
        read_header(tmp_path / kept[-1])  # no key, no reading
    assert same_weights(run(4), run(4))  # reruns restore the encrypted files and stop there


class LastStepClassifier(nn.Module):
    """A two-layer LSTM over the rows of an image, classifying from the last step's output."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, dropout=0.2, batch_first=True)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


LOADER_MODELS = {
    "lstm": (LastStepClassifier, lambda p: optim.RMSprop(p, lr=1e-2, momentum=0.5)),
    "mlp": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(),
                                  nn.Linear(16, 10)), lambda p: optim.Adam(p, lr=1e-2)),
    # Eight tokens of eight features per image; attention and feed-forward dropout draw from
    # the global generator, whose state the checkpoint carries; a one-cycle schedule too.
    "transformer": (lambda: nn.Sequential(
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True), nn.Flatten(),
        nn.Linear(64, 10)), lambda p: optim.RAdam(p, lr=1e-2)),
}


@pytest.mark.parametrize("name", sorted(LOADER_MODELS))
def test_fit_trains_from_a_loader_and_resumes_bitwise(name, tmp_path):
    from minidl.data import DataLoader, TensorDataset

    images = X[:160] if name == "mlp" else X[:160].reshape(-1, 8, 8)
    data = TensorDataset(md.tensor(images), md.tensor(Y[:160]))
    build, make_optimizer = LOADER_MODELS[name]

    def train(directory, crash_at=-1):
        md.manual_seed(0)
        model = build()
        opt = make_optimizer(model.parameters())
        loader = DataLoader(data, batch_size=32, shuffle=True, seed=4)
        scheduler = optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-2, total_steps=15)
        md.fit(model, nn.CrossEntropyLoss(), opt, loader, epochs=3, progress=False,
               scheduler=scheduler, callbacks=[CrashAt(crash_at)],
               checkpoint=CheckpointConfig(directory, save_every_steps=4, max_to_keep=None))
        return model

    straight = train(tmp_path / "straight")
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path / "resumed", crash_at=7)  # mid-epoch: the last save was at step 4
    resumed = train(tmp_path / "resumed")
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        assert a.tobytes() == b.tobytes()
