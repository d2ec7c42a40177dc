"""``nn.Transformer``: the encoder-decoder model of Vaswani et al. (2017), as PyTorch's.

It is nothing but the existing stacks: ``encoder`` (a TransformerEncoder of
``num_encoder_layers`` TransformerEncoderLayers with a final LayerNorm) reads the source into
``memory``, and ``decoder`` (a TransformerDecoder of ``num_decoder_layers`` decoder layers with
a final LayerNorm) reads the target while attending to it. The child names are PyTorch's, so a
torch state_dict loads unchanged. Embeddings, positional encodings and the output projection
are the user's to add, as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from ..module import Module
from ..registry import register_module
from .normalization import LayerNorm
from .transformer import (TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                          TransformerEncoderLayer, _activation_name)


@register_module
class Transformer(Module):
    """The encoder-decoder Transformer: ``forward(src, tgt, ...)`` -> the decoder's output."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", custom_encoder=None, custom_decoder=None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, dtype=np.float32):
        super().__init__()
        if custom_encoder is not None or custom_decoder is not None:
            raise ValueError("Transformer: custom_encoder/custom_decoder are not supported (a "
                             "saved model must rebuild from its settings); build the model from "
                             "TransformerEncoder and TransformerDecoder instead")
        layer_args = dict(d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward,
                          dropout=dropout, activation=activation, layer_norm_eps=layer_norm_eps,
                          batch_first=batch_first, norm_first=norm_first, bias=bias,
                          dtype=dtype)
        self.encoder = TransformerEncoder(
            TransformerEncoderLayer(**layer_args), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self.decoder = TransformerDecoder(
            TransformerDecoderLayer(**layer_args), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self.config = dict(layer_args, activation=_activation_name(activation),
                           num_encoder_layers=num_encoder_layers,
                           num_decoder_layers=num_decoder_layers, dtype=str(np.dtype(dtype)))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False):
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise ValueError(f"Transformer: src and tgt must have the same batch size, got "
                             f"shapes {src.shape} and {tgt.shape}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(f"Transformer: the last axis of src and tgt must be d_model="
                             f"{self.d_model}, got shapes {src.shape} and {tgt.shape}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, dtype=np.float32) -> Tensor:
        """(sz, sz) additive mask: 0 on and below the diagonal, -inf above, so position i
        attends to positions up to i only."""
        return Tensor(np.triu(np.full((sz, sz), -np.inf, dtype=dtype), k=1))

    def get_config(self):
        return dict(self.config)
