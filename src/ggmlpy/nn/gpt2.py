"""The gpt2 family on the batched ag_* ops, as llama.cpp computes architecture `gpt2`: learned
position embeddings, LayerNorm with a bias, one fused query-key-value projection, causal
(grouped-query) attention without rotation, a GELU feed-forward, biased projections.
Activations are [d_model, T, B]. Sub-layers carry llama.cpp's tensor names (attn_norm, attn_qkv,
attn_output, ffn_norm, ffn_up, ffn_down, token_embd, position_embd, output_norm, output).

The feed-forward's GELU is ggml_gelu, the tanh form, which llama.cpp's gpt2 graph applies: on
the CPU ggml computes it by rounding the input to f16 and reading a table of f16 results, so its
values carry f16's precision (a relative 2^-11); ggmlpy computes the same values, and its
gradient is the tanh form's derivative (autograd.rules: gelu_tanh).
"""
from __future__ import annotations

import math

from .. import random as grandom
from ..autograd import ops
from ..autograd.engine import apply
from ..errors import GGMLError
from ..tensor import AGTensor
from .layers import ag_embedding, ag_layer_norm_layer
from .llama import GroupedAttention, LlamaProjection, _positive_int
from .module import Module


class ag_gpt2_block(GroupedAttention):
    """One gpt2 layer: x + attn_output(attention of attn_qkv(attn_norm x)), then
    + ffn_down(gelu(ffn_up(ffn_norm x))); LayerNorms with weight and bias, every projection
    biased. attn_qkv [d_model + 2 * head_dim * n_kv_heads, d_model] stacks the query, key and
    value projections, in that order."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, d_ff: int | None = None,
                 eps: float = 1e-5, n_layers: int = 1):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        d_ff = 4 * d_model if d_ff is None else d_ff
        _positive_int("ag_gpt2_block", d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=d_ff,
                      n_layers=n_layers)
        if d_model % n_heads or n_heads % n_kv_heads:
            raise GGMLError(f"ag_gpt2_block: n_heads {n_heads} must divide d_model {d_model}, and n_kv_heads "
                            f"{n_kv_heads} must divide n_heads")
        self.d_model, self.n_heads, self.n_kv_heads = int(d_model), int(n_heads), int(n_kv_heads)
        self.head_dim = self.d_model // self.n_heads
        self.rope_mode, self.rope_base = None, 0.0  # positions are learned embeddings: no rotation
        kv = self.head_dim * self.n_kv_heads
        residual = 0.02 / math.sqrt(2 * n_layers)  # GPT-2's scaled init of the residual projections
        self.attn_norm = ag_layer_norm_layer(d_model, eps)
        self.attn_qkv = LlamaProjection(d_model, d_model + 2 * kv, bias=True)
        self.attn_output = LlamaProjection(d_model, d_model, residual, bias=True)
        self.ffn_norm = ag_layer_norm_layer(d_model, eps)
        self.ffn_up = LlamaProjection(d_model, d_ff, bias=True)
        self.ffn_down = LlamaProjection(d_ff, d_model, residual, bias=True)

    def attention(self, h: AGTensor) -> AGTensor:
        """Causal self-attention of h [d_model, T(, B)], before attn_output."""
        qkv = self.attn_qkv(h)
        d, kv = self.d_model, self.head_dim * self.n_kv_heads
        rest = (None,) * (qkv.ndim - 2)
        q, k, v = (ops.ag_slice(qkv, slice(lo, hi), *rest) for lo, hi in ((0, d), (d, d + kv), (d + kv, d + 2 * kv)))
        return self.attend(q, k, v)

    def forward(self, x: AGTensor) -> AGTensor:
        """The layer applied to every sequence of x [d_model, T] or [d_model, T, B]."""
        x = ops.ag_add(x, self.attn_output(self.attention(self.attn_norm(x))))
        return ops.ag_add(x, self.ffn_down(apply("gelu_tanh", self.ffn_up(self.ffn_norm(x)))))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}"


class ag_gpt2(Module):
    """A GPT-2 language model as llama.cpp's architecture `gpt2` computes it: token embedding
    (token_embd) plus learned positions (position_embd, `context` of them), `n_layers`
    ag_gpt2_blocks, a final LayerNorm (output_norm) and the output head (output), or the token
    embedding's transpose with `tied=True`. forward(idx [T, B] or [T], 0-based token ids, T at most
    `context`) gives logits [vocab, T, B]; loss(idx, targets) the mean cross-entropy of the next
    tokens."""

    def __init__(self, vocab_size: int, d_model: int = 128, n_heads: int = 4, n_kv_heads: int | None = None,
                 n_layers: int = 2, d_ff: int | None = None, context: int = 1024, eps: float = 1e-5,
                 tied: bool = True):
        super().__init__()
        _positive_int("ag_gpt2", vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, context=context)
        self.context, self.tied = int(context), bool(tied)
        self.token_embd = ag_embedding(vocab_size, d_model)
        self.token_embd.weight.data = grandom.generator().normal(0.0, 0.02, size=(d_model, vocab_size))
        self.position_embd = ag_embedding(context, d_model)
        self.position_embd.weight.data = grandom.generator().normal(0.0, 0.01, size=(d_model, context))
        self.blocks = [ag_gpt2_block(d_model, n_heads, n_kv_heads, d_ff, eps, n_layers) for _ in range(n_layers)]
        self.output_norm = ag_layer_norm_layer(d_model, eps)
        self.output = None if tied else LlamaProjection(d_model, vocab_size)

    def forward(self, idx) -> AGTensor:
        """Logits [vocab, T, B] for token ids idx [T, B] (or [T])."""
        x = self.token_embd(idx, batched=True)
        t = x.shape[1]
        if t > self.context:
            raise GGMLError(f"ag_gpt2: {t} tokens exceed the context of {self.context} learned positions")
        pos = self.position_embd.weight
        x = ops.ag_add(x, pos if t == self.context else ops.ag_slice(pos, None, slice(0, t)))
        for block in self.blocks:
            x = block(x)
        h = self.output_norm(x)
        return self.token_embd.unembed(h) if self.output is None else self.output(h)

    def loss(self, idx, targets) -> AGTensor:
        """Mean cross-entropy of the logits for idx against targets (next tokens, same shape)."""
        return ops.ag_softmax_cross_entropy_loss(self(idx), targets)


__all__ = ["ag_gpt2", "ag_gpt2_block"]
