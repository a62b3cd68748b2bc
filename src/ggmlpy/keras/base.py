"""The layer base class and the shape and initialiser helpers every layer uses.

Shapes here are ggml shapes of ONE sample (ne without the batch axis): flat features `(F,)`,
sequences `(C, T)`, images `(W, H, C)`, token ids `(T,)`. Users give R/Keras shapes
(`(T, C)`, `(H, W, C)`); `r_to_ggml_shape` converts. Weights are numpy float32 arrays
whose shape is the ggml ne reversed (so `arr.ravel()` is ggml memory order).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..core.types import _count as count
from ..errors import GGMLError
from .builder import ACTIVATIONS

_counters: dict[str, int] = {}
_layer_ids = itertools.count(1)  # next() on a count is atomic under the GIL: ids are unique per process


def _next_layer_id() -> str:
    return f"layer_{next(_layer_ids)}"


class LayerConfig(dict):
    """ggmlR's layer$config: the constructor settings as a dict (`layer.config["units"]`).
    Calling it (`layer.config()`) gives the same settings as a plain dict, for code that reads
    config as a method."""

    def __call__(self) -> dict:
        return dict(self)


def r_to_ggml_shape(shape) -> tuple:
    """An R/Keras per-sample shape to ggml order: (F,), (T, C) -> (C, T), (H, W, C) -> (W, H, C)."""
    s = tuple(count(v, "input_shape") for v in np.atleast_1d(shape))
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
    v = [count(a, what) for a in np.atleast_1d(v)]
    if len(v) == 1:
        v = v * 2
    if len(v) != 2:
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
    """Base layer: a name, a trainable flag, weights (numpy) and a config.

    `layer_id` ("layer_<n>", unique in the process) is ggmlR's sharing key: every node a layer
    object is applied to (ggml_apply, or layers merged by name in ggml_model) shows its layer_id,
    and those applications share its weights."""

    kind = "layer"
    has_weights = False

    def __init__(self, name=None, trainable=True, input_shape=None):
        self.auto_named = name is None
        if name is None:
            _counters[self.kind] = _counters.get(self.kind, 0) + 1
            name = f"{self.kind}_{_counters[self.kind]}"
        self.name = str(name)
        self.layer_id = _next_layer_id()
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

    def _config(self) -> dict:
        """The constructor settings, enough to rebuild the layer (what `config` shows)."""
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
    def config(self) -> LayerConfig:
        """ggmlR's layer$config: the constructor settings (a fresh dict on each read)."""
        return LayerConfig(self._config())

    @property
    def type(self) -> str:
        """ggmlR's Sequential layer$type (the kind: "dense", "conv_2d", ...)."""
        return self.kind

    @property
    def node_type(self) -> str:
        """ggmlR's layer-object layer$node_type: the kind, as the nodes it is applied to show it."""
        return self.kind

    def __init_subclass__(cls, **kwargs):
        """A subclass may define `config` as a method returning its settings: that method becomes its
        `_config`, and `config` stays the dict attribute every layer has."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("config")
        if callable(own) and not isinstance(own, property):
            cls._config = own
            cls.config = Layer.config

    def __setstate__(self, state):
        """A copied or unpickled layer is a different layer (its own weights): a new layer_id."""
        self.__dict__.update(state)
        self.layer_id = _next_layer_id()

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
