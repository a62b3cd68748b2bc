"""Layer objects of the Keras-like API: shape inference, ggmlR's initialisers, ggml graph building.

Shapes here are ggml shapes of ONE sample (ne without the batch axis): flat features `(F,)`,
sequences `(C, T)`, images `(W, H, C)`, token ids `(T,)`. Users give R/Keras shapes
(`(T, C)`, `(H, W, C)`); `r_to_ggml_shape` converts. Weights are numpy float32 arrays
whose shape is the ggml ne reversed (so `arr.ravel()` is ggml memory order).
"""
from __future__ import annotations

import math

import numpy as np

from ..bindings import lib
from ..errors import GGMLError
from .builder import ACTIVATIONS, NO_BACKWARD

_counters: dict[str, int] = {}


def r_to_ggml_shape(shape) -> tuple:
    """An R/Keras per-sample shape to ggml order: (F,), (T, C) -> (C, T), (H, W, C) -> (W, H, C)."""
    s = tuple(int(v) for v in np.atleast_1d(shape))
    if any(v <= 0 for v in s):
        raise GGMLError(f"shape must be positive, got {s}")
    if len(s) == 1:
        return s
    if len(s) == 2:
        return (s[1], s[0])
    if len(s) == 3:
        return (s[1], s[0], s[2])
    raise GGMLError(f"input shapes have 1 to 3 axes, got {s}")


def ggml_to_r_shape(shape) -> tuple:
    s = tuple(shape)
    if len(s) == 1:
        return s
    if len(s) == 2:
        return (s[1], s[0])
    return (s[1], s[0], s[2])


def _pair(v, what):
    v = [int(a) for a in np.atleast_1d(v)]
    if len(v) == 1:
        v = v * 2
    if len(v) != 2 or min(v) < 1:
        raise GGMLError(f"{what} must be one or two positive integers, got {v}")
    return v


def _check_activation(a):
    if a not in ACTIVATIONS:
        raise GGMLError(f"unknown activation {a!r}; one of {sorted(x for x in ACTIVATIONS if x)}")
    return a


def _glorot(rng, fan_in, fan_out, shape):
    lim = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-lim, lim, size=shape).astype(np.float32)


def _zigzag(shape):
    """ggmlR's fixed recurrent-kernel initialiser: ((i - 1) %% 20 - 10) / 1000 in memory order."""
    n = int(np.prod(shape))
    return ((np.arange(n) % 20 - 10) / 1000.0).astype(np.float32).reshape(shape)


