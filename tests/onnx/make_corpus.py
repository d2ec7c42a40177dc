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
* ``lstm_gru``: a bidirectional LSTM feeding a GRU (ONNX LSTM and GRU nodes);
* ``old_opset11_cnn``: the same kind of CNN written at opset 11 (Clip as ReLU6, LeakyRelu, Pad,
  nearest Upsample), which the importer converts;
* ``transformer_encoder``: ``nn.TransformerEncoderLayer`` from the TorchScript exporter and,
  as ``transformer_encoder_dynamo``, from the dynamo exporter;
* ``bert``, ``gpt2``, ``vit``, ``t5_encoder`` from ``transformers`` with tiny configurations,
  and ``llama_dynamo23``: LLaMA from the dynamo exporter at opset 23 (Attention,
  RMSNormalization nodes). ``hugging_face_zoo()`` lists 29 architectures; the slow test tier
  (``test_onnx_model_zoo.py``) exports and checks them all.

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


class SequenceClassifier(nn.Module):
    """A bidirectional LSTM feeding a GRU, classified from the last step (batch first)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 12, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(24, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h, _ = self.lstm(x)
        h, _ = self.gru(h)
        return self.head(h[:, -1])


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
    _strip_annotations(path)
    print(f"{name}: {os.path.getsize(path)} bytes")


def _strip_annotations(path):
    """Drop what the exporters annotate each node with (source stack traces, names of the
    PyTorch modules): it is most of a small model's file, and importing never reads it."""
    import onnx

    model = onnx.load(path)
    for node in model.graph.node:
        node.doc_string = ""
        del node.metadata_props[:]
    for value in list(model.graph.value_info):
        del value.metadata_props[:]
    onnx.save(model, path)


def randomize_batch_norm(model):
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model


def _tokens():
    return torch.randint(1, 50, (2, 7))


def _images(size=32):
    return torch.randn(2, 3, size, size)


_SMALL = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
_VOCAB = dict(vocab_size=50)


def hugging_face_zoo():
    """name -> () -> (model, its input's keyword, example): tiny Hugging Face architectures."""
    import transformers as hf

    s, v = _SMALL, _VOCAB
    text = {
        "bert": lambda: hf.BertModel(hf.BertConfig(max_position_embeddings=16, **s, **v)),
        "gpt2": lambda: hf.GPT2Model(hf.GPT2Config(n_positions=16, n_embd=16, n_layer=1,
                                                   n_head=2, bos_token_id=0, eos_token_id=0,
                                                   **v)),
        "t5_encoder": lambda: hf.T5EncoderModel(hf.T5Config(d_model=16, d_kv=8, d_ff=32,
                                                            num_layers=1, num_heads=2, **v)),
        "distilbert": lambda: hf.DistilBertModel(hf.DistilBertConfig(
            dim=16, n_layers=1, n_heads=2, hidden_dim=32, max_position_embeddings=16, **v)),
        "roberta": lambda: hf.RobertaModel(hf.RobertaConfig(max_position_embeddings=20,
                                                            pad_token_id=0, **s, **v)),
        "xlm_roberta": lambda: hf.XLMRobertaModel(hf.XLMRobertaConfig(
            max_position_embeddings=20, pad_token_id=0, **s, **v)),
        "albert": lambda: hf.AlbertModel(hf.AlbertConfig(embedding_size=8,
                                                         max_position_embeddings=16, **s, **v)),
        "electra": lambda: hf.ElectraModel(hf.ElectraConfig(embedding_size=8,
                                                            max_position_embeddings=16, **s, **v)),
        "mpnet": lambda: hf.MPNetModel(hf.MPNetConfig(max_position_embeddings=20, **s, **v)),
        "deberta_v2": lambda: hf.DebertaV2Model(hf.DebertaV2Config(max_position_embeddings=16,
                                                                   **s, **v)),
        "llama": lambda: hf.LlamaModel(hf.LlamaConfig(num_key_value_heads=2,
                                                      max_position_embeddings=16, **s, **v)),
        "mistral": lambda: hf.MistralModel(hf.MistralConfig(num_key_value_heads=2,
                                                            max_position_embeddings=16, **s, **v)),
        "qwen2": lambda: hf.Qwen2Model(hf.Qwen2Config(num_key_value_heads=2,
                                                      max_position_embeddings=16, **s, **v)),
        "gpt_neox": lambda: hf.GPTNeoXModel(hf.GPTNeoXConfig(max_position_embeddings=16, **s,
                                                             **v)),
        "phi": lambda: hf.PhiModel(hf.PhiConfig(max_position_embeddings=16, **s, **v)),
        "opt": lambda: hf.OPTModel(hf.OPTConfig(hidden_size=16, num_hidden_layers=1,
                                                num_attention_heads=2, ffn_dim=32,
                                                word_embed_proj_dim=16,
                                                max_position_embeddings=16, **v)),
        "bloom": lambda: hf.BloomModel(hf.BloomConfig(hidden_size=16, n_layer=1, n_head=2, **v)),
        "bart": lambda: hf.BartModel(hf.BartConfig(
            d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
            max_position_embeddings=16, **v)),
        "clip_text": lambda: hf.CLIPTextModel(hf.CLIPTextConfig(max_position_embeddings=16, **s,
                                                                **v)),
    }
    zoo = {name: (lambda build=build: (build(), "input_ids", _tokens()))
           for name, build in text.items()}
    zoo.update({
        "vit": lambda: (hf.ViTModel(hf.ViTConfig(image_size=16, patch_size=4, num_channels=3,
                                                 **s)), "pixel_values", _images(16)),
        "deit": lambda: (hf.DeiTModel(hf.DeiTConfig(image_size=16, patch_size=4, **s)),
                         "pixel_values", _images(16)),
        "beit": lambda: (hf.BeitModel(hf.BeitConfig(image_size=16, patch_size=4, **s)),
                         "pixel_values", _images(16)),
        "convnext": lambda: (hf.ConvNextModel(hf.ConvNextConfig(
            hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, image_size=32)),
            "pixel_values", _images()),
        "resnet_hf": lambda: (hf.ResNetModel(hf.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])), "pixel_values", _images()),
        "swin": lambda: (hf.SwinModel(hf.SwinConfig(
            image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2],
            window_size=4)), "pixel_values", _images()),
        "segformer": lambda: (hf.SegformerForSemanticSegmentation(hf.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
            num_attention_heads=[1, 2], decoder_hidden_size=16, num_labels=3,
            patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])), "pixel_values", _images()),
        "mobilevit": lambda: (hf.MobileViTModel(hf.MobileViTConfig(
            image_size=32, hidden_sizes=[16, 16, 16], neck_hidden_sizes=[8, 8, 8, 8, 8, 8, 16],
            num_attention_heads=2)), "pixel_values", _images()),
        "whisper_encoder": lambda: (hf.WhisperModel(hf.WhisperConfig(
            d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=8,
            max_source_positions=8, pad_token_id=0, bos_token_id=0, eos_token_id=0,
            decoder_start_token_id=0, **v)).encoder, "input_features", torch.randn(2, 8, 16)),
        "wav2vec2": lambda: (hf.Wav2Vec2Model(hf.Wav2Vec2Config(
            conv_dim=[8, 8], conv_stride=[5, 2], conv_kernel=[10, 3],
            num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2, **s)),
            "input_values", torch.randn(2, 400)),
    })
    return zoo


