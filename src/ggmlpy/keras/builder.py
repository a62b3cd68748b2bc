"""Graph building for the Keras-like models: ggml ops on raw tensor pointers.

A `KerasGraphBuilder` holds the graph's weights, constants and input (graph.Weights: allocated in one
backend buffer once the graph is built) and a compute context for the graph's intermediates
(graph.GraphContext, placed by the scheduler), sized by graph/, which raises GraphFull before
ggml would run out of room. In training mode every non-linearity whose ggml op has no backward
in the pinned ggml (sigmoid, tanh, concat) is built from ops that have one, so ggml's own
`ggml_build_backward_expand` can differentiate the whole graph.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from .._sigint import uninterruptible
from .. import kernels
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..graph import GraphContext, Weights

F32 = checked_lib.GGML_TYPE_F32
I32 = checked_lib.GGML_TYPE_I32
GRAPH_SIZE = 2048  # ggml's GGML_DEFAULT_GRAPH_SIZE
WEIGHT_TENSORS = 65536   # weights, constants and inputs of one model graph
COMPUTE_TENSORS = 65536  # the compute context's first size; a graph that outgrows it is built again ...
MAX_COMPUTE_TENSORS = 1 << 18  # ... in a bigger one, up to this (graphsize.MAX_GRAPH_NODES)
ROOM_PER_LAYER = 4096    # compute-context tensors kept free before each layer is built
T = TypeVar("T")

# activations ggml cannot differentiate in any form
NO_BACKWARD = {"gelu", "hardsigmoid", "hardswish"}
ACTIVATIONS = {None, "linear", "relu", "sigmoid", "tanh", "softmax", "silu", "gelu", "hardsigmoid", "hardswish"}


def ne_of(t) -> tuple:
    n = checked_lib.ggml_n_dims(t)
    return tuple(int(t.ne[i]) for i in range(max(n, 1)))


class KerasGraphBuilder:
    """One graph's tensors. `training` selects differentiable forms and dropout scaling.

    `restart()` starts a fresh compute context for building the same graph again (ggml_opt's
    caller-built graphs need one per step, and a graph that outgrew its context is built again
    in a bigger one): the weight-buffer tensors the layers create (constants, masks, statistics)
    are then handed back in creation order instead of made anew, so the rebuilt graph reads the
    same allocated tensors."""

    kernels = None  # ggmlpy.kernels, for a graph on ggml's CPU backend that ggml's backward never sees

    def __init__(self, training: bool, n_tensors: int = COMPUTE_TENSORS, graph_size: int = GRAPH_SIZE * 8):
        self.training = training
        self.n_tensors, self.graph_size = int(n_tensors), int(graph_size)
        self.weights = Weights(WEIGHT_TENSORS)
        self.gctx = self._compute_ctx()
        self.param_tensors = {}  # (owner, pname) -> tensor
        self.created = []   # weight-buffer tensors made by the layers, in order (replayed by restart)
        self.replay = None  # index into `created` while rebuilding

    @property
    def ctx(self):
        """The compute context (ggml's pointer)."""
        return self.gctx.ctx

    @property
    def ctx_w(self):
        """The weights' context (ggml's pointer)."""
        return self.weights.ctx

    def _compute_ctx(self) -> GraphContext:
        # ggml_opt_init builds its three static graphs (and ggml_opt_prepare_alloc a caller's) here
        return GraphContext(self.n_tensors, reserve_bytes=4 * checked_lib.ggml_graph_overhead_custom(self.graph_size, True))

    def restart(self, n_tensors: int = None, graph_size: int = None) -> None:
        """A fresh compute context (optionally resized); weight-buffer tensors are replayed."""
        self.gctx.free()
        self.n_tensors = int(n_tensors or self.n_tensors)
        self.graph_size = int(graph_size or self.graph_size)
        self.gctx = self._compute_ctx()
        self.replay = 0

    def building(self, build: Callable[[], T]) -> T:
        """build(), again in a compute context four times bigger while it raises GraphFull
        (graph.GraphContext.retrying), up to MAX_COMPUTE_TENSORS."""
        first = self.n_tensors

        def attempt(capacity: int) -> T:
            if capacity != self.n_tensors:
                self.restart(n_tensors=capacity)
            return build()
        attempts = 1
        while first * 4 ** attempts <= MAX_COMPUTE_TENSORS:
            attempts += 1
        return GraphContext.retrying(attempt, first, what="the model is too big to build: its graph",
                                     attempts=attempts)

    def room(self) -> int:
        """Tensors the compute context still holds (ggml aborts past its end)."""
        return self.gctx.headroom()

    def check_room(self, need: int = ROOM_PER_LAYER) -> None:
        """GraphFull, rather than ggml's abort, when the graph outgrows its context."""
        self.gctx.room(need)

    # -- tensors in the weight buffer ------------------------------------------------------------
    def weight(self, key, arr: np.ndarray, trainable: bool):
        """A weight tensor holding `arr` (numpy shape = ggml ne reversed); shared per key."""
        if key in self.param_tensors:
            return self.param_tensors[key]
        t = self._upload(arr, F32)
        if trainable:
            checked_lib.ggml_set_param(t)
        self.param_tensors[key] = t
        return t

    def const(self, arr: np.ndarray, dtype=F32):
        """A tensor of the weight buffer holding `arr` (uploaded once the buffer exists)."""
        if self.replay is not None:
            return self._replayed(list(np.shape(arr)[::-1]) or [1], dtype, arr)
        t = self._upload(arr, dtype)
        self.created.append(t)
        return t

    def _upload(self, arr, dtype):
        arr = np.ascontiguousarray(arr, dtype=np.float32 if dtype == F32 else np.int32)
        return self.weights.new(dtype, list(arr.shape[::-1]) or [1], arr)

    def new_w(self, ne, dtype=F32, record=True):
        """An (uninitialised) tensor of the weight buffer; `record=False` for tensors the caller
        keeps itself across restarts."""
        if record and self.replay is not None:
            return self._replayed(ne, dtype)
        t = self.weights.new(dtype, [int(v) for v in ne])
        if record:
            self.created.append(t)
        return t

    def _replayed(self, ne, dtype, values=None):
        if self.replay >= len(self.created):
            # a build that outgrew its context stopped part-way: before the weights are allocated
            # the rebuilt graph goes on making the tensors the first build did not reach
            if self.weights.buffer is not None:
                raise GGMLError("the rebuilt graph makes more weight-buffer tensors than the first build")
            self.replay = None
            t = self.const(values, dtype) if values is not None else self.new_w(ne, dtype)
            self.replay = len(self.created)
            return t
        t = self.created[self.replay]
        want = [int(v) for v in ne] + [1] * (4 - len(ne))
        if t.type != dtype or [int(t.ne[i]) for i in range(4)] != want:
            raise GGMLError("the rebuilt graph differs from the first build")
        self.replay += 1
        return t

    def zeros(self, ne):
        return self.const(np.zeros(tuple(ne)[::-1], np.float32))

    def allocate(self, backend) -> None:
        """Allocate the weights in one buffer of `backend` and write the values given."""
        self.weights.upload(backend)

    @uninterruptible
    def free(self) -> None:
        for part in ("gctx", "weights"):
            if getattr(self, part, None) is not None:
                getattr(self, part).free()

    # -- ops ---------------------------------------------------------------------------------------
    def cont(self, x):
        return x if checked_lib.ggml_is_contiguous(x) else checked_lib.ggml_cont(self.ctx, x)

    def reshape(self, x, ne):
        x = self.cont(x)
        ne = [int(v) for v in ne]
        f = {1: checked_lib.ggml_reshape_1d, 2: checked_lib.ggml_reshape_2d, 3: checked_lib.ggml_reshape_3d, 4: checked_lib.ggml_reshape_4d}[len(ne)]
        return f(self.ctx, x, *ne)

    def matmul(self, w, x):
        """w [K, M], x [K, N] -> [M, N]."""
        return checked_lib.ggml_mul_mat(self.ctx, w, x)

    def add(self, a, b):
        return checked_lib.ggml_add(self.ctx, a, b)

    def mul(self, a, b):
        return checked_lib.ggml_mul(self.ctx, a, b)

    def sub(self, a, b):
        # ggml's SUB backward does not reduce a broadcast b (its build aborts): a + (-b) does
        if not checked_lib.ggml_are_same_shape(a, b):
            return checked_lib.ggml_add(self.ctx, a, checked_lib.ggml_neg(self.ctx, b))
        return checked_lib.ggml_sub(self.ctx, a, b)

    def scale(self, a, s, bias=0.0):
        if bias:
            return checked_lib.ggml_scale_bias(self.ctx, a, float(s), float(bias))
        return checked_lib.ggml_scale(self.ctx, a, float(s))

    def sigmoid(self, x):
        if not self.training:
            return checked_lib.ggml_sigmoid(self.ctx, x)
        # 1/(1+e^-x) = exp(-softplus(-x)): every op here has a ggml backward, none overflows
        c = self.ctx
        return checked_lib.ggml_exp(c, checked_lib.ggml_neg(c, checked_lib.ggml_softplus(c, checked_lib.ggml_neg(c, x))))

    def tanh(self, x):
        if not self.training:
            return checked_lib.ggml_tanh(self.ctx, x)
        return self.scale(self.sigmoid(self.scale(x, 2.0)), 2.0, -1.0)

    def activation(self, x, name):
        c = self.ctx
        if name in (None, "linear"):
            return x
        if name in NO_BACKWARD and self.training:
            raise GGMLError(f"ggml has no backward for activation {name!r}: such a model can predict "
                            "but not be trained")
        x = self.cont(x)
        if name == "relu":  # NaN kept, as in every front end (ggml's relu maps it to 0)
            return kernels.relu(c, x, self.kernels)
        if name == "sigmoid":
            return self.sigmoid(x)
        if name == "tanh":
            return self.tanh(x)
        if name == "softmax":
            return checked_lib.ggml_soft_max(c, x)
        if name == "silu":
            return checked_lib.ggml_silu(c, x)
        if name == "gelu":
            return checked_lib.ggml_gelu(c, x)
        if name == "hardsigmoid":  # ggml's clamps NaN to 0
            return kernels.keep_nan(c, checked_lib.ggml_hardsigmoid(c, x), x, self.kernels)
        if name == "hardswish":
            return checked_lib.ggml_hardswish(c, x)
        raise GGMLError(f"unknown activation {name!r}; one of {sorted(a for a in ACTIVATIONS if a)}")

    def concat(self, xs, axis: int):
        """Concatenate along a ggml axis, as acc's into zeros (ggml has no concat backward)."""
        xs = [self.cont(x) for x in xs]
        shapes = [list(ne_of(x)) for x in xs]
        nd = max(len(s) for s in shapes)
        shapes = [s + [1] * (nd - len(s)) for s in shapes]
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        acc = self.zeros(out)
        off = 0
        for x, s in zip(xs, shapes):
            acc = checked_lib.ggml_acc(self.ctx, acc, x, acc.nb[1], acc.nb[2], acc.nb[3], off * acc.nb[axis])
            off += s[axis]
        return acc

    def view_rows(self, x, start: int, count: int):
        """Rows start..start+count of a 2-d [F, N] tensor (along ne0), contiguous."""
        v = checked_lib.ggml_view_2d(self.ctx, x, int(count), int(x.ne[1]), x.nb[1], int(start) * x.nb[0])
        return checked_lib.ggml_cont(self.ctx, v)