class Layer:
    """Base layer: a name, a trainable flag, weights (numpy) and a config."""

    kind = "layer"
    has_weights = False

    def __init__(self, name=None, trainable=True, input_shape=None):
        self.auto_named = name is None
        if name is None:
            _counters[self.kind] = _counters.get(self.kind, 0) + 1
            name = f"{self.kind}_{_counters[self.kind]}"
        self.name = str(name)
        self.trainable = bool(trainable)
        self.input_shape = None if input_shape is None else r_to_ggml_shape(input_shape)
        self.weights: dict[str, np.ndarray] = {}
        self.in_shape = None
        self.out_shape = None

    # -- to override -------------------------------------------------------------------------------
    def infer(self, in_shapes: list) -> tuple:
        """One sample's output shape (ggml order) for these input shapes; GGMLError if they do not fit."""
        return in_shapes[0]

    def param_shapes(self) -> dict:
        """{weight name: numpy shape (ggml ne reversed)} for the current input shape."""
        return {}

    def init_weights(self, rng) -> dict:
        """Fresh weights with ggmlR's initialisers, drawn from numpy Generator `rng`."""
        return {}

    def build(self, b, xs, W, batch, ctx):
        """The layer's ggml ops on input tensors `xs` ([*sample shape, batch]) with weight tensors `W`."""
        raise NotImplementedError

    def config(self) -> dict:
        """The constructor settings (ggmlR's layer$config), enough to rebuild the layer."""
        return {}

    # -- shared ------------------------------------------------------------------------------------
    def setup(self, in_shapes: list, rng) -> tuple:
        """Infer the output shape; create (or check) the weights for these input shapes."""
        out = self.infer([tuple(s) for s in in_shapes])
        if self.in_shape is not None and self.has_weights and tuple(in_shapes[0]) != self.in_shape:
            raise GGMLError(f"layer {self.name!r} is shared between inputs of shapes "
                            f"{self.in_shape} and {tuple(in_shapes[0])}")
        self.in_shape = tuple(in_shapes[0])
        self.out_shape = tuple(out)
        shapes = self.param_shapes()
        if set(self.weights) != set(shapes) or any(self.weights[k].shape != s for k, s in shapes.items()):
            self.weights = {k: v.astype(np.float32) for k, v in self.init_weights(rng).items()}
        return self.out_shape

    @property
    def type(self) -> str:
        """ggmlR's layer$type (the kind: "dense", "conv_2d", ...)."""
        return self.kind

    @property
    def output_shape(self):
        """One sample's output shape in R order ((H, W, C), (L, C), (F,)); None before building."""
        return None if self.out_shape is None else tuple(ggml_to_r_shape(self.out_shape))

    def n_params(self) -> int:
        """Number of weight values (running averages included)."""
        return int(sum(v.size for v in self.weights.values()))

    def tensors(self, b):
        """The layer's weights as tensors of builder `b` (ggml params when trainable)."""
        return {k: b.weight((id(self), k), v, self.trainable) for k, v in self.weights.items()}

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}: {self.in_shape} -> {self.out_shape}>"


