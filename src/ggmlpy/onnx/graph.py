"""The graph under construction: ONNX values as ggml tensors or load-time constants.

ONNX is row-major (NCHW): an ONNX tensor of shape (N, C, H, W) is the ggml
tensor ne = [W, H, C, N] over the same memory, with no copy. Every value keeps
its ONNX shape and ONNX element type; in the graph, numbers are F32 (integers
and booleans included: exact below 2**24) and indices I32.

A value whose inputs are all known at load time (initializers, Constant nodes,
shapes) stays a numpy array: Shape -> Gather -> Concat -> Reshape chains are
folded before any ggml tensor exists, and a constant becomes a ggml weight only
when a ggml op reads it.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from .._sigint import uninterruptible
from .. import kernels
from ..bindings import ffi, lib
from ..errors import GGMLError
from ..graph import GraphContext, Weights

F32, F16, I32 = lib.GGML_TYPE_F32, lib.GGML_TYPE_F16, lib.GGML_TYPE_I32
MAX_RANK = 4  # GGML_MAX_DIMS
# ONNX values with five axes above size one are held in ggml's four, their two outermost merged
# (rank5.py: only builders that treat a pair of axes alike see them)
FOLDED_RANK = 5

# ONNX's 8- and 4-bit types: carried in float32 inside (float8) or int8/uint8 (int4/uint4), converted
# from and to ml_dtypes' numpy types at the model's boundary (boundary_dtype).
FLOAT8_TYPES = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                TensorProto.FLOAT8E5M2FNUZ}
INT4_TYPES = {TensorProto.INT4, TensorProto.UINT4}
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16} | FLOAT8_TYPES
INT_TYPES = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
             TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64} | INT4_TYPES
NUMERIC_TYPES = FLOAT_TYPES | INT_TYPES | {TensorProto.BOOL}


class OnnxError(GGMLError):
    """A model ggmlpy cannot load or run, with the node or input it concerns."""


class OnnxLimitation(OnnxError):
    """What ggml itself cannot represent (more than 4 dimensions, empty tensors, float64...)."""


class NeedsValue(OnnxError):
    """A builder needs a value on the host (a shape, axes, weights...) that the graph computes.

    When that value is computed from graph inputs, the model plans again with those inputs' values
    known (they join the plan cache's key); otherwise this is the error the user sees. `vals`: the
    values needed; `names`: theirs, filled in by the plan being built."""

    def __init__(self, msg: str, vals=()):
        super().__init__(msg)
        self.vals = tuple(vals)
        self.names: list = []


def op_key(node) -> str:
    """The operator table's key: the op type, prefixed by its domain outside the standard one."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def np_dtype(onnx_type: int):
    """The numpy type a value of this ONNX type is carried in while planning (constants)."""
    if onnx_type == TensorProto.BFLOAT16 or onnx_type in FLOAT8_TYPES:
        return np.dtype(np.float32)
    if onnx_type == TensorProto.INT4:
        return np.dtype(np.int8)
    if onnx_type == TensorProto.UINT4:
        return np.dtype(np.uint8)
    return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))


