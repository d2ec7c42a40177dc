"""Every Python snippet of the README runs as written, and what the README says they print is
what they print."""

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def run(code: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
    return out.getvalue(), err.getvalue()


def test_the_readme_has_snippets():
    assert len(SNIPPETS) >= 3


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs_as_written(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(SNIPPETS[index])


def test_the_fit_snippet_resumes_as_the_readme_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    snippet = next(s for s in SNIPPETS if "md.fit(" in s)
    first_out, _ = run(snippet)
    assert "Total params" in first_out
    second_out, second_err = run(snippet)
    claimed = re.search(r"`(minidl: resumed from .*?)`", README.read_text(), flags=re.S).group(1)
    assert " ".join(claimed.split()) in " ".join(second_err.split())
    assert second_out.splitlines()[-3:] == first_out.splitlines()[-3:]


def test_the_manual_loop_ends_with_the_checkpoint_name_the_readme_gives(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    snippet = next(s for s in SNIPPETS if "md.CheckpointManager(" in s)
    out, _ = run(snippet)
    claimed = re.search(r"the loop above ends with `(.*?)`", README.read_text()).group(1)
    assert out.strip().endswith("/" + claimed)
