"""The llama family on the batched ag_* ops, as llama.cpp computes architecture `llama`: RMSNorm,
rotary position embedding, grouped-query causal attention, a SwiGLU feed-forward, no biases.
Activations are [d_model, T, B]. Sub-layers carry llama.cpp's tensor names (attn_q, attn_k,
attn_v, attn_output, ffn_gate, ffn_up, ffn_down, attn_norm, ffn_norm, output_norm, output), so
a GGUF file's tensors and these layers correspond one to one."""
from __future__ import annotations

import math

import numpy as np

from .. import random as grandom
from ..autograd import ops
from ..autograd.engine import apply
from ..errors import GGMLError
from ..tensor import AGTensor, ag_param
from .layers import ag_embedding
from .module import Module


def _normal(shape, std: float) -> np.ndarray:
    return grandom.generator().normal(0.0, std, size=shape)


def _positive_int(what: str, **values) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise GGMLError(f"{what}: {name} must be a positive integer, got {v!r}")


class ag_rms_norm_layer(Module):
    """RMSNorm: x / sqrt(mean(x^2) + eps) per column, times a learned weight [num_features, 1] (ones)."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        _positive_int("ag_rms_norm_layer", num_features=num_features)
        self.eps = float(eps)
        self.weight = ag_param(np.ones((num_features, 1)))

    def forward(self, x: AGTensor) -> AGTensor:
        """The normalised columns of x, scaled by the weight."""
        return ops.ag_rms_norm(x, self.eps, self.weight)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class LlamaProjection(Module):
    """A projection W %*% x, W [out, in], plus a bias b [out, 1] (zeros) with `bias=True`
    (llama's projections have none, gpt2's have one)."""

    def __init__(self, in_features: int, out_features: int, std: float = 0.02, bias: bool = False):
        super().__init__()
        self.W = ag_param(_normal((out_features, in_features), std))
        self.b = ag_param(np.zeros((out_features, 1))) if bias else None

    def forward(self, x: AGTensor) -> AGTensor:
        """W %*% x (+ b) for x [in, T] or [in, T, B]."""
        y = ops.ag_matmul(self.W, x)
        return y if self.b is None else ops.ag_add(y, self.b)

    @property
    def out_features(self) -> int:
        return self.W.shape[0]

    def extra_repr(self) -> str:
        return f"{self.W.shape[1]}, {self.W.shape[0]}"


class GroupedAttention(Module):
    """Causal grouped-query self-attention over projections already made, shared by the llama
    and gpt2 layers: `n_kv_heads` key/value heads (dividing n_heads) serve consecutive groups of
    query heads, as llama.cpp groups them; queries and keys rotate (ag_rope, `rope_mode`, `rope_base`)
    unless rope_mode is None. Subclasses set d_model, n_heads, n_kv_heads, head_dim, rope_mode,
    rope_base."""

    def _heads(self, y: AGTensor, n: int, pos, rotate: bool) -> AGTensor:
        """[n * head_dim, T, B] -> [head_dim, T, n, B], rotated at `pos` if `rotate`."""
        t, batch = y.shape[1], y.shape[2] if y.ndim > 2 else 1
        y = ops.ag_reshape(y, self.head_dim, n, t, batch)
        if rotate and self.rope_mode is not None:
            y = ops.ag_rope(y, pos, mode=self.rope_mode, freq_base=self.rope_base)
        return ops.ag_permute(y, 0, 2, 1, 3) if n > 1 else ops.ag_reshape(y, self.head_dim, t, 1, batch)

    def _grouped(self, y: AGTensor) -> AGTensor:
        """Key/value heads [head_dim, T, n_kv_heads, B] repeated to [head_dim, T, n_heads, B], each
        serving `n_heads / n_kv_heads` consecutive query heads."""
        group = self.n_heads // self.n_kv_heads
        if group == 1:
            return y
        hd, t = y.shape[0], y.shape[1]
        batch = y.shape[3] if y.ndim > 3 else 1
        wide = apply("broadcast", ops.ag_reshape(y, hd * t, 1, self.n_kv_heads, batch),
                     shape=(hd * t, group, self.n_kv_heads, batch))
        return ops.ag_reshape(wide, hd, t, self.n_heads, batch)

    def attend(self, q: AGTensor, k: AGTensor, v: AGTensor, pos=None) -> AGTensor:
        """Attention of the projections q [d_model, T(, B)], k and v [head_dim * n_kv_heads, T(, B)]:
        [d_model, T(, B)], before the output projection."""
        shape = q.shape[1:]
        q = self._heads(q, self.n_heads, pos, True)
        k = self._grouped(self._heads(k, self.n_kv_heads, pos, True))
        v = self._grouped(self._heads(v, self.n_kv_heads, pos, False))
        # scores [T_k, T_q, heads, B]: a column-wise softmax is the softmax over keys
        attn = ops.ag_softmax(ops.ag_matmul(k, q, transpose_a=True), scale=1.0 / math.sqrt(self.head_dim), causal=True)
        heads = ops.ag_matmul(v, attn)  # [head_dim, T_q, heads, B]
        if self.n_heads > 1:
            heads = ops.ag_permute(heads, 0, 2, 1, 3)
        return ops.ag_reshape(heads, self.d_model, *shape)


class ag_llama_block(GroupedAttention):
    """One llama layer: x + attn_output(attention(rope(attn_q h), rope(attn_k h), attn_v h)) with
    h = attn_norm(x), then + ffn_down(silu(ffn_gate h) * ffn_up h) with h = ffn_norm(x).
    `n_kv_heads` key/value heads (dividing n_heads) serve consecutive groups of query heads, as
    llama.cpp groups them. `rope_mode` 0 is llama.cpp's "normal" rotation (architecture `llama`),
    2 NeoX's."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, d_ff: int | None = None,
                 rope_base: float = 10000.0, rope_mode: int = 0, eps: float = 1e-5, n_layers: int = 1):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        d_ff = 4 * d_model if d_ff is None else d_ff
        _positive_int("ag_llama_block", d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=d_ff,
                      n_layers=n_layers)
        if d_model % n_heads or n_heads % n_kv_heads or (d_model // n_heads) % 2:
            raise GGMLError(f"ag_llama_block: n_heads {n_heads} must divide d_model {d_model} into heads of even "
                            f"size, and n_kv_heads {n_kv_heads} must divide n_heads")
        if rope_mode not in (0, 2):
            raise GGMLError(f"ag_llama_block: rope_mode must be 0 (normal) or 2 (NeoX), got {rope_mode!r}")
        self.d_model, self.n_heads, self.n_kv_heads = int(d_model), int(n_heads), int(n_kv_heads)
        self.head_dim = self.d_model // self.n_heads
        self.rope_base, self.rope_mode = float(rope_base), int(rope_mode)
        kv = self.head_dim * self.n_kv_heads
        residual = 0.02 / math.sqrt(2 * n_layers)  # GPT-2's scaled init of the residual projections
        self.attn_norm = ag_rms_norm_layer(d_model, eps)
        self.attn_q = LlamaProjection(d_model, d_model)
        self.attn_k = LlamaProjection(d_model, kv)
        self.attn_v = LlamaProjection(d_model, kv)
        self.attn_output = LlamaProjection(d_model, d_model, residual)
        self.ffn_norm = ag_rms_norm_layer(d_model, eps)
        self.ffn_gate = LlamaProjection(d_model, d_ff)
        self.ffn_up = LlamaProjection(d_model, d_ff)
        self.ffn_down = LlamaProjection(d_ff, d_model, residual)

    def attention(self, h: AGTensor, pos=None) -> AGTensor:
        """Causal grouped-query self-attention of h [d_model, T(, B)], before attn_output."""
        return self.attend(self.attn_q(h), self.attn_k(h), self.attn_v(h), pos)

    def forward(self, x: AGTensor, pos=None) -> AGTensor:
        """The layer applied to every sequence of x [d_model, T] or [d_model, T, B]; `pos` the
        tokens' positions (default 0 .. T - 1), as ag_rope takes them."""
        x = ops.ag_add(x, self.attn_output(self.attention(self.attn_norm(x), pos)))
        h = self.ffn_norm(x)
        return ops.ag_add(x, self.ffn_down(ops.ag_mul(ops.ag_silu(self.ffn_gate(h)), self.ffn_up(h))))

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
                f"rope_base={self.rope_base}, rope_mode={self.rope_mode}")