def boundary_dtype(onnx_type: int):
    """The numpy type of a value of this ONNX type outside the model: onnx's own (ml_dtypes' bfloat16,
    float8_*, int4, uint4 for the types numpy lacks)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))


def type_name(onnx_type: int) -> str:
    return TensorProto.DataType.Name(onnx_type).lower()


class Val:
    """One ONNX value: a numpy constant (`const`) or a ggml tensor (`t`), with ONNX shape and type."""

    __slots__ = ("shape", "dtype", "const", "t")

    def __init__(self, shape, dtype: int, const=None, t=None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = int(dtype)
        self.const = const
        self.t = t

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self):
        kind = "const" if self.is_const else "tensor"
        return f"<Val {kind} {type_name(self.dtype)}{list(self.shape)}>"


def const(arr, dtype: int | None = None) -> Val:
    arr = np.asarray(arr)
    if dtype is None:
        dtype = helper.np_dtype_to_tensor_dtype(arr.dtype)
    return Val(arr.shape, dtype, const=arr)


def compact(shape) -> tuple:
    """A shape of more than 4 dimensions without its size-one axes (the same memory layout)."""
    shape = tuple(int(d) for d in shape)
    return shape if len(shape) <= MAX_RANK else tuple(d for d in shape if d != 1)


def ne_of(shape) -> list[int]:
    """ggml ne of an ONNX shape: reversed, padded with ones. Above rank 4, size-one axes are dropped;
    five axes left are held as four, the outermost two merged into ne3 (row-major memory is the same,
    see rank5.py). More than five give more than four entries (OnnxLimitation in value_tensor and
    the layout helpers)."""
    ne = [int(d) for d in reversed(compact(shape))]
    if len(ne) == FOLDED_RANK:
        ne = ne[:3] + [ne[3] * ne[4]]
    return ne + [1] * (MAX_RANK - len(ne))


def folded(shape) -> bool:
    """Whether a value of this ONNX shape is held with two axes merged (five axes above size one)."""
    return len(compact(shape)) == FOLDED_RANK


# Tensor headers the op context holds: a budget per ONNX node (a Resize or an LSTM makes about a
# hundred) and per operand (a variadic Sum, Concat or Split makes a few per input or output). ggml
# aborts when a context runs out, so the budget is checked before every node (and safe.lib checks
# the room before every call that makes a tensor).
TENSORS_PER_NODE, TENSORS_PER_OPERAND = 200, 8


def node_budget(node) -> int:
    """The tensor headers one ONNX node may make."""
    return TENSORS_PER_NODE + TENSORS_PER_OPERAND * (len(node.input) + len(node.output))


class OnnxGraphBuilder(GraphContext):
    """One model graph under construction (graph.GraphContext: op nodes, placed by the allocator)
    and its weights (graph.Weights: the constants a ggml op reads, in a buffer of their own), both
    sized from the ONNX nodes they will hold."""

    def __init__(self, nodes, f16_weights: bool = False):
        try:  # headroom checked before every node
            super().__init__(sum(node_budget(n) for n in nodes) + 4096)
            self.weights = Weights(sum(len(n.input) for n in nodes) + 1024)  # a weight per constant operand at most
        except MemoryError as e:
            raise OnnxError(f"onnx_load: {e}") from None
        self._const_cache: dict = {}
        self.f16_weights = f16_weights
        self.node = None  # the ONNX node being built, for error messages
        self.opset = 0
        self.input_by_ptr: dict = {}  # ggml input tensor address -> input name
        self.index_inputs: dict = {}  # input name -> smallest axis it indexes (checked at run time)
        self.columns_first = True  # conv product order (ops_conv.conv2d)
        self.kernels = None  # ggmlpy.kernels.Kernels where the graph runs on ggml's CPU backend
        self.packed_linears: dict = {}  # packed linear node's address -> its arguments (ops_products.linear_gelu)
        # whether a value of five axes above size one may be made (rank5.build: not while a builder
        # that does not know them runs, so a five-axis constant it hands to ggml is refused)
        self.five_axes = True

    def note_index_input(self, v: "Val", L: int) -> None:
        """`v` indexes an axis of length L: when it is a graph input, onnx_run checks its range."""
        name = self.input_by_ptr.get(int(ffi.cast("uintptr_t", v.t))) if v.t is not None else None
        if name is not None:
            prev = self.index_inputs.get(name)
            self.index_inputs[name] = L if prev is None else min(prev, L)

    def gelu_erf(self, x):
        """Exact GELU: ggmlpy's fused kernel on the CPU (f32), ggml's gelu_erf elsewhere."""
        if self.kernels is not None and x.type == lib.GGML_TYPE_F32:
            return self.kernel_node(self.kernels.gelu(self.ctx, x), "gelu")
        return lib.ggml_gelu_erf(self.ctx, x)

    def relu(self, x):
        """max(x, 0) with NaN kept and relu(-inf) = 0, the ReLU of every front end (kernels.relu)."""
        y = kernels.relu(self.ctx, x, self.kernels)
        return self.kernel_node(y, "relu") if self.kernels is not None and x.type == lib.GGML_TYPE_F32 else y

    def keep_nan(self, fx, x):
        """fx = f(x) from a ggml op that maps NaN to a number, with x's NaN put back (kernels.keep_nan)."""
        y = kernels.keep_nan(self.ctx, fx, x, self.kernels)
        return self.kernel_node(y, "keep_nan") if self.kernels is not None and x.type == lib.GGML_TYPE_F32 else y

    def extremum(self, x, y, larger: bool):
        """max(x, y) or min(x, y), y broadcast to x; NaN where either is (kernels.extremum)."""
        t = kernels.extremum(self.ctx, x, y, larger, self.kernels)
        return self.kernel_node(t, "max" if larger else "min") if self.kernels is not None and x.type == lib.GGML_TYPE_F32 else t

    @staticmethod
    def kernel_node(t, what: str):
        """Name a node of ggmlpy's kernels (onnx_profile reports it as ggmlpy.<what>, not CUSTOM)."""
        lib.ggml_set_name(t, f"ggmlpy.{what}".encode())
        return t

    @uninterruptible
    def free(self) -> None:
        if getattr(self, "weights", None) is not None:
            self.weights.free()
        super().free()

    # -- errors -------------------------------------------------------------------------------------
    def fail(self, msg: str) -> OnnxError:
        return OnnxError(self.where() + msg)

    def need(self, cond, msg: str) -> None:
        if not cond:
            raise self.fail(msg)

    def need_value(self, cond, msg: str, *vals: "Val") -> None:
        """Like need, for values that must be known on the host when the graph is planned: `vals`
        are those values (none: all the node's computed inputs)."""
        if not cond:
            raise NeedsValue(self.where() + msg, [v for v in vals if v is not None])

    def limit(self, cond, msg: str) -> None:
        """Like need, for what ggml cannot represent at all."""
        if not cond:
            raise OnnxLimitation(self.where() + msg)

    def where(self) -> str:
        n = self.node
        if n is None:
            return ""
        return f"node '{n.name or next((o for o in n.output if o), '?')}' ({n.op_type}): "

    # -- tensors ------------------------------------------------------------------------------------
    def value_tensor(self, ggml_type: int, shape, values=None):
        """A tensor of ONNX shape `shape`: an op input of the graph, or with `values` a weight."""
        most = FOLDED_RANK if self.five_axes else MAX_RANK
        self.limit(len(compact(shape)) <= most, f"rank {len(shape)} tensors with more than {most} axes above size one "
                                                f"are not supported here (ggml has at most {MAX_RANK} dimensions); "
                                                f"shape {list(shape)}")
        self.limit(all(d > 0 for d in shape), f"empty tensors are not supported (shape {list(shape)})")
        if values is None:
            return self.new_tensor(ggml_type, ne_of(shape))
        return self.weights.new(ggml_type, ne_of(shape), values)

    def weight(self, arr: np.ndarray, ggml_type: int = F32):
        """A ggml tensor holding `arr` (ONNX layout), loaded into the weight buffer after the build."""
        arr = np.ascontiguousarray(arr)
        key = (id(arr), arr.shape, ggml_type)
        hit = self._const_cache.get(key)
        if hit is not None and hit[1] is arr:
            return hit[0]
        if self.weights.headroom() < 2:
            raise self.fail("too many constants for the weight context")
        shape = arr.shape if arr.ndim else (1,)
        np_t = {F32: np.float32, F16: np.float16, I32: np.int32}[ggml_type]
        t = self.value_tensor(ggml_type, shape, np.ascontiguousarray(arr, dtype=np_t).reshape(shape))
        self._const_cache[key] = (t, arr)
        return t

    def tensor(self, v: Val, f16_ok: bool = False):
        """The ggml tensor of value `v` in F32 (a constant becomes a weight; I32 is converted)."""
        if v.is_const:
            arr = v.const
            self.need(arr.dtype.kind in "fiub", f"{arr.dtype} constants cannot go into a ggml graph")
            if (arr.dtype.kind in "iub" and arr.size and
                    np.abs(arr.astype(np.float64)).max() > 2 ** 24):
                raise self.fail("an integer constant above 2**24 would lose precision in float32")
            big = f16_ok and self.f16_weights and arr.size >= 256
            t = self.weight(arr, F16 if big else F32)
            self.set_shape(t, v.shape)
            return t
        if v.t.type == I32:
            return lib.ggml_cast(self.ctx, v.t, F32)
        return v.t

    def indices(self, v: Val):
        """The ggml I32 tensor of an index value."""
        if v.is_const:
            return self.weight(v.const.astype(np.int64), I32)
        if v.t.type == I32:
            return v.t
        return lib.ggml_cast(self.ctx, v.t, I32)

    def set_shape(self, t, shape) -> None:
        """Check that ggml's ne agrees with the ONNX shape: a mismatch is a builder bug, never data."""
        want = ne_of(shape)
        got = [int(t.ne[i]) for i in range(MAX_RANK)]
        if want != got:
            raise self.fail(f"internal shape mismatch: ONNX shape {list(shape)} is ne {want}, ggml made {got}")

    def out(self, t, shape, dtype: int) -> Val:
        self.set_shape(t, shape)
        return Val(shape, dtype, t=t)
