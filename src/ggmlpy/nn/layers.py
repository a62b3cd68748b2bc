"""Layers with ggmlR's names and initialisations. Activations are [features, batch]."""
from __future__ import annotations

import math

import numpy as np

from .. import random as grandom
from ..autograd import forward_ad
from ..autograd import ops
from ..autograd.engine import apply, assign, keep_mask
from ..autograd.tape import no_grad
from ..errors import GGMLError
from ..runtime.autograd_state import AUTOGRAD
from ..tensor import AGTensor, ag_param, ag_tensor, norm_shape
from .module import Module


def _sizes(what: str, **dims) -> None:
    """Layer sizes are positive whole numbers (0 would divide by zero in the initialisation)."""
    for name, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise GGMLError(f"{what}: {name} must be a positive int, got {v!r}")


def _uniform(shape, limit):
    return grandom.generator().uniform(-limit, limit, size=shape)


_ACTIVATIONS = {None: None, "relu": ops.ag_relu, "sigmoid": ops.ag_sigmoid, "tanh": ops.ag_tanh,
                "softmax": ops.ag_softmax, "gelu": ops.ag_gelu, "silu": ops.ag_silu}


class ag_linear(Module):
    """W %*% x + b, then an optional activation. W [out, in] Glorot-uniform, b [out, 1] zeros."""

    def __init__(self, in_features: int, out_features: int, activation: str | None = None):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise GGMLError(f"ag_linear: activation must be one of {sorted(a for a in _ACTIVATIONS if a)} or None")
        _sizes("ag_linear", in_features=in_features, out_features=out_features)
        limit = math.sqrt(6.0 / (in_features + out_features))
        self.W = ag_param(_uniform((out_features, in_features), limit))
        self.b = ag_param(np.zeros((out_features, 1)))
        self.activation = activation

    def forward(self, x: AGTensor) -> AGTensor:
        """W %*% x + b, then the activation; x is [in_features, batch]."""
        z = ops.ag_matmul(self.W, x)
        if self.activation == "relu":  # bias and relu as one primitive: one eager launch, not two
            return apply("add_relu", z, self.b)
        y = ops.ag_add(z, self.b)
        act = _ACTIVATIONS[self.activation]
        return act(y) if act else y

    def extra_repr(self) -> str:
        act = f", activation={self.activation!r}" if self.activation else ""
        return f"{self.W.shape[1]}, {self.W.shape[0]}{act}"


class ag_dropout(Module):
    """Inverted dropout: in training mode multiply by (U > rate) / (1 - rate); identity otherwise."""

    def __init__(self, rate: float = 0.5):
        super().__init__()
        if not 0 <= rate < 1:
            raise GGMLError(f"ag_dropout: rate must be in [0, 1), got {rate}")
        self.rate = float(rate)

    def forward(self, x: AGTensor) -> AGTensor:
        """x with a fresh random mask in training mode; x itself in eval mode."""
        x = ops._ag(x, "ag_dropout")
        if not self.training or self.rate == 0:
            return x
        return ops.ag_mul(x, keep_mask(x.shape, self.rate, x))

    def extra_repr(self) -> str:
        return f"rate={self.rate}"


