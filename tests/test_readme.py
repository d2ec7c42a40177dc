"""Every Python snippet of the README runs as written and does what the README says it does:
each has a check below of its result, and a snippet without one fails the test."""

import contextlib
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest

import minidl as md

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def run(code: str) -> tuple[str, str, dict]:
    """(stdout, stderr, the snippet's variables) of running ``code``."""
    out, err, namespace = io.StringIO(), io.StringIO(), {"__name__": "__readme__"}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        exec(compile(code, str(README), "exec"), namespace)
    return out.getvalue(), err.getvalue(), namespace


def check_first_model(snippet, out, namespace):
    """One Adam step: every weight with a gradient moved by the learning rate against it."""
    untrained = run(snippet[:snippet.index("loss = ")])[2]["model"]   # the same seed
    assert abs(namespace["loss"].item() - math.log(10)) < 0.5         # untrained: near chance
    for before, after in zip(untrained.parameters(), namespace["model"].parameters()):
        grad, step = after.grad.numpy(), after.numpy() - before.numpy()
        assert grad.shape == after.shape
        # Adam's first step is lr · g / (|g| + eps): the sign of -g, lr long where |g| >> eps.
        clear = np.abs(grad) > 1e-5
        np.testing.assert_allclose(step[clear], -1e-3 * np.sign(grad[clear]), rtol=1e-2)
        assert not step[grad == 0].any()
    assert any((p.grad.numpy() != 0).any() for p in namespace["model"].parameters())


def check_fit(snippet, out, namespace):
    """The digits are learnt, and the last line printed is the newest checkpoint's file."""
    assert namespace["history"].history["val_accuracy"][-1] > 0.8
    assert (namespace["predictions"] == namespace["y_test"]).mean() > 0.8
    assert Path(out.splitlines()[-1]).is_file()


def check_manual_loop(snippet, out, namespace):
    """300 steps trained, StepLR halved the rate three times, and the newest file printed is
    the one the README names."""
    assert namespace["loss"].item() < 1.0
    assert namespace["opt"].param_groups[0]["lr"] == pytest.approx(1e-2 * 0.5 ** 3)
    assert out.strip() == namespace["manager"].latest and Path(out.strip()).is_file()
    claimed = re.search(r"the loop above ends with `(.*?)`", README.read_text()).group(1)
    assert out.strip().endswith("/" + claimed)


def check_data_parallel(snippet, out, namespace):
    """As a group of one it trains 40 steps, and the same script run again resumes at step 40."""
    assert (namespace["rank"], namespace["world"]) == (0, 1)
    assert namespace["start"] == 0 and namespace["manager"].latest is not None
    assert run(snippet)[2]["start"] == 40


def check_onnx(snippet, out, namespace):
    """The imported model computes what the exported one does, at another batch size."""
    x = md.tensor(np.random.default_rng(0).random((3, 1, 8, 8), np.float32))
    with md.no_grad():
        np.testing.assert_allclose(namespace["imported"](x).numpy(),
                                   namespace["model"](x).numpy(), atol=1e-5)


def check_compile(snippet, out, namespace):
    """The plan is printed as the README says: its steps, and BatchNorm folded away."""
    assert out.strip() == f"{len(namespace['predict'].steps)} steps, no BatchNorm: True"
    assert len(namespace["predict"].steps) > 0


def check_gradients_and_hooks(snippet, out, namespace):
    """The penalty is WGAN-GP's, computed from a gradient that is itself differentiated; the
    forward hook saw one call; the tensor hook halved the gradient that retain_grad kept."""
    critic, x, g = namespace["critic"], namespace["x"], namespace["g"]
    eps = 1e-3  # g against central differences of the critic's output in x
    with md.no_grad():
        for j in range(2):
            step = np.zeros((8, 2), np.float32)
            step[:, j] = eps
            ahead = critic(md.tensor(x.numpy() + step)).numpy()[:, 0]
            behind = critic(md.tensor(x.numpy() - step)).numpy()[:, 0]
            np.testing.assert_allclose(g.numpy()[:, j], (ahead - behind) / (2 * eps), atol=1e-3)
    norms = np.sqrt((g.numpy() ** 2).sum(axis=1))
    assert namespace["penalty"].item() == pytest.approx(((norms - 1) ** 2).mean(), rel=1e-5)
    assert out.strip() == "1 (8, 2)" and len(namespace["features"]) == 1
    hidden = md.tensor(namespace["hidden"].numpy(), requires_grad=True)
    (plain,) = md.autograd.grad(critic(hidden).sum(), hidden)
    np.testing.assert_allclose(namespace["hidden"].grad.numpy(), 0.5 * plain.numpy(), rtol=1e-6)


CHECKS = {  # a phrase of the snippet -> the check of what it does
    "images, labels = np.zeros((4, 1, 8, 8)": check_first_model,
    "md.fit(": check_fit,
    "md.CheckpointManager(ckpt,": check_manual_loop,
    "nn.parallel.DistributedDataParallel(": check_data_parallel,
    "md.export_onnx(": check_onnx,
    "md.compile(": check_compile,
    "md.autograd.grad(critic(x).sum()": check_gradients_and_hooks,
}


def test_the_readme_has_snippets():
    assert len(SNIPPETS) >= 3


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_does_what_the_readme_says(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    snippet = SNIPPETS[index]
    checks = [check for phrase, check in CHECKS.items() if phrase in snippet]
    assert len(checks) == 1, "each README snippet needs exactly one check in CHECKS"
    out, _, namespace = run(snippet)
    checks[0](snippet, out, namespace)


def test_the_fit_snippet_resumes_as_the_readme_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    snippet = next(s for s in SNIPPETS if "md.fit(" in s)
    first_out, _, _ = run(snippet)
    assert "Total params" in first_out
    second_out, second_err, _ = run(snippet)
    claimed = re.search(r"`(minidl: resumed from .*?)`", README.read_text(), flags=re.S).group(1)
    assert " ".join(claimed.split()) in " ".join(second_err.split())
    assert second_out.splitlines()[-3:] == first_out.splitlines()[-3:]

