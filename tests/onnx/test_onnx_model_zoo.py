"""The slow tier: 29 Hugging Face architectures (tiny random configurations) exported by
PyTorch's TorchScript exporter at opset 17, and five of them by the dynamo exporter at opsets
18 and 23, each imported, compared with onnxruntime at two batch sizes and trained one SGD
step. Needs torch, transformers and onnxscript; run with ``pytest -m slow``."""

import pytest

from test_onnx_corpus import check_matches_onnxruntime, check_sgd_step

pytestmark = pytest.mark.slow

DYNAMO = ("bert", "llama", "deit", "gpt_neox", "convnext")


def test_hugging_face_zoo_imports_matches_and_trains(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    import torch

    import make_corpus

    monkeypatch.setattr(make_corpus, "HERE", str(tmp_path))
    torch.manual_seed(0)
    zoo = make_corpus.hugging_face_zoo()
    runs = [(name, 17, False) for name in zoo] + \
        [(name, opset, True) for name in DYNAMO for opset in (18, 23)]
    failures = {}
    for name, opset, dynamo in runs:
        model, argument, example = zoo[name]()
        label = f"{name}_{'dynamo' if dynamo else 'torchscript'}{opset}"
        make_corpus.export(make_corpus._LastHidden(model, argument), (example,), label,
                           opset=opset, dynamo=dynamo, names=(argument,))
        path = tmp_path / f"{label}.onnx"
        try:
            check_matches_onnxruntime(str(path))
            check_sgd_step(str(path))
        except Exception as error:  # noqa: BLE001 - every architecture is reported
            failures[label] = f"{type(error).__name__}: {str(error)[:300]}"
    assert not failures, failures
    assert len(runs) == len(zoo) + 2 * len(DYNAMO) == 39
