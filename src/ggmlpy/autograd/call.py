"""What a rule sees of one application of its primitive, and how it applies primitives itself.

One rule table (rules.py) serves every path that differentiates: eager backward (engine.walk),
forward mode (forward_ad.propagate) and compiled graphs (graph_backward.emit_backward). What differs
between them is only how a rule's own primitives are applied, so the caller hands that in with
the call, as `apply`: engine.apply on the eager paths, a graph builder's emit when compiling.
"""
from __future__ import annotations

SAVED_KEY = tuple(f"x{i}" for i in range(8))  # c.x(i) reads saved["x{i}"], as the tape's nodes keep them


class Call:
    """`x(i)` is input i (on the tape, only those the rule declares in `saves`), `out` the output (if
    `saves_out`), `params` the primitive's parameters, `in_shapes` the inputs' shapes, and
    `apply(op, *inputs, **params)` applies a primitive the caller's way. The helpers below are
    primitives too, so whatever a rule computes can be differentiated again."""

    __slots__ = ("apply", "saved", "params", "in_shapes")

    def __init__(self, apply, saved: dict, params: dict, in_shapes: tuple):
        self.apply, self.saved, self.params, self.in_shapes = apply, saved, params, in_shapes

    @classmethod
    def of(cls, apply, inputs, out, params: dict) -> Call:
        """A call that sees every input and the output (forward mode, which keeps no snapshots)."""
        saved = dict(zip(SAVED_KEY, inputs))
        saved["out"] = out
        return cls(apply, saved, params, tuple(x.shape for x in inputs))

    def x(self, i: int):
        return self.saved[SAVED_KEY[i]]

    @property
    def out(self):
        return self.saved["out"]

    # -- small helpers in terms of primitives ------------------------------------------------------------
    def unbroadcast(self, g, shape):
        """Sum a gradient down to `shape` (the adjoint of broadcasting)."""
        if g is None or g.shape == tuple(shape):
            return g
        return self.apply("unbroadcast", g, shape=tuple(shape))

    def bcast(self, t, shape):
        if t is None or t.shape == tuple(shape):
            return t
        return self.apply("broadcast", t, shape=tuple(shape))

    def add(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        if a.shape != b.shape and not covers(a.shape, b.shape):
            a, b = b, a
        return self.apply("add", a, b)

    def mul(self, a, b):
        return self.apply("mul", a, b)

    def scale(self, a, s):
        return self.apply("scale", a, s=float(s))

    def neg(self, a):
        return self.apply("neg", a)

    def tangent_sum(self, *terms):
        out = None
        for t in terms:
            out = self.add(out, t)
        return out


def covers(big, small) -> bool:
    """Every dim of `big` at least `small`'s (shapes of different lengths padded with 1s)."""
    n = max(len(big), len(small))
    return all(a >= b for a, b in zip(tuple(big) + (1,) * (n - len(big)), tuple(small) + (1,) * (n - len(small))))