class ag_batch_norm(Module):
    """Normalise each row (feature) over the columns (batch), biased variance.

    Training mode uses the batch statistics and moves the running ones by
    `momentum`; eval mode uses the running ones. The input gradient includes the
    path through the batch statistics (ggmlR drops it; docs/divergences.md)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = float(eps), float(momentum)
        self.gamma = ag_param(np.ones((num_features, 1)))
        self.beta = ag_param(np.zeros((num_features, 1)))
        self.running_mean = ag_tensor(np.zeros((num_features, 1)))
        self.running_var = ag_tensor(np.ones((num_features, 1)))

    def buffers(self, prefix: str = "") -> list[tuple[str, AGTensor]]:
        return [(prefix + "running_mean", self.running_mean), (prefix + "running_var", self.running_var)]

    def forward(self, x: AGTensor) -> AGTensor:
        """x [features, batch] normalised per row; updates the running statistics in training mode."""
        x = ops._ag(x, "ag_batch_norm", like=self.gamma)
        if self.training:
            mean = ops.ag_mean(x, 1)
            xc = ops.ag_sub(x, mean)
            var = ops.ag_mean(ops.ag_mul(xc, xc), 1)
            with no_grad():
                m = self.momentum
                assign(self.running_mean, ops.ag_add(ops.ag_scale(self.running_mean, 1 - m), ops.ag_scale(mean, m)))
                assign(self.running_var, ops.ag_add(ops.ag_scale(self.running_var, 1 - m), ops.ag_scale(var, m)))
        else:
            xc = ops.ag_sub(x, self.running_mean)
            var = self.running_var
        y = ops.ag_mul(xc, ops.ag_pow(ops.ag_add(var, self.eps), -0.5))
        return ops.ag_add(ops.ag_mul(y, self.gamma), self.beta)

    def extra_repr(self) -> str:
        return f"{self.gamma.shape[0]}, eps={self.eps}, momentum={self.momentum}"


class ag_embedding(Module):
    """weight [dim, vocab] ~ U(-sqrt(1/vocab), sqrt(1/vocab)); forward(idx) = weight[, idx + 1] (0-based idx)."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        _sizes("ag_embedding", vocab_size=vocab_size, dim=dim)
        self.vocab_size, self.dim = int(vocab_size), int(dim)
        self.weight = ag_param(_uniform((dim, vocab_size), math.sqrt(1.0 / vocab_size)))

    def forward(self, idx, batched: bool = False) -> AGTensor:
        """The columns of the weight for 0-based indices idx: [dim, n] for n indices, a matrix
        flattened column by column as ggmlR does; `batched=True` keeps the index array's shape
        after dim instead (idx [T, B] -> [dim, T, B]). An i32 ag tensor of indices stays on the
        device (so ag_compile can take it as an input); it is checked against the vocabulary
        where it is gathered."""
        if isinstance(idx, AGTensor) and idx.dtype == "i32":
            if idx.ndim > 3:
                raise GGMLError(f"ag_embedding: indices of at most 3 dims, got shape {list(idx.shape)}")
            ids = idx
        else:
            raw = idx.numpy() if isinstance(idx, AGTensor) else np.asarray(idx)
            arr = np.asarray(raw, dtype=np.float64)
            cls = arr.astype(np.int64)
            if np.any(cls != arr) or (cls.size and (cls.min() < 0 or cls.max() >= self.vocab_size)):
                raise GGMLError(f"ag_embedding: indices must be integers in 0..{self.vocab_size - 1}")
            if cls.ndim > 3:
                raise GGMLError(f"ag_embedding: indices of at most 3 dims, got shape {cls.shape}")
            ids = ag_tensor(cls.reshape(-1, 1) if cls.ndim < 2 else cls, device=self.weight.device_context.spec, dtype="i32")
        if not batched and ids.ncol > 1:
            out = apply("get_cols", self.weight, ids)
            return ops.ag_reshape(out, self.dim, -1)
        return apply("get_cols", self.weight, ids)

    def unembed(self, h: AGTensor) -> AGTensor:
        """t(weight) %*% h: each vocabulary entry's score for the columns of h [dim, ...] (an output
        head tied to the embedding)."""
        return ops.ag_matmul(self.weight, h, transpose_a=True)

    def extra_repr(self) -> str:
        return f"{self.vocab_size}, {self.dim}"


