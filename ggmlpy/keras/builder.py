"""Graph building for the Keras-like models: ggml ops on raw tensor pointers.

A `Builder` owns two no-alloc contexts: `ctx_w` (weights, constants and the input tensor,
allocated in one backend buffer once the graph is built) and `ctx` (the compute graph's
intermediates, placed by the scheduler). In training mode every non-linearity whose ggml
op has no backward in the pinned ggml (sigmoid, tanh, concat) is built from ops that have
one, so ggml's own `ggml_build_backward_expand` can differentiate the whole graph.
"""
from __future__ import annotations

import numpy as np

from ..bindings import ffi, lib
from ..errors import GGMLError

F32 = lib.GGML_TYPE_F32
I32 = lib.GGML_TYPE_I32
GRAPH_SIZE = 2048  # ggml_opt's GGML_DEFAULT_GRAPH_SIZE: forward + backward + optimizer nodes must fit
MAX_FORWARD_NODES = 500

# activations ggml cannot differentiate in any form
NO_BACKWARD = {"gelu", "hardsigmoid", "hardswish"}
ACTIVATIONS = {None, "linear", "relu", "sigmoid", "tanh", "softmax", "silu", "gelu", "hardsigmoid", "hardswish"}


def _init_ctx(mem: int):
    p = ffi.new("struct ggml_init_params *")
    p.mem_size = int(mem)
    p.mem_buffer = ffi.NULL
    p.no_alloc = True
    ctx = lib.ggml_init(p[0])
    if ctx == ffi.NULL:
        raise MemoryError("ggml_init failed")
    return ctx


def ne_of(t) -> tuple:
    n = lib.ggml_n_dims(t)
    return tuple(int(t.ne[i]) for i in range(max(n, 1)))


class Builder:
    """One graph's tensors. `training` selects differentiable forms and dropout scaling."""

    def __init__(self, training: bool, n_tensors: int = 65536):
        self.training = training
        overhead = lib.ggml_tensor_overhead()
        self.ctx_w = _init_ctx(overhead * 4096)
        self.ctx = _init_ctx(overhead * n_tensors + 4 * lib.ggml_graph_overhead_custom(GRAPH_SIZE * 8, True))
        self.uploads = []   # (tensor, numpy array) written once ctx_w is allocated
        self.param_tensors = {}  # (owner, pname) -> tensor
        self.buffer = None

    # -- tensors in the weight buffer ------------------------------------------------------------
    def weight(self, key, arr: np.ndarray, trainable: bool):
        """A weight tensor holding `arr` (numpy shape = ggml ne reversed); shared per key."""
        if key in self.param_tensors:
            return self.param_tensors[key]
        t = self.const(arr)
        if trainable:
            lib.ggml_set_param(t)
        self.param_tensors[key] = t
        return t

    def const(self, arr: np.ndarray, dtype=F32):
        arr = np.ascontiguousarray(arr, dtype=np.float32 if dtype == F32 else np.int32)
        ne = list(arr.shape[::-1]) or [1]
        t = self.new_w(ne, dtype)
        self.uploads.append((t, arr))
        return t

    def new_w(self, ne, dtype=F32):
        ne = [int(v) for v in ne]
        arr = ffi.new("int64_t[]", ne + [1] * (4 - len(ne)))
        return lib.ggml_new_tensor(self.ctx_w, dtype, len(ne), arr)

    def zeros(self, ne):
        return self.const(np.zeros(tuple(ne)[::-1], np.float32))

    def allocate(self, backend) -> None:
        self.buffer = lib.ggml_backend_alloc_ctx_tensors(self.ctx_w, backend.ptr)
        if self.buffer == ffi.NULL:
            raise MemoryError("could not allocate the model's weights on " + backend.name)
        for t, arr in self.uploads:
            lib.ggml_backend_tensor_set(t, ffi.from_buffer(arr), 0, arr.nbytes)

    def free(self) -> None:
        if self.buffer is not None and self.buffer != ffi.NULL:
            lib.ggml_backend_buffer_free(self.buffer)
        self.buffer = None
        for name in ("ctx", "ctx_w"):
            c = getattr(self, name, None)
            if c is not None:
                lib.ggml_free(c)
                setattr(self, name, None)

    # -- ops ---------------------------------------------------------------------------------------
    def cont(self, x):
        return x if lib.ggml_is_contiguous(x) else lib.ggml_cont(self.ctx, x)

    def reshape(self, x, ne):
        x = self.cont(x)
        ne = [int(v) for v in ne]
        f = {1: lib.ggml_reshape_1d, 2: lib.ggml_reshape_2d, 3: lib.ggml_reshape_3d, 4: lib.ggml_reshape_4d}[len(ne)]
        return f(self.ctx, x, *ne)

    def matmul(self, w, x):
        """w [K, M], x [K, N] -> [M, N]."""
        return lib.ggml_mul_mat(self.ctx, w, x)

    def add(self, a, b):
        return lib.ggml_add(self.ctx, a, b)

    def mul(self, a, b):
        return lib.ggml_mul(self.ctx, a, b)

    def sub(self, a, b):
        # ggml's SUB backward does not reduce a broadcast b (its build aborts): a + (-b) does
        if not lib.ggml_are_same_shape(a, b):
            return lib.ggml_add(self.ctx, a, lib.ggml_neg(self.ctx, b))
        return lib.ggml_sub(self.ctx, a, b)

    def scale(self, a, s, bias=0.0):
        if bias:
            return lib.ggml_scale_bias(self.ctx, a, float(s), float(bias))
        return lib.ggml_scale(self.ctx, a, float(s))

    def sigmoid(self, x):
        if not self.training:
            return lib.ggml_sigmoid(self.ctx, x)
        # 1/(1+e^-x) = exp(-softplus(-x)): every op here has a ggml backward, none overflows
        c = self.ctx
        return lib.ggml_exp(c, lib.ggml_neg(c, lib.ggml_softplus(c, lib.ggml_neg(c, x))))

    def tanh(self, x):
        if not self.training:
            return lib.ggml_tanh(self.ctx, x)
        return self.scale(self.sigmoid(self.scale(x, 2.0)), 2.0, -1.0)

    def activation(self, x, name):
        c = self.ctx
        if name in (None, "linear"):
            return x
        if name in NO_BACKWARD and self.training:
            raise GGMLError(f"ggml has no backward for activation {name!r}: such a model can predict "
                            "but not be trained")
        x = self.cont(x)
        if name == "relu":
            return lib.ggml_relu(c, x)
        if name == "sigmoid":
            return self.sigmoid(x)
        if name == "tanh":
            return self.tanh(x)
        if name == "softmax":
            return lib.ggml_soft_max(c, x)
        if name == "silu":
            return lib.ggml_silu(c, x)
        if name == "gelu":
            return lib.ggml_gelu(c, x)
        if name == "hardsigmoid":
            return lib.ggml_hardsigmoid(c, x)
        if name == "hardswish":
            return lib.ggml_hardswish(c, x)
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
            acc = lib.ggml_acc(self.ctx, acc, x, acc.nb[1], acc.nb[2], acc.nb[3], off * acc.nb[axis])
            off += s[axis]
        return acc

    def view_rows(self, x, start: int, count: int):
        """Rows start..start+count of a 2-d [F, N] tensor (along ne0), contiguous."""
        v = lib.ggml_view_2d(self.ctx, x, int(count), int(x.ne[1]), x.nb[1], int(start) * x.nb[0])
        return lib.ggml_cont(self.ctx, v)
