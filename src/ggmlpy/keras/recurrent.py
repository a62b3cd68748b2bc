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

    def _project(self, b, W, names, xt, h):
        """W x_t + bias, plus U h from the second step on (the first state is zero): names are the
        three weights' keys (W, U, bias)."""
        w, u, bias = names
        z = b.add(b.matmul(W[w], xt), W[bias])
        return z if h is None else b.add(z, b.matmul(W[u], h))

    def _gate(self, b, g, k, batch, activation):
        """The k-th block of `units` rows of the stacked gates g, activated."""
        u = self.units
        block = checked_lib.ggml_cont(b.ctx, checked_lib.ggml_view_2d(b.ctx, g, u, batch, g.nb[1], k * u * g.nb[0]))
        return b.activation(block, activation)

    def build(self, b, xs, W, batch, ctx):
        state, hs = None, []
        for xt in self._steps(b, xs[0], batch):
            b.check_room(128)   # a step's tensors: GGMLError, not ggml's abort, past the context
            h, state = self._step(b, W, xt, state, batch)
            hs.append(h)
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

    def _step(self, b, W, xt, state, batch):
        """One time step: (h, (h, cell)) from the previous (h, cell), None at the first step."""
        h, cell = state or (None, None)
        g = self._project(b, W, ("W_gates", "U_gates", "b_gates"), xt, h)
        i = self._gate(b, g, 0, batch, self.recurrent_activation)
        f = self._gate(b, g, 1, batch, self.recurrent_activation)
        cand = self._gate(b, g, 2, batch, self.activation)
        o = self._gate(b, g, 3, batch, self.recurrent_activation)
        cell = b.mul(i, cand) if cell is None else b.add(b.mul(f, cell), b.mul(i, cand))
        h = b.mul(o, b.activation(cell, self.activation))
        return h, (h, cell)


class GRU(_Recurrent):
    """ggmlR's GRU: z, r gates; h = h + z (n - h) (z weights the new state); h0 = 0."""

    kind = "gru"

    def param_shapes(self):
        c, u = self.in_shape[0], self.units
        return {"W_zh": (2 * u, c), "U_zh": (2 * u, u), "b_zh": (2 * u,),
                "W_n": (u, c), "U_n": (u, u), "b_n": (u,)}

    def _step(self, b, W, xt, h, batch):
        """One time step: (h, h) from the previous h, None at the first step."""
        zr = self._project(b, W, ("W_zh", "U_zh", "b_zh"), xt, h)
        z = self._gate(b, zr, 0, batch, self.recurrent_activation)
        r = self._gate(b, zr, 1, batch, self.recurrent_activation)
        n = self._project(b, W, ("W_n", "U_n", "b_n"), xt, None if h is None else b.mul(r, h))
        n = b.activation(n, self.activation)
        h = b.mul(z, n) if h is None else b.add(h, b.mul(z, b.sub(n, h)))
        return h, h