class ag_multihead_attention(Module):
    """ggmlR's multi-head attention over columns (tokens): x [d_model, T] -> [d_model, T], or a batch
    of sequences [d_model, T, B] -> [d_model, T, B] (each sequence attends only to itself).

    W_q, W_k, W_v, W_o [d_model, d_model] Glorot-uniform; b_o [d_model, 1] zeros unless
    `bias=False`; `qkv_bias=True` adds b_q, b_k, b_v (PyTorch's in-projection bias; ggmlR has
    none). `dropout` drops attention weights in training mode (inverted, like ag_dropout).
    `causal=True` masks future tokens by default (forward's `causal_mask` overrides). All heads
    and sequences go through a few batched ops: one product for the scores, one softmax kernel
    (scale, mask and causal masking fused), one product for the values.
    Fields as ggmlR's: d_model, n_heads, d_k, d_v, scale, dropout, training."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, causal: bool = False,
                 qkv_bias: bool = False):
        super().__init__()
        if int(d_model) != d_model or int(n_heads) != n_heads or n_heads < 1 or d_model < 1:
            raise GGMLError(f"ag_multihead_attention: d_model and n_heads must be positive integers, "
                            f"got {d_model!r}, {n_heads!r}")
        if d_model % n_heads:
            raise GGMLError(f"ag_multihead_attention: d_model {d_model} is not divisible by n_heads {n_heads}")
        if not 0 <= dropout < 1:
            raise GGMLError(f"ag_multihead_attention: dropout must be in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.causal = int(d_model), int(n_heads), bool(causal)
        self.d_k = self.d_v = self.d_model // self.n_heads
        self.scale = 1.0 / math.sqrt(self.d_k)
        self.dropout = float(dropout)
        limit = math.sqrt(6.0 / (2 * d_model))
        for name in ("W_q", "W_k", "W_v", "W_o"):
            setattr(self, name, ag_param(_uniform((d_model, d_model), limit)))
        for name in ("b_q", "b_k", "b_v"):
            setattr(self, name, ag_param(np.zeros((d_model, 1))) if qkv_bias else None)
        self.b_o = ag_param(np.zeros((d_model, 1))) if bias else None

    @staticmethod
    def _project(x: AGTensor, W: AGTensor, b: AGTensor | None) -> AGTensor:
        y = ops.ag_matmul(W, x)
        return y if b is None else ops.ag_add(y, b)

    def _inference(self) -> bool:
        """Whether the flash-attention kernel may run: on the CPU (other backends' kernels want f16
        keys and values and some head sizes only), with no tape recording, no ag_compile trace,
        no forward-mode level and no dropout to draw (it has no gradient rules of its own)."""
        return (self.W_q.device_context.backend.is_cpu and not AUTOGRAD.recording() and AUTOGRAD.trace is None
                and not forward_ad.LEVELS and not (self.training and self.dropout > 0))

    def _heads(self, x: AGTensor, W: AGTensor, b: AGTensor | None) -> AGTensor:
        """W %*% x (+ b), split into heads: [d_model, T, B] -> [d_k, T, n_heads, B]."""
        y = self._project(x, W, b)
        t, batch = x.shape[1], x.shape[2] if x.ndim > 2 else 1
        if self.n_heads == 1:  # no head axis to move: a reshape puts T second
            return ops.ag_reshape(y, self.d_k, t, 1, batch)
        return ops.ag_permute(ops.ag_reshape(y, self.d_k, self.n_heads, t, batch), 0, 2, 1, 3)

    def forward(self, query: AGTensor, key: AGTensor | None = None, value: AGTensor | None = None,
                causal_mask: bool | None = None, attn_mask: AGTensor | None = None,
                key_padding_mask=None) -> AGTensor:
        """Attention of query's columns (tokens) over key/value's, per sequence of a batch:
        [d_model, T] -> [d_model, T], [d_model, T, B] -> [d_model, T, B].

        `attn_mask`: an additive mask (0 keeps, -inf drops) of the scores [T_k, T_q], a column
        [T_k, 1], or per sequence [T_k, T_q or 1, 1, B]. `key_padding_mask`: [T_k, B] (or [T_k]),
        true (or nonzero) where a key is padding, as PyTorch's. Masks given as ag tensors can be
        inputs of ag_compile; numpy ones are uploaded per call."""
        query = ops._ag(query, "ag_multihead_attention", "query", like=self.W_q)
        key = query if key is None else ops._ag(key, "ag_multihead_attention", "key", like=self.W_q)
        value = key if value is None else ops._ag(value, "ag_multihead_attention", "value", like=self.W_q)
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.nrow != self.d_model or x.ndim > 3:
                raise GGMLError(f"ag_multihead_attention: {name} must be [d_model={self.d_model}, T] or "
                                f"[d_model, T, B], got {list(x.shape)}")
        if key.shape != value.shape or key.shape[2:] != query.shape[2:]:
            raise GGMLError(f"ag_multihead_attention: key {list(key.shape)}, value {list(value.shape)} and "
                            f"query {list(query.shape)} must share the batch (and key/value the length)")
        causal = self.causal if causal_mask is None else bool(causal_mask)
        if causal and key.ncol > query.ncol:
            raise GGMLError("ag_multihead_attention: a causal mask needs at most as many keys as queries "
                            f"(query i sees keys 0..i), got {key.ncol} keys for {query.ncol} queries")
        mask = self._mask(attn_mask, key_padding_mask, key, query)
        if self._inference():  # nothing to record or differentiate: ggml's flash attention, one kernel
            q, k, v = (self._project(query, self.W_q, self.b_q), self._project(key, self.W_k, self.b_k),
                       self._project(value, self.W_v, self.b_v))
            heads = apply("attention", q, k, v, *([mask] if mask is not None else []), heads=self.n_heads,
                          scale=self.scale, causal=causal)
            out = ops.ag_matmul(self.W_o, heads)
            return out if self.b_o is None else ops.ag_add(out, self.b_o)
        q, k, v = (self._heads(query, self.W_q, self.b_q), self._heads(key, self.W_k, self.b_k),
                   self._heads(value, self.W_v, self.b_v))
        # scores [T_k, T_q, heads, B]: a column-wise softmax of them is the softmax over keys
        attn = ops.ag_softmax(ops.ag_matmul(k, q, transpose_a=True), mask=mask, scale=self.scale, causal=causal)
        if self.training and self.dropout > 0:
            attn = ops.ag_mul(attn, keep_mask(attn.shape, self.dropout, attn))
        heads = ops.ag_matmul(v, attn)  # [d_k, T_q, heads, B]
        if self.n_heads > 1:
            heads = ops.ag_permute(heads, 0, 2, 1, 3)
        heads = ops.ag_reshape(heads, self.d_model, *query.shape[1:])
        out = ops.ag_matmul(self.W_o, heads)
        return out if self.b_o is None else ops.ag_add(out, self.b_o)

    def _mask(self, attn_mask, key_padding_mask, key, query):
        """One additive mask [T_k, T_q or 1, 1, B or 1] from the two kinds, or None."""
        tk, batch = key.ncol, (key.shape[2] if key.ndim > 2 else 1)
        mask = None
        if attn_mask is not None:
            mask = attn_mask if isinstance(attn_mask, AGTensor) else \
                ag_tensor(np.asarray(attn_mask, dtype=np.float64), device=key.device_context.spec)
            if mask.ndim == 3 or (mask.ndim == 4 and mask.shape[2] != 1):
                raise GGMLError(f"ag_multihead_attention: attn_mask must be [T_k, T_q], [T_k, 1] or "
                                f"[T_k, T_q or 1, 1, B], got {list(mask.shape)}")
        if key_padding_mask is not None:
            if isinstance(key_padding_mask, AGTensor):
                pad = key_padding_mask  # additive already: 0 keeps, -inf drops
            else:
                kp = np.asarray(key_padding_mask)
                if kp.size != tk * batch or kp.dtype.kind not in "biuf":
                    raise GGMLError(f"ag_multihead_attention: key_padding_mask must be [T_k={tk}, B={batch}] "
                                    f"booleans, got shape {list(kp.shape)}, dtype {kp.dtype}")
                kp = kp.reshape(tk, -1)
                if kp.shape[1] != batch:
                    raise GGMLError(f"ag_multihead_attention: key_padding_mask must be [T_k={tk}, B={batch}], "
                                    f"got {list(np.shape(key_padding_mask))}")
                pad = ag_tensor(np.where(kp != 0, -np.inf, 0.0).reshape(tk, 1, 1, batch), device=key.device_context.spec)
            if pad.ndim == 2 and batch > 1:
                pad = ops.ag_reshape(pad, tk, 1, 1, batch)
            if mask is not None:  # both kinds: [T_k, T_q or 1, 1, B]
                full = norm_shape((tk, mask.shape[1], 1, batch))
                mask = ops.ag_add(pad if pad.shape == full else apply("broadcast", pad, shape=full), mask)
            else:
                mask = pad
        return mask

    def extra_repr(self) -> str:
        extra = (f", dropout={self.dropout}" if self.dropout else "") + ("" if self.b_o is not None else ", bias=False")
        extra += ", qkv_bias=True" if self.b_q is not None else ""
        return f"d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal}{extra}"


class ag_sequential(Module):
    """Layers applied in order; parameters are named layer{i}_{name}."""

    def __init__(self, *layers):
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        self.layers = list(layers)

    def children(self) -> list:
        return [m for m in self.layers if isinstance(m, Module)]

    def _repr_total(self) -> str:
        return f"{len(self.layers)} layers, "

    def forward(self, x: AGTensor) -> AGTensor:
        """The layers applied in order."""
        for layer in self.layers:
            x = layer(x)
        return x


class ag_layer_norm_layer(Module):
    """Layer norm over features (each column), with learnable gamma and beta [F, 1]."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = float(eps)
        self.gamma = ag_param(np.ones((num_features, 1)))
        self.beta = ag_param(np.zeros((num_features, 1)))

    def forward(self, x: AGTensor) -> AGTensor:
        """Layer norm of each column, then * gamma + beta."""
        return ops.ag_layer_norm(x, self.eps, self.gamma, self.beta)

    def extra_repr(self) -> str:
        return f"{self.gamma.shape[0]}, eps={self.eps}"


