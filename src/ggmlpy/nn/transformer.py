"""Transformer building blocks on the batched ag_* ops: activations are [d_model, T, B]."""
from __future__ import annotations

import math

import numpy as np

from .. import random as grandom
from ..autograd import ops
from ..autograd.tape import no_grad
from ..errors import GGMLError
from ..tensor import AGTensor, ag_param
from .layers import ag_dropout, ag_embedding, ag_layer_norm_layer, ag_linear, ag_multihead_attention
from .module import Module


class ag_transformer_block(Module):
    """A pre-LayerNorm transformer block (GPT-2's): x + attn(ln1(x)), then + mlp(ln2(x)), the MLP
    d_model -> mlp_ratio * d_model (activation) -> d_model. x [d_model, T] or [d_model, T, B]."""

    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int = 4, activation: str = "gelu",
                 causal: bool = True, dropout: float = 0.0, qkv_bias: bool = True):
        super().__init__()
        self.ln1 = ag_layer_norm_layer(d_model)
        self.attn = ag_multihead_attention(d_model, n_heads, causal=causal, qkv_bias=qkv_bias)
        self.ln2 = ag_layer_norm_layer(d_model)
        self.fc = ag_linear(d_model, mlp_ratio * d_model, activation=activation)
        self.proj = ag_linear(mlp_ratio * d_model, d_model)
        self.drop = ag_dropout(dropout) if dropout else None

    def forward(self, x: AGTensor, key_padding_mask=None) -> AGTensor:
        """The block applied to every sequence of the batch."""
        a = self.attn(self.ln1(x), key_padding_mask=key_padding_mask)
        x = ops.ag_add(x, self.drop(a) if self.drop else a)
        m = self.proj(self.fc(self.ln2(x)))
        return ops.ag_add(x, self.drop(m) if self.drop else m)


class ag_gpt(Module):
    """A small GPT: token and position embeddings, `n_layers` pre-LN blocks, a final LayerNorm and
    the output head tied to the token embedding. forward(idx [T, B] (0-based, i32 or integers))
    gives logits [vocab, T, B]; loss(idx, targets) the mean cross-entropy of next tokens."""

    def __init__(self, vocab_size: int, d_model: int = 128, n_heads: int = 4, n_layers: int = 2,
                 context: int = 64, mlp_ratio: int = 4, dropout: float = 0.0):
        super().__init__()
        if context < 1:
            raise GGMLError(f"ag_gpt: context must be positive, got {context}")
        self.context = int(context)
        self.tok = ag_embedding(vocab_size, d_model)
        self.tok.weight.data = grandom.generator().normal(0.0, 0.02, size=(d_model, vocab_size))
        self.pos = ag_param(grandom.generator().normal(0.0, 0.02, size=(d_model, context)))
        self.blocks = [ag_transformer_block(d_model, n_heads, mlp_ratio, dropout=dropout) for _ in range(n_layers)]
        self.ln_f = ag_layer_norm_layer(d_model)
        # GPT-2's scaled init of the residual projections keeps the residual stream's variance
        std = 0.02 / math.sqrt(2 * n_layers)
        for b in self.blocks:
            for w in (b.attn.W_o, b.proj.W):
                w.data = grandom.generator().normal(0.0, std, size=w.shape)

    def forward(self, idx) -> AGTensor:
        """Logits [vocab, T, B] for token indices idx [T, B] (or [T])."""
        x = self.tok(idx, batched=True)
        t = x.shape[1]
        if t > self.context:
            raise GGMLError(f"ag_gpt: {t} tokens exceed the context of {self.context}")
        x = ops.ag_add(x, self.pos if t == self.context else ops.ag_slice(self.pos, None, slice(0, t)))
        for block in self.blocks:
            x = block(x)
        return ops.ag_matmul(self.tok.weight, self.ln_f(x), transpose_a=True)

    def loss(self, idx, targets) -> AGTensor:
        """Mean cross-entropy of the logits for idx against targets (next tokens, same shape)."""
        return ops.ag_softmax_cross_entropy_loss(self(idx), targets)

    def generate(self, idx, n_new: int, greedy: bool = True, temperature: float = 1.0) -> np.ndarray:
        """idx [T] extended by n_new tokens, each from the logits of the last context window."""
        seq = [int(i) for i in np.asarray(idx).ravel()]
        rng = grandom.generator()
        with no_grad():
            for _ in range(int(n_new)):
                window = np.array(seq[-self.context:]).reshape(-1, 1)
                logits = self(window).numpy()[:, -1].astype(np.float64)
                if greedy:
                    seq.append(int(np.argmax(logits)))
                else:
                    p = np.exp((logits - logits.max()) / temperature)
                    seq.append(int(rng.choice(p.size, p=p / p.sum())))
        return np.array(seq)
