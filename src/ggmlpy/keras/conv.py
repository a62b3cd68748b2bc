"""Convolution and pooling layers over images (W, H, C) and sequences (C, L)."""
from __future__ import annotations

import math

import numpy as np

from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from .base import Layer, _check_activation, _pair, count, ggml_to_r_shape


def _kernel_shape(b, k):
    """What ggml_im2col takes as its kernel operand: a [KW, KH, C] tensor of the weight buffer
    that is never read, not the trained kernel. im2col reads only its shape, and ggml's backward
    has no gradient rule for it; given the kernel, ggml's backward would check, on reaching
    im2col, that the kernel already has a gradient from a node later in the graph (and crash
    when the product that gives it one comes earlier)."""
    return b.new_w([int(k.ne[0]), int(k.ne[1]), int(k.ne[2]), 1])


class Conv2D(Layer):
    """2-d cross-correlation over images (W, H, C); kernel ne [KW, KH, C, filters], He uniform."""

    kind = "conv_2d"
    has_weights = True

    def __init__(self, filters, kernel_size, activation=None, strides=(1, 1), padding="valid",
                 name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.filters = count(filters, "conv_2d: filters")
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
            x = checked_lib.ggml_acc(b.ctx, zeros, x, zeros.nb[1], zeros.nb[2], zeros.nb[3], pl * zeros.nb[0] + pt * zeros.nb[1])
            ph = pw = 0
        else:
            ph, pw = pt, pl
        # ggml_conv_2d's im2col is F16 in this ggml; ggmlR's (and ours) stays F32
        k = W["kernel"]
        col = checked_lib.ggml_im2col(b.ctx, _kernel_shape(b, k), x, sw, sh, pw, ph, 1, 1, True, checked_lib.GGML_TYPE_F32)
        n_col = int(col.ne[1] * col.ne[2] * col.ne[3])
        y = b.matmul(b.reshape(col, [int(col.ne[0]), n_col]), b.reshape(k, [int(k.ne[0] * k.ne[1] * k.ne[2]), int(k.ne[3])]))
        # bias and activation on the [OW*OH*N, OC] product, before the one permute to [OW, OH, OC, N]
        # (which then moves whole image rows). The bias [1, OC] is added as the product of a row
        # of ones and the bias row: ggml's kernels broadcast along ne0 one element per call (the
        # add, and the sum in the backward pass), a product's rule makes the sum a product too
        ones = b.const(np.ones((n_col, 1), np.float32))
        y = b.add(y, b.matmul(ones, b.reshape(W["bias"], [1, self.filters])))
        if self.activation != "softmax":   # element-wise: before the permute is as good as after
            y = b.activation(y, self.activation)
        y = b.reshape(y, [int(col.ne[1]), int(col.ne[2]), int(col.ne[3]), int(k.ne[3])])
        y = b.cont(checked_lib.ggml_permute(b.ctx, y, 0, 1, 3, 2))
        return b.activation(y, "softmax") if self.activation == "softmax" else y

    def _config(self):
        return {"filters": self.filters, "kernel_size": self.kernel_size, "strides": self.strides,
                "padding": self.padding, "activation": self.activation}


class Conv1D(Layer):
    """1-d convolution over a sequence (C, L) -> (filters, L_out); kernel ne [C, K, filters]
    (kernel[c, k, o] multiplies x[c, l*s + k - p]), He uniform."""

    kind = "conv_1d"
    has_weights = True

    def __init__(self, filters, kernel_size, activation=None, strides=1, padding="valid",
                 name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.filters = count(filters, "conv_1d: filters")
        self.kernel_size = count(np.atleast_1d(kernel_size)[0], "conv_1d: kernel_size")
        self.strides = count(np.atleast_1d(strides)[0], "conv_1d: strides")
        if padding not in ("valid", "same"):
            raise GGMLError(f"padding must be 'valid' or 'same', got {padding!r}")
        self.padding = padding
        self.activation = _check_activation(activation)

    def _pads(self, L):
        """(left, right) zero padding. "same": ggmlR's floor(K/2) on both sides for odd kernels;
        for an even kernel Keras'/TensorFlow's: ceil(L/s) outputs, (total)//2 before and the
        rest after (for stride 1, (K-1)//2 before and K//2 after)."""
        k, st = self.kernel_size, self.strides
        if self.padding == "valid":
            return 0, 0
        if k % 2:
            return k // 2, k // 2
        total = max((-(-L // st) - 1) * st + k - L, 0)
        return total // 2, total - total // 2

    def infer(self, s):
        if len(s[0]) != 2:
            raise GGMLError(f"conv_1d {self.name!r} needs sequence input (L, C), got {ggml_to_r_shape(s[0])}")
        c, L = s[0]
        pl, pr = self._pads(L)
        ol = (L + pl + pr - self.kernel_size) // self.strides + 1
        if ol < 1:
            raise GGMLError(f"conv_1d {self.name!r}: kernel {self.kernel_size} longer than the sequence ({L})")
        return (self.filters, ol)

    def param_shapes(self):
        return {"kernel": (self.filters, self.kernel_size, self.in_shape[0]), "bias": (self.filters,)}

    def init_weights(self, rng):
        c = self.in_shape[0]
        lim = math.sqrt(6.0 / (self.kernel_size * c))
        return {"kernel": rng.uniform(-lim, lim, self.param_shapes()["kernel"]).astype(np.float32),
                "bias": np.zeros(self.filters, np.float32)}

    def build(self, b, xs, W, batch, ctx):
        # The sequence [C, L, N] is a one-channel image of width C: a (C x K) kernel slides along
        # L only. The input is not permuted: ggml's backward of a permute hands non-contiguous
        # gradients to the layer below, and several ops' backward refuse them (an abort).
        c, L = self.in_shape
        oc, ol = self.out_shape
        pl, pr = self._pads(L)
        x = b.reshape(xs[0], [c, L, 1, batch])
        p = pl
        if pl != pr:   # asymmetric (even kernel, "same"): pad explicitly, an acc into zeros has a backward
            zeros = b.zeros([c, L + pl + pr, 1, batch])
            x = checked_lib.ggml_acc(b.ctx, zeros, x, zeros.nb[1], zeros.nb[2], zeros.nb[3], pl * zeros.nb[1])
            p = 0
        k4 = b.reshape(W["kernel"], [c, self.kernel_size, 1, oc])
        col = checked_lib.ggml_im2col(b.ctx, _kernel_shape(b, k4), x, 1, self.strides, 0, p, 1, 1, True, checked_lib.GGML_TYPE_F32)
        col = b.reshape(col, [c * self.kernel_size, ol * batch])            # [C*K, OL*N]
        # [OC, OL*N], the layer's output layout: no permute, and the bias adds along rows
        y = b.matmul(b.reshape(k4, [c * self.kernel_size, oc]), col)
        y = b.add(y, b.reshape(W["bias"], [oc, 1]))
        y = b.reshape(y, [oc, ol, batch])
        return b.activation(y, self.activation)

    def _config(self):
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
        return checked_lib.ggml_pool_2d(b.ctx, b.cont(xs[0]), checked_lib.GGML_OP_POOL_MAX, pw, ph, sw, sh, 0.0, 0.0)

    def _config(self):
        return {"pool_size": self.pool_size, "strides": self.strides}


class _GlobalPool(Layer):
    op = None

    def infer(self, s):
        if len(s[0]) != 3:
            raise GGMLError(f"{self.kind} {self.name!r} needs image input, got {ggml_to_r_shape(s[0])}")
        return (s[0][2],)

    def build(self, b, xs, W, batch, ctx):
        w, h, c = self.in_shape
        y = checked_lib.ggml_pool_2d(b.ctx, b.cont(xs[0]), getattr(checked_lib, self.op), w, h, w, h, 0.0, 0.0)
        return b.reshape(y, [c, batch])


class GlobalAveragePooling2D(_GlobalPool):
    """Mean over H and W per channel."""

    kind = "global_average_pooling_2d"
    op = "GGML_OP_POOL_AVG"


class GlobalMaxPooling2D(_GlobalPool):
    """Max over H and W per channel."""

    kind = "global_max_pooling_2d"
    op = "GGML_OP_POOL_MAX"
