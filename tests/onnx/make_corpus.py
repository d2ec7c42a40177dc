"""Write the real-model corpus: small random-weight PyTorch models exported to ONNX.

Run by hand (it needs torch, and transformers for the Hugging Face models); the files it
writes under ``corpus/`` are what ``test_onnx_corpus.py`` imports. Each model is a shrunken
version of an architecture people export — the layers and the exporter's way of writing them
are what matter, not the size:

* ``mobilenetv3_block``: inverted residual with hardswish, depthwise conv, squeeze-excite
  (adaptive pooling, hardsigmoid gate), classifier with dropout;
* ``resnet_basic``: conv-bn-relu stem, max pool, two basic blocks, global pool, linear;
* ``segmentation``: a small U-Net (max pool down, ConvTranspose and bilinear Resize up, skip
  concatenation);
* ``old_opset11_cnn``: the same kind of CNN written at opset 11 (Clip as ReLU6, LeakyRelu, Pad,
  nearest Upsample), which the importer converts;
* ``transformer_encoder``: ``nn.TransformerEncoderLayer`` from the TorchScript exporter and,
  as ``transformer_encoder_dynamo``, from the dynamo exporter;
* ``bert``, ``gpt2``, ``vit``, ``t5_encoder`` from ``transformers`` with tiny configurations.

    python tests/onnx/make_corpus.py
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
from torch import nn

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


class MobileNetV3Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        self.expand = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32),
                                    nn.Hardswish())
        self.depthwise = nn.Sequential(nn.Conv2d(32, 32, 5, 1, 2, groups=32, bias=False),
                                       nn.BatchNorm2d(32), nn.Hardswish())
        self.squeeze = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(32, 8, 1), nn.ReLU(),
                                     nn.Conv2d(8, 32, 1), nn.Hardsigmoid())
        self.project = nn.Sequential(nn.Conv2d(32, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 32),
                                  nn.Hardswish(), nn.Dropout(0.2), nn.Linear(32, 10))

    def forward(self, x):
        x = self.stem(x)
        h = self.depthwise(self.expand(x))
        h = h * self.squeeze(h)
        return self.head(x + self.project(h))


class BasicBlock(nn.Module):
    def __init__(self, channels, stride):
        super().__init__()
        out = channels * stride
        self.body = nn.Sequential(nn.Conv2d(channels, out, 3, stride, 1, bias=False),
                                  nn.BatchNorm2d(out), nn.ReLU(),
                                  nn.Conv2d(out, out, 3, 1, 1, bias=False), nn.BatchNorm2d(out))
        self.skip = nn.Identity() if stride == 1 else nn.Sequential(
            nn.Conv2d(channels, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet_basic():
    return nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1), BasicBlock(8, 1), BasicBlock(8, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


class Segmentation(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU())
        self.down2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, 1, 1), nn.ReLU())
        self.bottom = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, 1, 1), nn.ReLU())
        self.up2 = nn.ConvTranspose2d(16, 16, 2, 2)
        self.merge2 = nn.Sequential(nn.Conv2d(32, 8, 3, 1, 1), nn.ReLU())
        self.merge1 = nn.Sequential(nn.Conv2d(16, 8, 3, 1, 1), nn.ReLU())
        self.classes = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(d1)
        b = self.bottom(d2)
        u2 = self.merge2(torch.cat([self.up2(b), d2], dim=1))
        u1 = nn.functional.interpolate(u2, scale_factor=2.0, mode="bilinear",
                                       align_corners=False)
        return self.classes(self.merge1(torch.cat([u1, d1], dim=1)))


class OldCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 2, 1)
        self.conv2 = nn.Conv2d(8, 8, 3)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        h = nn.functional.relu6(self.conv1(x))
        h = nn.functional.leaky_relu(self.conv2(nn.functional.pad(h, (1, 1, 1, 1))), 0.1)
        return self.out(nn.functional.interpolate(h, scale_factor=2.0, mode="nearest"))


class Encoder(nn.Module):
    """nn.TransformerEncoderLayer called with ``is_causal`` spelled out: the TorchScript tracer
    otherwise passes the flag on as a tensor, which the attention kernel refuses."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)

    def forward(self, x):
        return self.layer(x, is_causal=False)


def export(model, example, name, opset=17, dynamo=False, names=("x",)):
    model.eval()
    path = os.path.join(HERE, f"{name}.onnx")
    axes = {n: {0: "batch"} for n in list(names) + ["y"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            batch = torch.export.Dim("batch", min=1, max=64)
            torch.onnx.export(model, example, path, dynamo=True, input_names=list(names),
                              output_names=["y"], opset_version=opset,
                              dynamic_shapes=({0: batch},), external_data=False)
        else:
            torch.onnx.export(model, example, path, dynamo=False, input_names=list(names),
                              output_names=["y"], opset_version=opset, dynamic_axes=axes)
    print(f"{name}: {os.path.getsize(path)} bytes")


def randomize_batch_norm(model):
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model


def hugging_face_models():
    import transformers as hf

    tokens = torch.randint(0, 50, (2, 7))
    small = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32)
    bert = hf.BertModel(hf.BertConfig(vocab_size=50, max_position_embeddings=16, **small))
    yield "bert", _LastHidden(bert), (tokens,), ("input_ids",)
    gpt2 = hf.GPT2Model(hf.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1,
                                      n_head=2, bos_token_id=0, eos_token_id=0))
    yield "gpt2", _LastHidden(gpt2), (tokens,), ("input_ids",)
    vit = hf.ViTModel(hf.ViTConfig(image_size=16, patch_size=4, num_channels=3, **small))
    yield "vit", _LastHidden(vit, "pixel_values"), (torch.randn(2, 3, 16, 16),), \
        ("pixel_values",)
    t5 = hf.T5EncoderModel(hf.T5Config(vocab_size=50, d_model=16, d_kv=8, d_ff=32,
                                       num_layers=1, num_heads=2))
    yield "t5_encoder", _LastHidden(t5), (tokens,), ("input_ids",)


class _LastHidden(nn.Module):
    """A Hugging Face model called with one tensor, returning its last hidden state."""

    def __init__(self, model, argument="input_ids"):
        super().__init__()
        self.model, self.argument = model, argument

    def forward(self, x):
        return self.model(**{self.argument: x}).last_hidden_state


def main() -> int:
    torch.manual_seed(0)
    os.makedirs(HERE, exist_ok=True)
    image = torch.randn(2, 3, 16, 16)
    export(randomize_batch_norm(MobileNetV3Block()), (image,), "mobilenetv3_block")
    export(randomize_batch_norm(resnet_basic()), (image,), "resnet_basic", opset=13)
    export(randomize_batch_norm(Segmentation()), (image,), "segmentation")
    export(OldCnn(), (image,), "old_opset11_cnn", opset=11)
    encoder = Encoder()
    sequence = torch.randn(2, 7, 16)
    export(encoder, (sequence,), "transformer_encoder")
    try:
        export(encoder, (sequence,), "transformer_encoder_dynamo", opset=18, dynamo=True)
    except Exception as error:  # noqa: BLE001 - reported, the rest of the corpus still written
        print(f"transformer_encoder_dynamo: the dynamo exporter failed: {error}")
    try:
        models = list(hugging_face_models())
    except ImportError:
        print("transformers is not installed: no Hugging Face models")
        models = []
    for name, model, example, names in models:
        try:
            export(model, example, name, names=names)
        except Exception as error:  # noqa: BLE001
            print(f"{name}: export failed: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
