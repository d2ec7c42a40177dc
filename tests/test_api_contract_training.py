"""The high-level training snippet of the public API page runs as written."""

import os

import minidl as md
from minidl import nn, optim
from minidl.datasets import load_digits


def test_high_level_training_snippet(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    md.manual_seed(0)
    X, y = load_digits("train")
    Xt, yt = load_digits("test")
    Xv, yv = Xt[:100], yt[:100]
    model = nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(8 * 4 * 4, 10),
    )
    opt = optim.Adam(model.parameters(), lr=1e-3)

    history = md.fit(model, nn.CrossEntropyLoss(), opt, (X, y), batch_size=32, epochs=10,
                     validation_data=(Xv, yv), callbacks=[md.training.EarlyStopping(patience=3)],
                     checkpoint=md.CheckpointConfig("runs/digits", save_every_steps=50,
                                                    max_to_keep=3))
    history.history["val_loss"]
    results = md.evaluate(model, (Xt, yt), metrics=["accuracy"])
    outputs = md.predict(model, Xt)
    text = model.summary()
    latest = md.latest_checkpoint("runs/digits")

    assert len(history.history["val_loss"]) == len(history) >= 4
    assert results["accuracy"] > 0.85 and outputs.shape == (len(yt), 10)
    assert "Total params" in text
    assert latest is not None and os.path.dirname(latest) == "runs/digits"
    assert len([n for n in os.listdir("runs/digits") if n.endswith(".mdl")]) <= 3
    assert capsys.readouterr().out.count("\n") >= len(history)
