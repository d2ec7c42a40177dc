"""The demo, run as a user would pipe it: lines arrive while it runs, and it names its plot."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_demo_prints_as_it_goes_through_a_pipe_and_writes_the_plot_it_names(tmp_path):
    pytest.importorskip("matplotlib")
    env = dict(os.environ, PYTHONPATH=str(DEMO.parents[1]))
    process = subprocess.Popen([sys.executable, str(DEMO), "--epochs", "2"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
    first = process.stdout.readline()
    still_running = process.poll() is None
    rest = process.stdout.read()
    assert process.wait() == 0, first + rest
    assert first.startswith("1. Training straight through") and still_running
    assert "epoch 1/2 - " in rest and "resumed from" in rest
    assert "bit-for-bit identical: YES" in rest
    plot = tmp_path / "demo_output" / "demo_history.png"
    assert f"plotted in {plot}" in rest
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def load_demo():
    spec = importlib.util.spec_from_file_location("demo", DEMO)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def test_no_tqdm_on_a_terminal_names_the_extra_once(monkeypatch, capsys):
    demo = load_demo()
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    demo.StepBar(10, 0)
    demo.StepBar(10, 0)
    assert capsys.readouterr().out.count("pip install 'minidl[progress]'") == 1


def test_the_default_plot_path_is_ignored_by_git():
    git = subprocess.run(["git", "-C", str(DEMO.parents[1]), "rev-parse", "--git-dir"],
                         capture_output=True)
    if git.returncode != 0:
        pytest.skip("not a git checkout")
    demo = load_demo()
    ignored = subprocess.run(["git", "-C", str(DEMO.parents[1]), "check-ignore", "-q",
                              demo.DEFAULT_PLOT])
    assert ignored.returncode == 0, f"{demo.DEFAULT_PLOT} would dirty the checkout"