class ag_conv2d_layer(Module):
    """ag_conv2d with a learnt kernel W [KW, KH, in_channels, out_channels] (Glorot uniform over
    KH*KW*in and KH*KW*out, as Keras' Conv2D) and bias b [out_channels, 1] (zeros), then an
    optional activation. Images are [W, H, C, N]; `kernel_size`, `stride`, `padding` and
    `dilation` are ints or pairs along W, then H."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: ops._IntPair, stride: ops._IntPair = 1,
                 padding: ops._IntPair = 0, dilation: ops._IntPair = 1, activation: str | None = None):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise GGMLError(f"ag_conv2d_layer: activation must be one of {sorted(a for a in _ACTIVATIONS if a)} "
                            "or None")
        _sizes("ag_conv2d_layer", in_channels=in_channels, out_channels=out_channels)
        kw, kh = ops._pair(kernel_size, "ag_conv2d_layer", "kernel_size", 1)
        limit = math.sqrt(6.0 / (kw * kh * (in_channels + out_channels)))
        self.W = ag_param(_uniform((kw, kh, in_channels, out_channels), limit))
        self.b = ag_param(np.zeros((out_channels, 1)))
        # as pairs (along W, then H): a description read back from JSON (lists) rebuilds the same repr
        self.stride = ops._pair(stride, "ag_conv2d_layer", "stride", 1)
        self.padding = ops._pair(padding, "ag_conv2d_layer", "padding", 0)
        self.dilation = ops._pair(dilation, "ag_conv2d_layer", "dilation", 1)
        self.activation = activation

    def forward(self, x: AGTensor) -> AGTensor:
        """The convolution of images x [W, H, in_channels, N], plus b, then the activation."""
        y = ops.ag_conv2d(x, self.W, self.b, stride=self.stride, padding=self.padding, dilation=self.dilation)
        act = _ACTIVATIONS[self.activation]
        return act(y) if act else y

    def extra_repr(self) -> str:
        kw, kh, c, oc = (tuple(self.W.shape) + (1, 1))[:4]
        act = f", activation={self.activation!r}" if self.activation else ""
        return (f"{c}, {oc}, kernel_size=({kw}, {kh}), stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}{act}")


class ag_max_pool2d_layer(Module):
    """ag_max_pool2d as a layer: the max over each `kernel` window, `stride` apart (default: the kernel)."""

    def __init__(self, kernel: ops._IntPair, stride: ops._IntPair | None = None):
        super().__init__()
        self.kernel = ops._pair(kernel, "ag_max_pool2d_layer", "kernel", 1)
        self.stride = self.kernel if stride is None else ops._pair(stride, "ag_max_pool2d_layer", "stride", 1)

    def forward(self, x: AGTensor) -> AGTensor:
        """Max pooling of images x [W, H, C, N]."""
        return ops.ag_max_pool2d(x, self.kernel, self.stride)

    def extra_repr(self) -> str:
        return f"{self.kernel}, stride={self.stride}"


class ag_flatten_layer(Module):
    """Each sample's features as one column: [d1, ..., N] -> [d1 * ..., N] (the last axis is the batch)."""

    def __init__(self):  # its own, so that its (empty) arguments are recorded for ag_save_model
        super().__init__()

    def forward(self, x: AGTensor) -> AGTensor:
        """x with all but its last axis flattened, column-major (a reshape: no copy)."""
        if not isinstance(x, AGTensor):
            raise GGMLError(f"ag_flatten_layer: expected an ag tensor, got {type(x).__name__}")
        return ops.ag_reshape(x, -1, x.shape[-1])


class ag_activation(Module):
    """An activation as a layer: "relu", "sigmoid", "tanh", "softmax", "gelu" or "silu"."""

    def __init__(self, name: str):
        super().__init__()
        if name not in _ACTIVATIONS or name is None:
            raise GGMLError(f"ag_activation: unknown activation {name!r}")
        self.name = name

    def forward(self, x: AGTensor) -> AGTensor:
        """The activation applied element-wise (softmax: per column)."""
        return _ACTIVATIONS[self.name](x)

    def extra_repr(self) -> str:
        return repr(self.name)


def ag_gelu_layer() -> ag_activation:
    """A GELU activation layer (ag_activation("gelu"))."""
    return ag_activation("gelu")


def ag_silu_layer() -> ag_activation:
    """A SiLU activation layer (ag_activation("silu"))."""
    return ag_activation("silu")
