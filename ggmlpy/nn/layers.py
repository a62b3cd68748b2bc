"""Layers with ggmlR's names and initialisations. Activations are [features, batch]."""
from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from .. import random as grandom
from ..autograd import ops as F
from ..autograd.engine import apply, assign
from ..autograd.tape import no_grad
from ..errors import GGMLError
from ..params import ParamList
from ..tensor import AGTensor, ag_param, ag_tensor


class Module:
    """Base layer: `forward`, `__call__`, parameters, training mode and state dicts."""

    def __init__(self):
        self.training = True

    def __call__(self, *args, **kwargs) -> AGTensor:
        return self.forward(*args, **kwargs)

    def children(self) -> list:
        """Sub-layers: by default the Module-valued attributes (and lists of Modules), in order."""
        out = []
        for value in self.__dict__.values():
            if isinstance(value, Module):
                out.append(value)
            elif isinstance(value, (list, tuple)):
                out.extend(v for v in value if isinstance(v, Module))
        return out

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, AGTensor]]:
        """(name, tensor) for every trainable tensor, this layer's first, then its sub-layers' as layer{i}_{name}."""
        for name, value in self.__dict__.items():
            if isinstance(value, AGTensor) and value.requires_grad:
                yield prefix + name, value
        for i, child in enumerate(self.children(), 1):
            yield from child.named_parameters(f"{prefix}layer{i}_")

    def parameters(self) -> ParamList:
        """The trainable tensors, in named_parameters() order: a list that also answers by name,
        as ggmlR's named list (`parameters()["W"]`; names as named_parameters())."""
        return ParamList.from_pairs(self.named_parameters())

    def params(self) -> ParamList:
        """ggmlR's `$params()`: the same as parameters()."""
        return self.parameters()

    def buffers(self, prefix: str = "") -> list[tuple[str, AGTensor]]:
        """This layer's own state that is not trained (e.g. running statistics): (name, tensor) pairs."""
        return []

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, AGTensor]]:
        """Buffers of this layer and, recursively, its sub-layers, named like named_parameters()."""
        yield from self.buffers(prefix)
        for i, child in enumerate(self.children(), 1):
            yield from child.named_buffers(f"{prefix}layer{i}_")

    def state_dict(self) -> dict:
        """Parameters and buffers as {name: numpy array} (a copy)."""
        out = {n: p.numpy() for n, p in self.named_parameters()}
        out.update({n: b.numpy() for n, b in self.named_buffers()})
        return out

    def load_state_dict(self, state: dict) -> None:
        """Write the values of a state_dict() into the model's tensors, in place."""
        own = dict(self.named_parameters())
        own.update(dict(self.named_buffers()))
        missing = set(own) - set(state)
        if missing:
            raise GGMLError(f"load_state_dict: missing entries {sorted(missing)}")
        for name, t in own.items():
            t.data = state[name]

    def set_training(self, mode: bool) -> None:
        """Switch training mode for this layer and, recursively, all layers inside it."""
        self.training = mode
        for child in self.children():
            child.set_training(mode)

    def train(self, mode: bool = True) -> "Module":
        """Training mode (dropout drops, batch norm uses batch statistics), recursively, as
        ag_train(); `train(False)` is eval(). Returns the model."""
        self.set_training(bool(mode))
        return self

    def eval(self) -> "Module":
        """Eval mode (dropout is the identity, batch norm uses running statistics), recursively,
        as ag_eval(). Returns the model."""
        self.set_training(False)
        return self

    def num_parameters(self) -> int:
        """How many trainable numbers the model holds (all its parameters' elements)."""
        return sum(p.shape[0] * p.shape[1] for p in self.parameters())

    def extra_repr(self) -> str:
        """The layer's settings, shown inside its repr's parentheses."""
        return ""

    def __repr__(self) -> str:
        lines = self._repr_lines()
        n = self.num_parameters()
        if self.children():
            layers = f"{len(self.layers)} layers, " if isinstance(self, ag_sequential) else ""
            lines.append(f"total: {layers}{n:,} trainable parameters in {len(self.parameters())} tensors")
        return "\n".join(lines)

    def _repr_lines(self) -> list:
        head = f"{type(self).__name__}({self.extra_repr()}"
        own = [(name, v) for name, v in self.__dict__.items() if isinstance(v, AGTensor) and v.requires_grad]
        note = ""
        if own:
            shapes = ", ".join(f"{name} {v.shape[0]}x{v.shape[1]}" for name, v in own)
            note = f"  [{shapes}: {sum(v.shape[0] * v.shape[1] for _, v in own):,} parameters]"
        children = self.children()
        if not children:
            return [head + ")" + note]
        lines = [head + ("" if head.endswith("(") else ",") + note]
        for i, child in enumerate(children, 1):  # named as in named_parameters(): layer{i}_...
            sub = child._repr_lines()
            lines.append(f"  (layer{i}): {sub[0]}")
            lines.extend("  " + line for line in sub[1:])
        lines.append(")")
        return lines


