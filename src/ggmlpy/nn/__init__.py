"""Layers for small models, with ggmlR's names."""
from .layers import (ag_activation, ag_batch_norm, ag_conv2d_layer, ag_dropout, ag_embedding, ag_flatten_layer,
                     ag_gelu_layer, ag_layer_norm_layer, ag_linear, ag_max_pool2d_layer, ag_multihead_attention,
                     ag_sequential, ag_silu_layer)
from .module import Module, ag_eval, ag_train
from .gpt2 import ag_gpt2, ag_gpt2_block
from .llama import ag_llama, ag_llama_block, ag_rms_norm_layer
from .transformer import ag_gpt, ag_transformer_block

__all__ = ["Module", "ag_activation", "ag_batch_norm", "ag_conv2d_layer", "ag_dropout", "ag_embedding", "ag_eval",
           "ag_flatten_layer", "ag_gelu_layer", "ag_layer_norm_layer", "ag_linear", "ag_max_pool2d_layer",
           "ag_multihead_attention", "ag_sequential", "ag_silu_layer", "ag_train", "ag_gpt", "ag_transformer_block",
           "ag_llama", "ag_llama_block", "ag_rms_norm_layer", "ag_gpt2", "ag_gpt2_block"]
