"""Layer objects of the Keras-like API: shape inference, ggmlR's initialisers, ggml graph building.

Shapes here are ggml shapes of ONE sample (ne without the batch axis): flat features `(F,)`,
sequences `(C, T)`, images `(W, H, C)`, token ids `(T,)`. This module holds the dense,
normalisation, dropout, embedding and merge layers and the registry of every kind; the
convolutions live in conv.py, the recurrent layers in recurrent.py, the base class in base.py.
"""
from __future__ import annotations

import numpy as np

from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from .base import (Layer, _check_activation, _glorot, count, ggml_to_r_shape,  # noqa: F401
                   r_to_ggml_shape)
from .builder import NO_BACKWARD
from .conv import Conv1D, Conv2D, GlobalAveragePooling2D, GlobalMaxPooling2D, MaxPooling2D  # noqa: F401
from .recurrent import GRU, LSTM  # noqa: F401


class Dense(Layer):
    """Fully connected: act(W^T x + b); weight ne [in, units], Glorot uniform; bias zeros."""

    kind = "dense"
    has_weights = True

    def __init__(self, units, activation=None, name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.units = count(units, "dense: units")
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
        if id(self) in ctx.get("logits_of", ()) and self.activation == "softmax":
            return y  # ggml's cross-entropy applies the log-softmax itself (softmax_ce="exact")
        return b.activation(y, self.activation)

    def _config(self):
        return {"units": self.units, "activation": self.activation}


class Flatten(Layer):
    """Each sample to a flat vector in ggml order."""

    kind = "flatten"

    def infer(self, s):
        return (int(np.prod(s[0])),)

    def build(self, b, xs, W, batch, ctx):
        return b.reshape(xs[0], [self.out_shape[0], batch])


class BatchNorm(Layer):
    """ggmlR's `batch_norm` (mode="rms", the default): an RMS norm along ggml's first axis with
    learned per-feature (per-channel for images) scale and shift: no batch statistics, no
    running averages, so training and inference compute the same.

    mode="batch" is a true batch norm for flat and image inputs: in training, each feature
    (channel, for images: over the samples and H x W) is normalised with its batch mean and
    biased batch variance (gradients flow through both),
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
        if self.mode == "batch" and len(s[0]) not in (1, 3):
            raise GGMLError(f"batch_norm {self.name!r}: mode='batch' needs flat or image inputs")
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
        y = checked_lib.ggml_rms_norm(b.ctx, x, self.eps)
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
        image = len(self.in_shape) == 3
        shape = [1, 1, f, 1] if image else [f, 1]   # statistics broadcast over the samples

        def per_feature(t):
            return b.reshape(t, shape)
        if not b.training:
            inv = (1.0 / np.sqrt(self.weights["running_var"].astype(np.float64) + self.eps)).astype(np.float32)
            y = b.mul(b.sub(x, per_feature(W["running_mean"])), per_feature(b.const(inv)))
            return b.add(b.mul(y, per_feature(W["gamma"])), per_feature(W["beta"]))

        # Means by average pooling, which has a backward and needs no transposes (ggml's backward
        # of a transpose hands non-contiguous gradients to ops that need contiguous rows; its
        # MEAN backward only handles a scalar): flat [F, N] pools over N; images [W, H, C, N]
        # pool over W x H, then over N (equal group sizes: the mean of means is the mean).
        def batch_mean(t):
            if image:
                w, h = self.in_shape[0], self.in_shape[1]
                t = b.reshape(checked_lib.ggml_pool_2d(c, t, checked_lib.GGML_OP_POOL_AVG, w, h, w, h, 0.0, 0.0), [f, batch])
            return per_feature(checked_lib.ggml_pool_2d(c, t, checked_lib.GGML_OP_POOL_AVG, 1, batch, 1, batch, 0.0, 0.0))
        mean = batch_mean(x)
        xc = b.sub(x, mean)
        var = batch_mean(checked_lib.ggml_sqr(c, xc))                          # biased
        # 1/sqrt(var + eps) as exp(-log(var + eps)/2): ggml's DIV backward cannot broadcast
        inv_std = checked_lib.ggml_exp(c, b.scale(checked_lib.ggml_log(c, b.scale(var, 1.0, self.eps)), -0.5))
        y = b.mul(xc, inv_std)
        # the batch statistics are copied into the weight buffer, where the per-batch callback
        # reads them; the copies are tied into the loss with weight 0 so ggml_opt computes them
        stats = [b.new_w([f]), b.new_w([f])]
        copies = [checked_lib.ggml_cpy(c, b.reshape(t, [f]), s) for t, s in ((mean, stats[0]), (var, stats[1]))]
        ctx.setdefault("bn_stats", []).append((self, stats[0], stats[1]))
        ctx.setdefault("anchors", []).extend(copies)
        return b.add(b.mul(y, per_feature(W["gamma"])), per_feature(W["beta"]))

    def update_running(self, mean, var):
        """Fold one training batch's statistics into the running averages."""
        m = self.momentum
        self.weights["running_mean"] = ((1 - m) * self.weights["running_mean"] + m * mean).astype(np.float32)
        self.weights["running_var"] = ((1 - m) * self.weights["running_var"] + m * var).astype(np.float32)

    def _config(self):
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

    def _config(self):
        return {"rate": self.rate, "stochastic": self.stochastic}


class Embedding(Layer):
    """Token ids (T,) (int, 0-based) -> vectors (dim, T); weight ne [dim, vocab]."""

    kind = "embedding"
    has_weights = True
    int_input = True

    def __init__(self, vocab_size, dim, name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.vocab_size, self.dim = count(vocab_size, "embedding: vocab_size"), count(dim, "embedding: dim")

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
        y = checked_lib.ggml_get_rows(b.ctx, W["weight"], ids)                # [dim, T*N]
        return b.reshape(y, [self.dim, t, batch])

    def _config(self):
        return {"vocab_size": self.vocab_size, "dim": self.dim}


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

    def _config(self):
        return {"axis": self.axis}


LAYER_TYPES = {c.kind: c for c in (Dense, Flatten, Conv2D, Conv1D, MaxPooling2D, GlobalAveragePooling2D,
                                   GlobalMaxPooling2D, BatchNorm, Dropout, Embedding, LSTM, GRU, Add, Concatenate)}


def check_trainable_activations(layer):
    for a in (getattr(layer, "activation", None), getattr(layer, "recurrent_activation", None)):
        if a in NO_BACKWARD:
            raise GGMLError(f"layer {layer.name!r}: ggml has no backward for {a!r}, so this model "
                            "cannot be trained (it can predict)")