def _sizes(what: str, **dims) -> None:
    """Layer sizes are positive whole numbers (0 would divide by zero in the initialisation)."""
    for name, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise GGMLError(f"{what}: {name} must be a positive int, got {v!r}")


def _uniform(shape, limit):
    return grandom.generator().uniform(-limit, limit, size=shape)


_ACTIVATIONS = {None: None, "relu": F.ag_relu, "sigmoid": F.ag_sigmoid, "tanh": F.ag_tanh,
                "softmax": F.ag_softmax, "gelu": F.ag_gelu, "silu": F.ag_silu}


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
        z = F.ag_matmul(self.W, x)
        if self.activation == "relu":  # bias and relu as one primitive: one eager launch, not two
            return apply("add_relu", z, self.b)
        y = F.ag_add(z, self.b)
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
        x = F._ag(x, "ag_dropout")
        if not self.training or self.rate == 0:
            return x
        keep = (grandom.generator().uniform(size=x.shape) > self.rate) / (1.0 - self.rate)
        return F.ag_mul(x, ag_tensor(keep, device=x.dc.spec))

    def extra_repr(self) -> str:
        return f"rate={self.rate}"


class ag_batch_norm(Module):
    """Normalise each row (feature) over the columns (batch), biased variance.

    Training mode uses the batch statistics and moves the running ones by
    `momentum`; eval mode uses the running ones. The input gradient includes the
    path through the batch statistics (ggmlR drops it; see README)."""

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
        if self.training:
            mean = F.ag_mean(x, 1)
            xc = F.ag_sub(x, mean)
            var = F.ag_mean(F.ag_mul(xc, xc), 1)
            with no_grad():
                m = self.momentum
                assign(self.running_mean, F.ag_add(F.ag_scale(self.running_mean, 1 - m), F.ag_scale(mean, m)))
                assign(self.running_var, F.ag_add(F.ag_scale(self.running_var, 1 - m), F.ag_scale(var, m)))
        else:
            xc = F.ag_sub(x, self.running_mean)
            var = self.running_var
        y = F.ag_mul(xc, F.ag_pow(F.ag_add(var, self.eps), -0.5))
        return F.ag_add(F.ag_mul(y, self.gamma), self.beta)

    def extra_repr(self) -> str:
        return f"{self.gamma.shape[0]}, eps={self.eps}, momentum={self.momentum}"