class ag_llama(Module):
    """A llama-style language model: token embedding (token_embd), `n_layers` ag_llama_blocks, a final
    RMSNorm (output_norm) and the output head (output), or the embedding's transpose with
    `tied=True`. forward(idx [T, B] or [T], 0-based token ids) gives logits [vocab, T, B];
    loss(idx, targets) the mean cross-entropy of the next tokens. `context` is the length the
    model is meant for (llama.cpp's context_length); rotary positions set no hard limit."""

    def __init__(self, vocab_size: int, d_model: int = 128, n_heads: int = 4, n_kv_heads: int | None = None,
                 n_layers: int = 2, d_ff: int | None = None, context: int = 2048, rope_base: float = 10000.0,
                 rope_mode: int = 0, eps: float = 1e-5, tied: bool = False):
        super().__init__()
        _positive_int("ag_llama", vocab_size=vocab_size, n_layers=n_layers, context=context)
        self.context, self.tied = int(context), bool(tied)
        self.token_embd = ag_embedding(vocab_size, d_model)
        self.token_embd.weight.data = _normal((d_model, vocab_size), 0.02)
        self.blocks = [ag_llama_block(d_model, n_heads, n_kv_heads, d_ff, rope_base, rope_mode, eps, n_layers)
                       for _ in range(n_layers)]
        self.output_norm = ag_rms_norm_layer(d_model, eps)
        self.output = None if tied else LlamaProjection(d_model, vocab_size)

    def forward(self, idx, pos=None) -> AGTensor:
        """Logits [vocab, T, B] for token ids idx [T, B] (or [T]); `pos` as ag_llama_block.forward."""
        x = self.token_embd(idx, batched=True)
        for block in self.blocks:
            x = block(x, pos)
        h = self.output_norm(x)
        return self.token_embd.unembed(h) if self.output is None else self.output(h)

    def loss(self, idx, targets) -> AGTensor:
        """Mean cross-entropy of the logits for idx against targets (next tokens, same shape)."""
        return ops.ag_softmax_cross_entropy_loss(self(idx), targets)
