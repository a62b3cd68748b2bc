"""Recurrent layers (ggmlR's LSTM and GRU), unrolled over the time steps in one graph."""
from __future__ import annotations

import numpy as np

from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from .base import Layer, _check_activation, _zigzag, count, ggml_to_r_shape


class _Recurrent(Layer):
    has_weights = True

    def __init__(self, units, return_sequences=False, activation="tanh", recurrent_activation="sigmoid",
                 name=None, trainable=True, input_shape=None):
        super().__init__(name, trainable, input_shape)
        self.units = count(units, f"{self.kind}: units")
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
        """x_t = x[:, t, :] for every t, each copied out of the strided view: no permute (ggml's
        backward of a permute hands non-contiguous gradients to the layer below, which some ops'
        backward refuse), and no unaligned matmul operand (GPU backends refuse those)."""
        c, t = self.in_shape
        b.check_room(2 * t + 64)
        x = b.cont(x)
        return [checked_lib.ggml_cont(b.ctx, checked_lib.ggml_view_2d(b.ctx, x, c, batch, x.nb[2], i * x.nb[1])) for i in range(t)]

    def _gate(self, b, g, k, batch):
        u = self.units
        return checked_lib.ggml_cont(b.ctx, checked_lib.ggml_view_2d(b.ctx, g, u, batch, g.nb[1], k * u * g.nb[0]))

    def _finish(self, b, hs, batch):
        if not self.return_sequences:
            return hs[-1]
        b.check_room(4 * len(hs) + 64)
        return b.reshape(b.concat([b.reshape(h, [self.units, 1, batch]) for h in hs], 1), [self.units, len(hs), batch])

    def _config(self):
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
            b.check_room(128)   # a step's tensors: GGMLError, not ggml's abort, past the context
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
            b.check_room(128)   # a step's tensors: GGMLError, not ggml's abort, past the context
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