class ag_embedding(Module):
    """weight [dim, vocab] ~ U(-sqrt(1/vocab), sqrt(1/vocab)); forward(idx) = weight[, idx + 1] (0-based idx)."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        _sizes("ag_embedding", vocab_size=vocab_size, dim=dim)
        self.vocab_size, self.dim = int(vocab_size), int(dim)
        self.weight = ag_param(_uniform((dim, vocab_size), math.sqrt(1.0 / vocab_size)))

    def forward(self, idx) -> AGTensor:
        """The columns of the weight for 0-based indices idx: a vector (or [n, 1], [1, n]) gives
        [dim, n]; a [T, B] matrix gives [dim, T, B] (ggmlR flattens it to [dim, T*B]).
        An i32 ag tensor of indices stays on the device (so ag_compile can take it as an input)."""
        if isinstance(idx, AGTensor) and idx.dtype == "i32":
            ids = idx  # checked against the vocabulary where it is gathered (engine)
        else:
            raw = idx.numpy() if isinstance(idx, AGTensor) else np.asarray(idx)
            arr = np.asarray(raw, dtype=np.float64)
            cls = arr.astype(np.int64)
            if np.any(cls != arr) or (cls.size and (cls.min() < 0 or cls.max() >= self.vocab_size)):
                raise GGMLError(f"ag_embedding: indices must be integers in 0..{self.vocab_size - 1}")
            if cls.ndim > 3:
                raise GGMLError(f"ag_embedding: indices of at most 3 dims, got shape {cls.shape}")
            ids = ag_tensor(cls.reshape(-1, 1) if cls.ndim < 2 else cls, device=self.weight.dc.spec, dtype="i32")
        return apply("get_cols", self.weight, ids)

    def extra_repr(self) -> str:
        return f"{self.vocab_size}, {self.dim}"


class ag_multihead_attention(Module):
    """ggmlR's multi-head attention over columns (tokens): x [d_model, seq] -> [d_model, seq].

    W_q, W_k, W_v, W_o [d_model, d_model] Glorot-uniform; b_o [d_model, 1] zeros unless
    `bias=False`. `dropout` drops attention weights in training mode (inverted, like
    ag_dropout). `causal=True` masks future tokens by default (forward's `causal_mask` overrides).
    Fields as ggmlR's: d_model, n_heads, d_k, d_v, scale, dropout, training."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, causal: bool = False):
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
        self.b_o = ag_param(np.zeros((d_model, 1))) if bias else None

    def forward(self, query: AGTensor, key: AGTensor | None = None, value: AGTensor | None = None,
                causal_mask: bool | None = None) -> AGTensor:
        """Attention of query's columns (tokens) over key/value's: [d_model, seq] -> [d_model, seq]."""
        key = query if key is None else key
        value = key if value is None else value
        causal = self.causal if causal_mask is None else bool(causal_mask)
        q, k, v = F.ag_matmul(self.W_q, query), F.ag_matmul(self.W_k, key), F.ag_matmul(self.W_v, value)
        dk = self.d_k
        mask = _causal_mask(k.ncol, q.ncol, q.dc.spec) if causal else None
        heads = None
        for h in range(self.n_heads):
            rows = slice(h * dk, (h + 1) * dk)
            qh, kh, vh = F.ag_slice(q, rows), F.ag_slice(k, rows), F.ag_slice(v, rows)
            # scores^T [seq_kv, seq_q]: a column-wise softmax of it is the row-wise softmax over keys
            st = F.ag_scale(apply("matmul", kh, qh, ta=True, tb=False), self.scale)
            if mask is not None:
                st = F.ag_add(st, mask)
            attn = F.ag_softmax(st)
            if self.training and self.dropout > 0:
                keep = (grandom.generator().uniform(size=attn.shape) > self.dropout) / (1.0 - self.dropout)
                attn = F.ag_mul(attn, ag_tensor(keep, device=attn.dc.spec))
            head = F.ag_matmul(vh, attn)
            heads = head if heads is None else F.ag_concat(heads, head, dim=1)
        out = F.ag_matmul(self.W_o, heads)
        return out if self.b_o is None else F.ag_add(out, self.b_o)

    def extra_repr(self) -> str:
        extra = (f", dropout={self.dropout}" if self.dropout else "") + ("" if self.b_o is not None else ", bias=False")
        return f"d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal}{extra}"


def _causal_mask(n_kv: int, n_q: int, device):
    j, i = np.meshgrid(np.arange(n_kv), np.arange(n_q), indexing="ij")
    return ag_tensor(np.where(j > i, -np.inf, 0.0), device=device)


class ag_sequential(Module):
    """Layers applied in order; parameters are named layer{i}_{name}."""

    def __init__(self, *layers):
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        self.layers = list(layers)

    def children(self) -> list:
        return [m for m in self.layers if isinstance(m, Module)]

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
        return F.ag_layer_norm(x, self.eps, self.gamma, self.beta)

    def extra_repr(self) -> str:
        return f"{self.gamma.shape[0]}, eps={self.eps}"


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


def _module(model, what: str) -> Module:
    if not isinstance(model, Module):
        raise GGMLError(f"{what}: expected a model (an ag_* layer or ag_sequential), got {type(model).__name__}")
    return model


def ag_train(model: Module) -> Module:
    """Training mode, recursively (ggmlR reaches only one level down)."""
    _module(model, "ag_train").set_training(True)
    return model


def ag_eval(model: Module) -> Module:
    """Eval mode, recursively."""
    _module(model, "ag_eval").set_training(False)
    return model