def hugging_face_models():
    """The Hugging Face models shipped in the corpus (the whole zoo runs in the slow tier)."""
    zoo = hugging_face_zoo()
    for name in ("bert", "gpt2", "vit", "t5_encoder"):
        model, argument, example = zoo[name]()
        yield name, _LastHidden(model, argument), (example,), (argument,)


class _LastHidden(nn.Module):
    """A Hugging Face model called with one tensor, returning its main output (the last
    hidden state, or the logits of a head)."""

    def __init__(self, model, argument="input_ids"):
        super().__init__()
        self.model, self.argument = model.eval(), argument
        # Initialisations leave some tensors exactly 0 (DeiT's class tokens and position
        # embeddings): a LayerNorm of a constant row with eps 1e-12 is then infinitely steep.
        # Trained weights are never like that; a little noise makes the models realistic.
        with torch.no_grad():
            for parameter in self.model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.02)

    def forward(self, x):
        out = self.model(**{self.argument: x})
        hidden = getattr(out, "last_hidden_state", None)
        return hidden if hidden is not None else out[0]


def main() -> int:
    torch.manual_seed(0)
    os.makedirs(HERE, exist_ok=True)
    image = torch.randn(2, 3, 16, 16)
    export(randomize_batch_norm(MobileNetV3Block()), (image,), "mobilenetv3_block")
    export(randomize_batch_norm(resnet_basic()), (image,), "resnet_basic", opset=13)
    export(randomize_batch_norm(Segmentation()), (image,), "segmentation")
    export(OldCnn(), (image,), "old_opset11_cnn", opset=11)
    export(SequenceClassifier(), (torch.randn(2, 7, 8),), "lstm_gru")
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
    if models:
        # Opset 23: the dynamo exporter writes whole Attention and RMSNormalization nodes.
        model, argument, example = hugging_face_zoo()["llama"]()
        export(_LastHidden(model, argument), (example,), "llama_dynamo23", opset=23,
               dynamo=True, names=(argument,))
    return 0


if __name__ == "__main__":
    sys.exit(main())