class Dense(Layer):
    """Fully connected: act(W^T x + b); weight ne [in, units], Glorot uniform; bias zeros."""

    kind = "dense"
    has_weights = True

    def __init__(self, units, activation=None, name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.units = int(units)
        if self.units < 1:
            raise GGMLError(f"dense: units must be >= 1, got {units}")
        self.activation = _check_activation(activation)

    def infer(self, s):
        if len(s[0]) != 1:
            raise GGMLError(f"dense {self.name!r} needs flat input, got shape {ggml_to_r_shape(s[0])}: "
                            "add a flatten layer first")
        return (self.units,)

    def param_shapes(self):
        return {"weight": (self.units, self.in_shape[0]), "bias": (self.units,)}

    def init_weights(self, rng):
        f = self.in_shape[0]
        return {"weight": _glorot(rng, f, self.units, (self.units, f)), "bias": np.zeros(self.units, np.float32)}

    def build(self, b, xs, W, batch, ctx):
        y = b.add(b.matmul(W["weight"], xs[0]), W["bias"])
        if ctx.get("logits_of") == id(self) and self.activation == "softmax":
            return y  # ggml's cross-entropy applies the log-softmax itself (softmax_ce="exact")
        return b.activation(y, self.activation)

    def config(self):
        return {"units": self.units, "activation": self.activation}


class Flatten(Layer):
    """Each sample to a flat vector in ggml order."""

    kind = "flatten"

    def infer(self, s):
        return (int(np.prod(s[0])),)

    def build(self, b, xs, W, batch, ctx):
        return b.reshape(xs[0], [self.out_shape[0], batch])


class Conv2D(Layer):
    """2-d cross-correlation over images (W, H, C); kernel ne [KW, KH, C, filters], He uniform."""

    kind = "conv_2d"
    has_weights = True

    def __init__(self, filters, kernel_size, activation=None, strides=(1, 1), padding="valid",
                 name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.filters = int(filters)
        self.kernel_size = _pair(kernel_size, "kernel_size")   # (height, width)
        self.strides = _pair(strides, "strides")
        if padding not in ("valid", "same"):
            raise GGMLError(f"padding must be 'valid' or 'same', got {padding!r}")
        self.padding = padding
        self.activation = _check_activation(activation)

    def _pads(self, h, w):
        """(top, bottom, left, right) zero padding. "same": ggmlR's floor(K/2) on both sides for
        odd kernels; for an even kernel that is one row/column too many (ggmlR's output is
        (H+1)x(W+1)), so it uses Keras' padding: ceil(H/s) outputs, the extra row/column after."""
        kh, kw = self.kernel_size
        if self.padding == "valid":
            return 0, 0, 0, 0
        pads = []
        for k, n, st in ((kh, h, self.strides[0]), (kw, w, self.strides[1])):
            if k % 2:
                pads += [k // 2, k // 2]
            else:
                total = max((-(-n // st) - 1) * st + k - n, 0)
                pads += [total // 2, total - total // 2]
        return tuple(pads)

    def infer(self, s):
        if len(s[0]) != 3:
            raise GGMLError(f"conv_2d {self.name!r} needs image input (H, W, C), got {ggml_to_r_shape(s[0])}")
        w, h, c = s[0]
        kh, kw = self.kernel_size
        sh, sw = self.strides
        pt, pb, pl, pr = self._pads(h, w)
        oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
        if oh < 1 or ow < 1:
            raise GGMLError(f"conv_2d {self.name!r}: kernel {self.kernel_size} larger than the input {h}x{w}")
        return (ow, oh, self.filters)

    def param_shapes(self):
        kh, kw = self.kernel_size
        return {"kernel": (self.filters, self.in_shape[2], kh, kw), "bias": (self.filters,)}

    def init_weights(self, rng):
        kh, kw = self.kernel_size
        c = self.in_shape[2]
        lim = math.sqrt(6.0 / (kh * kw * c))
        return {"kernel": rng.uniform(-lim, lim, (self.filters, c, kh, kw)).astype(np.float32),
                "bias": np.zeros(self.filters, np.float32)}

    def build(self, b, xs, W, batch, ctx):
        sh, sw = self.strides
        w_in, h_in, c_in = self.in_shape
        pt, pb, pl, pr = self._pads(h_in, w_in)
        x = b.cont(xs[0])
        if pt != pb or pl != pr:   # asymmetric: pad explicitly (an acc into zeros has a backward)
            zeros = b.zeros([w_in + pl + pr, h_in + pt + pb, c_in, batch])
            x = lib.ggml_acc(b.ctx, zeros, x, zeros.nb[1], zeros.nb[2], zeros.nb[3], pl * zeros.nb[0] + pt * zeros.nb[1])
            ph = pw = 0
        else:
            ph, pw = pt, pl
        # ggml_conv_2d's im2col is F16 in this ggml; ggmlR's (and ours) stays F32
        k = W["kernel"]
        col = lib.ggml_im2col(b.ctx, k, x, sw, sh, pw, ph, 1, 1, True, lib.GGML_TYPE_F32)
        n_col = int(col.ne[1] * col.ne[2] * col.ne[3])
        y = b.matmul(b.reshape(col, [int(col.ne[0]), n_col]), b.reshape(k, [int(k.ne[0] * k.ne[1] * k.ne[2]), int(k.ne[3])]))
        # bias and activation on the [OW*OH*N, OC] product, before the one permute to [OW, OH, OC, N]:
        # a broadcast along ne0 reduces (in the backward pass) far faster than one over a 4-d image
        y = b.add(y, b.reshape(W["bias"], [1, self.filters]))
        if self.activation != "softmax":   # element-wise: before the permute is as good as after
            y = b.activation(y, self.activation)
        y = b.reshape(y, [int(col.ne[1]), int(col.ne[2]), int(col.ne[3]), int(k.ne[3])])
        y = b.cont(lib.ggml_permute(b.ctx, y, 0, 1, 3, 2))
        return b.activation(y, "softmax") if self.activation == "softmax" else y

    def config(self):
        return {"filters": self.filters, "kernel_size": self.kernel_size, "strides": self.strides,
                "padding": self.padding, "activation": self.activation}


class Conv1D(Layer):
    """1-d convolution over a sequence (C, L) -> (filters, L_out); kernel ne [K, C, filters]."""

    kind = "conv_1d"
    has_weights = True

    def __init__(self, filters, kernel_size, activation=None, strides=1, padding="valid",
                 name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.filters = int(filters)
        self.kernel_size = int(np.atleast_1d(kernel_size)[0])
        self.strides = int(np.atleast_1d(strides)[0])
        if padding not in ("valid", "same"):
            raise GGMLError(f"padding must be 'valid' or 'same', got {padding!r}")
        if padding == "same" and self.kernel_size % 2 == 0:
            raise GGMLError("conv_1d: padding='same' needs an odd kernel_size")
        self.padding = padding
        self.activation = _check_activation(activation)

    def infer(self, s):
        if len(s[0]) != 2:
            raise GGMLError(f"conv_1d {self.name!r} needs sequence input (L, C), got {ggml_to_r_shape(s[0])}")
        c, L = s[0]
        p = self.kernel_size // 2 if self.padding == "same" else 0
        ol = (L + 2 * p - self.kernel_size) // self.strides + 1
        if ol < 1:
            raise GGMLError(f"conv_1d {self.name!r}: kernel {self.kernel_size} longer than the sequence ({L})")
        return (self.filters, ol)

    def param_shapes(self):
        return {"kernel": (self.filters, self.in_shape[0], self.kernel_size), "bias": (self.filters,)}

    def init_weights(self, rng):
        c = self.in_shape[0]
        lim = math.sqrt(6.0 / (self.kernel_size * c))
        return {"kernel": rng.uniform(-lim, lim, self.param_shapes()["kernel"]).astype(np.float32),
                "bias": np.zeros(self.filters, np.float32)}

    def build(self, b, xs, W, batch, ctx):
        c, L = self.in_shape
        oc, ol = self.out_shape
        p = self.kernel_size // 2 if self.padding == "same" else 0
        x = b.cont(lib.ggml_permute(b.ctx, xs[0], 1, 0, 2, 3))            # [C, L, N] -> [L, C, N]
        col = lib.ggml_im2col(b.ctx, W["kernel"], x, self.strides, 0, p, 0, 1, 0, False, lib.GGML_TYPE_F32)
        col = b.reshape(col, [c * self.kernel_size, ol * batch])           # [C*K, OL*N]
        k = b.reshape(W["kernel"], [self.kernel_size * c, oc])             # [K*C, OC]
        y = b.matmul(col, k)                                               # [OL*N, OC]
        y = b.reshape(y, [ol, batch, oc])
        y = b.cont(lib.ggml_permute(b.ctx, y, 1, 2, 0, 3))                 # [OC, OL, N]
        return b.activation(b.add(y, b.reshape(W["bias"], [oc, 1, 1])), self.activation)

    def config(self):
        return {"filters": self.filters, "kernel_size": self.kernel_size, "strides": self.strides,
                "padding": self.padding, "activation": self.activation}


class MaxPooling2D(Layer):
    """Max over pool_size windows, no padding; strides default to pool_size."""

    kind = "max_pooling_2d"

    def __init__(self, pool_size=(2, 2), strides=None, name=None, trainable=True):
        super().__init__(name, trainable)
        self.pool_size = _pair(pool_size, "pool_size")
        self.strides = self.pool_size if strides is None else _pair(strides, "strides")

    def infer(self, s):
        if len(s[0]) != 3:
            raise GGMLError(f"max_pooling_2d {self.name!r} needs image input, got {ggml_to_r_shape(s[0])}")
        w, h, c = s[0]
        (ph, pw), (sh, sw) = self.pool_size, self.strides
        if ph > h or pw > w:
            raise GGMLError(f"max_pooling_2d {self.name!r}: pool {self.pool_size} larger than {h}x{w}")
        return ((w - pw) // sw + 1, (h - ph) // sh + 1, c)

    def build(self, b, xs, W, batch, ctx):
        (ph, pw), (sh, sw) = self.pool_size, self.strides
        return lib.ggml_pool_2d(b.ctx, b.cont(xs[0]), lib.GGML_OP_POOL_MAX, pw, ph, sw, sh, 0.0, 0.0)

    def config(self):
        return {"pool_size": self.pool_size, "strides": self.strides}


class _GlobalPool(Layer):
    op = None

    def infer(self, s):
        if len(s[0]) != 3:
            raise GGMLError(f"{self.kind} {self.name!r} needs image input, got {ggml_to_r_shape(s[0])}")
        return (s[0][2],)

    def build(self, b, xs, W, batch, ctx):
        w, h, c = self.in_shape
        y = lib.ggml_pool_2d(b.ctx, b.cont(xs[0]), getattr(lib, self.op), w, h, w, h, 0.0, 0.0)
        return b.reshape(y, [c, batch])


class GlobalAveragePooling2D(_GlobalPool):
    """Mean over H and W per channel."""

    kind = "global_average_pooling_2d"
    op = "GGML_OP_POOL_AVG"


class GlobalMaxPooling2D(_GlobalPool):
    """Max over H and W per channel."""

    kind = "global_max_pooling_2d"
    op = "GGML_OP_POOL_MAX"


class BatchNorm(Layer):
    """ggmlR's `batch_norm` (mode="rms", the default): an RMS norm along ggml's first axis with
    learned per-feature (per-channel for images) scale and shift: no batch statistics, no
    running averages, so training and inference compute the same.

    mode="batch" is a true batch norm for flat inputs: in training, each feature is
    normalised with its batch mean and biased batch variance (gradients flow through both),
    and running averages are updated after every training batch,
    `running = (1 - momentum) * running + momentum * batch` (ggmlR's ag_batch_norm rule);
    inference uses the running averages."""

    kind = "batch_norm"
    has_weights = True

    def __init__(self, eps=1e-5, name=None, trainable=True, mode="rms", momentum=0.1):
        super().__init__(name, trainable)
        self.eps = float(eps)
        if not self.eps > 0:
            raise GGMLError(f"batch_norm eps must be > 0, got {eps}")
        if mode not in ("rms", "batch"):
            raise GGMLError(f"batch_norm mode must be 'rms' (ggmlR's) or 'batch', got {mode!r}")
        if not 0 <= float(momentum) <= 1:
            raise GGMLError(f"batch_norm momentum must be in [0, 1], got {momentum}")
        self.mode, self.momentum = mode, float(momentum)

    def infer(self, s):
        if self.mode == "batch" and len(s[0]) != 1:
            raise GGMLError(f"batch_norm {self.name!r}: mode='batch' needs flat inputs (add a flatten first)")
        return s[0]

    def _nf(self):
        return self.in_shape[2] if len(self.in_shape) == 3 else self.in_shape[0]

    def param_shapes(self):
        shapes = {"gamma": (self._nf(),), "beta": (self._nf(),)}
        if self.mode == "batch":
            shapes.update(running_mean=(self._nf(),), running_var=(self._nf(),))
        return shapes

    def init_weights(self, rng):
        n = self._nf()
        w = {"gamma": np.ones(n, np.float32), "beta": np.zeros(n, np.float32)}
        if self.mode == "batch":
            w.update(running_mean=np.zeros(n, np.float32), running_var=np.ones(n, np.float32))
        return w

    def tensors(self, b):
        """The layer's weights as tensors of builder `b` (ggml params when trainable)."""
        # running averages are state, never ggml params (the optimizer must not touch them)
        return {k: b.weight((id(self), k), v, self.trainable and k in ("gamma", "beta"))
                for k, v in self.weights.items()}

    def build(self, b, xs, W, batch, ctx):
        x = b.cont(xs[0])
        if self.mode == "batch":
            return self._build_batch(b, x, W, batch, ctx)
        y = lib.ggml_rms_norm(b.ctx, x, self.eps)
        if len(self.in_shape) == 3:
            g, be = b.reshape(W["gamma"], [1, 1, self._nf(), 1]), b.reshape(W["beta"], [1, 1, self._nf(), 1])
        elif len(self.in_shape) == 2:
            g, be = b.reshape(W["gamma"], [self._nf(), 1, 1]), b.reshape(W["beta"], [self._nf(), 1, 1])
        else:
            g, be = W["gamma"], W["beta"]
        return b.add(b.mul(y, g), be)

    def _build_batch(self, b, x, W, batch, ctx):
        c = b.ctx
        f = self._nf()
        if not b.training:
            inv = (1.0 / np.sqrt(self.weights["running_var"].astype(np.float64) + self.eps)).astype(np.float32)
            y = b.mul(b.sub(x, W["running_mean"]), b.const(inv))
            return b.add(b.mul(y, W["gamma"]), W["beta"])
        # batch means as an average pool over the batch axis ([F, N] -> [F, 1]): no transposes
        # (ggml's backward of a transpose hands non-contiguous gradients to ops that need
        # contiguous rows) and no MEAN (its backward only handles a scalar result)
        def batch_mean(t):
            return lib.ggml_pool_2d(c, t, lib.GGML_OP_POOL_AVG, 1, batch, 1, batch, 0.0, 0.0)
        mean = batch_mean(x)                                            # [F, 1]
        xc = b.sub(x, mean)
        var = batch_mean(lib.ggml_sqr(c, xc))                          # biased, [F, 1]
        # 1/sqrt(var + eps) as exp(-log(var + eps)/2): ggml's DIV backward cannot broadcast
        inv_std = lib.ggml_exp(c, b.scale(lib.ggml_log(c, b.scale(var, 1.0, self.eps)), -0.5))
        y = b.mul(xc, inv_std)
        # the batch statistics are copied into the weight buffer, where the per-batch callback
        # reads them; the copies are tied into the loss with weight 0 so ggml_opt computes them
        stats = [b.new_w([f]), b.new_w([f])]
        copies = [lib.ggml_cpy(c, b.reshape(t, [f]), s) for t, s in ((mean, stats[0]), (var, stats[1]))]
        ctx.setdefault("bn_stats", []).append((self, stats[0], stats[1]))
        ctx.setdefault("anchors", []).extend(copies)
        return b.add(b.mul(y, W["gamma"]), W["beta"])

    def update_running(self, mean, var):
        """Fold one training batch's statistics into the running averages."""
        m = self.momentum
        self.weights["running_mean"] = ((1 - m) * self.weights["running_mean"] + m * mean).astype(np.float32)
        self.weights["running_var"] = ((1 - m) * self.weights["running_var"] + m * var).astype(np.float32)

    def config(self):
        cfg = {"eps": self.eps}
        if self.mode != "rms":
            cfg.update(mode=self.mode, momentum=self.momentum)
        return cfg


class Dropout(Layer):
    """ggmlR's dropout: inference is the identity; training multiplies by (1 - rate), except a
    Functional `stochastic=True` layer, which applies a 0/1 mask drawn once per epoch, scaled by
    1/(1 - rate)."""

    kind = "dropout"

    def __init__(self, rate, stochastic=False, name=None, trainable=False):
        super().__init__(name, trainable)
        self.rate = float(rate)
        if not 0 <= self.rate < 1:
            raise GGMLError(f"dropout rate must be in [0, 1), got {rate}")
        self.stochastic = bool(stochastic)

    def build(self, b, xs, W, batch, ctx):
        x = xs[0]
        if not b.training or self.rate == 0:
            return x
        if self.stochastic and ctx.get("functional"):
            mask = b.zeros(list(self.in_shape) + [batch])
            ctx.setdefault("masks", []).append((self, mask))
            return b.scale(b.mul(b.cont(x), mask), 1.0 / (1.0 - self.rate))
        return b.scale(x, 1.0 - self.rate)

    def config(self):
        return {"rate": self.rate, "stochastic": self.stochastic}


class Embedding(Layer):
    """Token ids (T,) (int, 0-based) -> vectors (dim, T); weight ne [dim, vocab]."""

    kind = "embedding"
    has_weights = True
    int_input = True

    def __init__(self, vocab_size, dim, name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.vocab_size, self.dim = int(vocab_size), int(dim)

    def infer(self, s):
        if len(s[0]) != 1:
            raise GGMLError(f"embedding {self.name!r} needs token ids of shape (T,), got {s[0]}")
        return (self.dim, s[0][0])

    def param_shapes(self):
        return {"weight": (self.vocab_size, self.dim)}

    def init_weights(self, rng):
        return {"weight": rng.uniform(-0.05, 0.05, (self.vocab_size, self.dim)).astype(np.float32)}

    def build(self, b, xs, W, batch, ctx):
        t = self.in_shape[0]
        ids = b.reshape(xs[0], [t * batch])
        ctx.setdefault("ids", []).append((ids, self.vocab_size))
        y = lib.ggml_get_rows(b.ctx, W["weight"], ids)                # [dim, T*N]
        return b.reshape(y, [self.dim, t, batch])

    def config(self):
        return {"vocab_size": self.vocab_size, "dim": self.dim}


class _Recurrent(Layer):
    has_weights = True

    def __init__(self, units, return_sequences=False, activation="tanh", recurrent_activation="sigmoid",
                 name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.units = int(units)
        self.return_sequences = bool(return_sequences)
        self.activation = _check_activation(activation)
        self.recurrent_activation = _check_activation(recurrent_activation)
        for a in (self.activation, self.recurrent_activation):
            if a == "softmax":
                raise GGMLError("softmax is not a recurrent activation")

    def infer(self, s):
        if len(s[0]) != 2:
            raise GGMLError(f"{self.kind} {self.name!r} needs sequence input (T, C), got {ggml_to_r_shape(s[0])}")
        return (self.units, s[0][1]) if self.return_sequences else (self.units,)

    def init_weights(self, rng):
        return {k: (np.zeros(s, np.float32) if k.startswith("b_") else _zigzag(s))
                for k, s in self.param_shapes().items()}

    def _steps(self, b, x, batch):
        c, t = self.in_shape
        x = b.cont(lib.ggml_permute(b.ctx, x, 0, 2, 1, 3))  # [C, T, N] -> [C, N, T]
        # each step copied out (GPU backends refuse matmul operands at unaligned offsets)
        return [lib.ggml_cont(b.ctx, lib.ggml_view_2d(b.ctx, x, c, batch, x.nb[1], i * x.nb[2])) for i in range(t)]

    def _gate(self, b, g, k, batch):
        u = self.units
        return lib.ggml_cont(b.ctx, lib.ggml_view_2d(b.ctx, g, u, batch, g.nb[1], k * u * g.nb[0]))

    def _finish(self, b, hs, batch):
        if not self.return_sequences:
            return hs[-1]
        return b.reshape(b.concat([b.reshape(h, [self.units, 1, batch]) for h in hs], 1), [self.units, len(hs), batch])

    def config(self):
        return {"units": self.units, "return_sequences": self.return_sequences, "activation": self.activation,
                "recurrent_activation": self.recurrent_activation}


class LSTM(_Recurrent):
    """LSTM with gate blocks i, f, g, o (ggmlR's layout); h0 = c0 = 0."""

    kind = "lstm"

    def param_shapes(self):
        c, u = self.in_shape[0], self.units
        return {"W_gates": (4 * u, c), "U_gates": (4 * u, u), "b_gates": (4 * u,)}

    def build(self, b, xs, W, batch, ctx):
        h = cell = None
        hs = []
        for xt in self._steps(b, xs[0], batch):
            g = b.add(b.matmul(W["W_gates"], xt), W["b_gates"])
            if h is not None:
                g = b.add(g, b.matmul(W["U_gates"], h))
            i = b.activation(self._gate(b, g, 0, batch), self.recurrent_activation)
            f = b.activation(self._gate(b, g, 1, batch), self.recurrent_activation)
            cand = b.activation(self._gate(b, g, 2, batch), self.activation)
            o = b.activation(self._gate(b, g, 3, batch), self.recurrent_activation)
            cell = b.mul(i, cand) if cell is None else b.add(b.mul(f, cell), b.mul(i, cand))
            h = b.mul(o, b.activation(cell, self.activation))
            hs.append(h)
        return self._finish(b, hs, batch)


class GRU(_Recurrent):
    """ggmlR's GRU: z, r gates; h = h + z (n - h) (z weights the new state); h0 = 0."""

    kind = "gru"

    def param_shapes(self):
        c, u = self.in_shape[0], self.units
        return {"W_zh": (2 * u, c), "U_zh": (2 * u, u), "b_zh": (2 * u,),
                "W_n": (u, c), "U_n": (u, u), "b_n": (u,)}

    def build(self, b, xs, W, batch, ctx):
        h = None
        hs = []
        for xt in self._steps(b, xs[0], batch):
            zr = b.add(b.matmul(W["W_zh"], xt), W["b_zh"])
            if h is not None:
                zr = b.add(zr, b.matmul(W["U_zh"], h))
            z = b.activation(self._gate(b, zr, 0, batch), self.recurrent_activation)
            r = b.activation(self._gate(b, zr, 1, batch), self.recurrent_activation)
            n = b.add(b.matmul(W["W_n"], xt), W["b_n"])
            if h is not None:
                n = b.add(n, b.matmul(W["U_n"], b.mul(r, h)))
            n = b.activation(n, self.activation)
            h = b.mul(z, n) if h is None else b.add(h, b.mul(z, b.sub(n, h)))
            hs.append(h)
        return self._finish(b, hs, batch)


class Add(Layer):
    """Element-wise sum of two or more same-shape inputs."""

    kind = "add"

    def infer(self, s):
        if len(s) < 2 or any(x != s[0] for x in s):
            raise GGMLError(f"add {self.name!r}: shape mismatch, it needs two or more inputs of one shape, got "
                            f"{[ggml_to_r_shape(x) for x in s]}")
        return s[0]

    def build(self, b, xs, W, batch, ctx):
        y = xs[0]
        for x in xs[1:]:
            y = b.add(y, x)
        return y


class Concatenate(Layer):
    """Concatenation along a 0-based ggml axis (ggmlR's convention; negative counts from the end)."""

    kind = "concatenate"

    def __init__(self, axis=0, name=None, trainable=True):
        super().__init__(name, trainable)
        self.axis = int(axis)

    def _axis(self, nd):
        a = self.axis + nd if self.axis < 0 else self.axis
        if not 0 <= a < nd:
            raise GGMLError(f"concatenate {self.name!r}: axis {self.axis} out of range for {nd}-d samples")
        return a

    def infer(self, s):
        nd = len(s[0])
        a = self._axis(nd)
        if len(s) < 2 or any(len(x) != nd or any(x[i] != s[0][i] for i in range(nd) if i != a) for x in s):
            raise GGMLError(f"concatenate {self.name!r}: shapes {s} differ off axis {self.axis}")
        out = list(s[0])
        out[a] = sum(x[a] for x in s)
        return tuple(out)

    def build(self, b, xs, W, batch, ctx):
        return b.concat(xs, self._axis(len(self.in_shapes_all[0])))

    def setup(self, in_shapes, rng):
        """Remember every input shape (the axis check needs them all), then the usual setup."""
        self.in_shapes_all = [tuple(s) for s in in_shapes]
        return super().setup(in_shapes, rng)

    def config(self):
        return {"axis": self.axis}


LAYER_TYPES = {c.kind: c for c in (Dense, Flatten, Conv2D, Conv1D, MaxPooling2D, GlobalAveragePooling2D,
                                   GlobalMaxPooling2D, BatchNorm, Dropout, Embedding, LSTM, GRU, Add, Concatenate)}


def check_trainable_activations(layer):
    for a in (getattr(layer, "activation", None), getattr(layer, "recurrent_activation", None)):
        if a in NO_BACKWARD:
            raise GGMLError(f"layer {layer.name!r}: ggml has no backward for {a!r}, so this model "
                            "cannot be trained (it can predict)")
