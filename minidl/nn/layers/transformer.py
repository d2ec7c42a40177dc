"""TransformerEncoderLayer and TransformerDecoderLayer, as PyTorch's (Vaswani et al., 2017).

An encoder layer is self-attention then a two-layer feed-forward network, each wrapped in a
residual connection and a layer norm: ``x = norm(x + block(x))`` (post-norm, the default), or
``x = x + block(norm(x))`` with ``norm_first=True`` (pre-norm, which trains more stably when
deep). A decoder layer adds attention over the encoder's output (``memory``) between the two.
Positional information is the user's to add, as in PyTorch. ``TransformerEncoder`` and
``TransformerDecoder`` stack independent copies of a layer. Child names (``self_attn``,
``linear1``, ``norm1``, ...) are PyTorch's, so a torch state_dict loads unchanged.
"""

from __future__ import annotations

import copy

import numpy as np

from ...ops.elementwise import gelu, relu
from ..module import Module
from ..registry import register_module
from .attention import MultiheadAttention
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .normalization import LayerNorm

_ACTIVATIONS = {"relu": relu, "gelu": gelu}


def _activation_name(activation) -> str:
    """``activation`` as its name: "relu"/"gelu", or minidl's functions of those names."""
    for name, function in _ACTIVATIONS.items():
        if activation == name or activation is function:
            return name
    raise ValueError(f"activation must be 'relu' or 'gelu' (a name a model file can hold), got "
                     f"{activation!r}")


class _TransformerLayer(Module):
    """What both layers share: the feed-forward block, the activation and the settings."""

    def _feed_forward_parts(self, d_model, dim_feedforward, dropout, activation, eps,
                            batch_first, norm_first, bias, dtype):
        self.d_model, self.dim_feedforward = int(d_model), int(dim_feedforward)
        self.dropout_p, self.layer_norm_eps = float(dropout), float(eps)
        self.batch_first, self.norm_first = bool(batch_first), bool(norm_first)
        self.activation_name = _activation_name(activation)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)

    def _ff_block(self, x, dropout):
        activation = _ACTIVATIONS[self.activation_name]
        return dropout(self.linear2(self.dropout(activation(self.linear1(x)))))

    def _config(self):
        return {"d_model": self.d_model, "nhead": self.self_attn.num_heads,
                "dim_feedforward": self.dim_feedforward, "dropout": self.dropout_p,
                "activation": self.activation_name, "layer_norm_eps": self.layer_norm_eps,
                "batch_first": self.batch_first, "norm_first": self.norm_first,
                "bias": self.linear1.bias is not None,
                "dtype": str(self.linear1.weight.dtype)}

    def get_config(self):
        return self._config()


@register_module
class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention and feed-forward blocks, each with a residual connection and layer norm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 dtype=np.float32):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, dtype=dtype)
        self._feed_forward_parts(d_model, dim_feedforward, dropout, activation, layer_norm_eps,
                                 batch_first, norm_first, bias, dtype)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x, self.dropout2))


@register_module
class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention over the target, attention over ``memory`` (the encoder's output), and a
    feed-forward block, each with a residual connection and layer norm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 dtype=np.float32):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, dtype=dtype)
        self._feed_forward_parts(d_model, dim_feedforward, dropout, activation, layer_norm_eps,
                                 batch_first, norm_first, bias, dtype)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _mha_block(self, x, memory, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, memory, memory, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, need_weights=False,
                                is_causal=is_causal)[0]
        return self.dropout2(x)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                           memory_is_causal))
        return self.norm3(x + self._ff_block(x, self.dropout3))


class _LayerStack(Module):
    """``num_layers`` independent copies of one layer (PyTorch's ``layers.0``, ``layers.1``, …)
    and an optional final ``norm``."""

    def __init__(self, layer, num_layers: int, norm=None):
        super().__init__()
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"{type(self).__name__}: num_layers must be an int >= 1, got "
                             f"{num_layers!r}")
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def get_config(self):
        return {"num_layers": self.num_layers}

    @classmethod
    def from_config(cls, config, children):
        # The first copy stands for the layer the stack was built from; the file's weights are
        # loaded into every copy afterwards.
        built = dict(children)
        return cls(built["layers"][0], config["num_layers"], norm=built.get("norm"))


@register_module
class TransformerEncoder(_LayerStack):
    """A stack of ``num_layers`` copies of ``encoder_layer``, then ``norm`` if given."""

    def __init__(self, encoder_layer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__(encoder_layer, num_layers, norm)

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal: bool | None = None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


@register_module
class TransformerDecoder(_LayerStack):
    """A stack of ``num_layers`` copies of ``decoder_layer``, then ``norm`` if given."""

    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)
