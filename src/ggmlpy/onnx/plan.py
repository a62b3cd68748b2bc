"""One ONNX model graph for one set of input shapes (`OnnxShapePlan`): the nodes narrowed and fused,
built into ggml nodes, placed on the model's device (the CPU's kernels through ggml's scheduler
for ops the device lacks), and computed; and what planning folds on the host (constants, host
steps such as NonMaxSuppression, see ops_host.py).
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING
import time

import numpy as np
from onnx import helper

from .._sigint import uninterruptible
from .. import kernels
from ..bindings import ffi, lib
from ..core.rpc import check_tensor_device
from ..errors import GGMLError
from ..graph import TENSOR_OVERHEAD, CompiledGraph, GraphContext
# their builders register in OPS
from . import (ops_control, ops_conv, ops_elementwise, ops_extra, ops_gather_nd, ops_norm, ops_pool,  # noqa: F401
               ops_products, ops_reduce, ops_resize, ops_rnn, ops_shape, rank5)
from .graph import (F32, OnnxGraphBuilder, NeedsValue, OnnxError, Val, boundary_dtype, const, node_budget,
                    np_dtype, op_key)
from .folding import FoldError, fold
from .fusion import (GraphIndex, find_attention, find_conv_epilogues, find_gelu, find_linear_bias,
                     find_linear_residual, gelu_input_private, heads_transposed, products_of,
                     transposes_of_products)
from .op_table import CONST_INPUTS, OPS
from .op_table import f as contiguous_f32
from .ops_host import HOST_OPS
from .ops_conv import conv_epilogue, conv_pool
from .ops_products import attention, linear_bias, linear_gelu, linear_residual, linear_split
from .ops_control import branch_nodes
from .shaping import has_subgraphs, reads, upstream, value_inputs

if TYPE_CHECKING:
    from .model import OnnxModel

_NULL = ffi.NULL


# Builders that turn constant inputs into constant outputs themselves (cheap, no ggml tensor).
_SELF_FOLDING = {"Constant", "Shape", "Size", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                 "Cast", "CastLike", "ConstantOfShape", "EyeLike", "Split", "Dropout", "If"}


class MisNarrowed(OnnxError):
    """A narrowed graph (narrowing.py) built values of other shapes than onnx's shape inference gave:
    the model is planned whole."""


def plan_key(shapes: dict, values: dict) -> tuple:
    """A plan cache key: the input shapes, and the values (type, shape and a digest of the bytes) of
    the inputs that fix shapes or parameters."""
    def digest(a):
        a = np.ascontiguousarray(a)
        return a.dtype.str, a.shape, hashlib.blake2b(a.tobytes(), digest_size=16).digest()
    return (tuple(sorted((n, tuple(s)) for n, s in shapes.items())),
            tuple(sorted((n, digest(a)) for n, a in values.items())))


def _multiply_adds(p) -> int:
    """A node's multiply-adds, roughly: ggml's products, LSTM sequences and linear layers by their
    depth, anything else one per output."""
    if p.op == lib.GGML_OP_MUL_MAT:
        return int(lib.ggml_nelements(p)) * int(p.src[0].ne[0])
    name = ffi.string(p.name)
    if name == b"ggmlpy.lstm":  # T steps of a (4H x H) by (H x N) product: ne [H, N, T + 1]
        return 4 * int(p.ne[0]) ** 2 * int(p.ne[1]) * (int(p.ne[2]) - 1)
    if name == b"ggmlpy.linear":  # x, the second operand: ne [K, rows]
        return int(lib.ggml_nelements(p)) * int(p.src[1].ne[0])
    return int(lib.ggml_nelements(p))


def sequence_bound(nodes) -> bool:
    """Whether a CPU graph's work is mostly in one-task nodes (rnn.c's LSTM, a sequence step by step):
    it then runs on one thread. ggml's other threads would wait at a barrier after every node and spin
    through the sequence node, which on a busy machine cost a 2-layer LSTM classifier more than the
    products its other nodes split save (docs/benchmarks.md, "ONNX")."""
    sequential = sum(_multiply_adds(p) for p in nodes if ffi.string(p.name) == b"ggmlpy.lstm")
    return sequential > 0 and 2 * sequential >= sum(_multiply_adds(p) for p in nodes)


def _as_onnx_type(a, et: int) -> np.ndarray:
    """A fed array in the numpy type of its declared ONNX type (ggml's types: float32 for those it lacks)."""
    a = np.asarray(a)
    dt = np_dtype(et)
    if a.dtype.kind not in "fiub":
        a = a.astype(np.float32)
    return a if a.dtype == dt else a.astype(dt)




def _fold(model: OnnxModel, node, ins):
    """Evaluate a node whose inputs are all constants (folding.py): constant values, or FoldError."""
    return fold(node, ins, model.proto.opset_import, model.proto.ir_version)


def _unscaled(vals: dict, mul_inputs, name: str) -> tuple:
    """(x's name, f) where value `name` is a Mul (its inputs mul_inputs, or None) of x by a constant
    scalar f, x of its shape; else (name, 1.0)."""
    for xn, cn in ((mul_inputs, mul_inputs[::-1]) if mul_inputs else ()):
        x, c = vals.get(xn), vals.get(cn)
        if x is None or c is None or not c.is_const or np.size(c.const) != 1 or x.shape != vals[name].shape:
            continue
        f = float(np.asarray(c.const).reshape(-1)[0])
        if f != 0 and np.isfinite(f):
            return xn, f
    return name, 1.0


def evaluate_on_host(model: OnnxModel, nodes, values: dict, consts: dict, outputs=None) -> dict:
    """Nodes evaluated one by one in numpy (onnx's reference implementation, ours for host ops):
    for what follows a host step that produced an empty tensor, which no ggml graph can hold. Returns
    the model's outputs among the values known then (or those named in `outputs`)."""
    known = {n: v.const for n, v in consts.items()}
    known.update(values)
    for node in nodes:
        ins = [known[n] if n else None for n in node.input]
        if op_key(node) in HOST_OPS:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            outs = HOST_OPS[op_key(node)](ins, attrs, model.opset)
        else:
            try:
                outs = [v.const for v in _fold(model, node, [None if a is None else const(a) for a in ins])]
            except FoldError as e:
                raise OnnxError(f"onnx_run: node '{node.name or node.output[0]}' ({node.op_type}) on the host: {e}") from None
        known.update((o, a) for o, a in zip(node.output, outs) if o)
    return {n: known[n] for n in (model.output_names if outputs is None else outputs) if n in known}


_TYPE_ONLY_INPUTS = {"CastLike": (1,)}  # inputs whose type alone an op reads


def data_input_names(node) -> list:
    """The inputs a node reads as data: not its parameters (CONST_INPUTS, read by the builder itself:
    an empty Resize roi is no data) nor inputs it reads the type of (CastLike's target)."""
    params = CONST_INPUTS.get(op_key(node), ()) + _TYPE_ONLY_INPUTS.get(op_key(node), ())
    return [n for i, n in enumerate(node.input) if n and i not in params]


def _data_inputs(node, vals: dict) -> list:
    return [vals[n] for n in data_input_names(node) if n in vals]


def _reads_empty(node, vals: dict) -> bool:
    """Whether a node reads an empty value (a constant: ggml has no empty tensors) as data beside a
    computed one: it can be neither folded nor built in the graph, so it and what depends on it are
    deferred, and computed on the host after this graph (evaluate_on_host)."""
    ins = _data_inputs(node, vals)
    return any(v.is_const and v.size == 0 for v in ins) and any(not v.is_const for v in ins)


class OnnxShapePlan:
    """One model graph for one set of input shapes: built, allocated, ready to compute.

    A node that needs a value known only after the graph ran (the output of a host step such as
    NonMaxSuppression, see ops_host.py, or the condition of an If) is deferred with everything depending
    on it: `deferred`
    lists those nodes, and `outputs` includes the values this graph hands them. OnnxModel.run runs
    `host_steps`, then a next OnnxShapePlan built for the nodes left (`rest`; kept in `next_plans`, by shapes
    and the values of the fed inputs that fix its shapes or parameters, `rest_value_inputs`, by the
    nodes left out of it).

    `values`: inputs whose values are known when planning (name -> array): constants of this graph."""

    compiled = None
    compute_on = None  # a backend (pointer) to compute on instead of the model's: see sequence_bound
    MAX_NEXT_PLANS = 8  # shapes a data-dependent stage keeps graphs for (NMS gives a new count each call)

    def __init__(self, model: OnnxModel, shapes: dict, sched=None, nodes=None, feed_types=None, consts=None,
                 values=None):
        first = nodes is None
        g = model.graph_for(shapes) if first and not values else model.proto.graph
        nodes = list(g.node) if first else nodes
        b = self.builder = OnnxGraphBuilder(nodes, f16_weights=model.dtype == "f16")
        b.opset = model.opset
        b.columns_first = not (model.backend is model.cpu and model.blas is None)  # see ops_conv.conv2d
        b.kernels = kernels.get() if model.backend is model.cpu else None  # custom ops: CPU graphs only
        self.backend = model.backend  # not the model itself: no reference cycle, freed as soon as dropped
        self.input_tensors = {}
        if first:
            vals = {n: const(_as_onnx_type(a, init.data_type), init.data_type)
                    for (n, a), init in zip(model.initializers.items(), model.proto.graph.initializer)}
            feed_types = {name: et for name, (et, _) in model.input_info.items()}
        else:
            vals = dict(consts)
        for name, et in feed_types.items():
            shp = tuple(shapes[name])
            if 0 in shp:  # an empty input holds no values: a constant (its shape and type are all it gives)
                vals[name] = const(np.zeros(shp, dtype=np_dtype(et)), et)
                continue
            if values and name in values:  # read on the host: this graph is planned for its value
                vals[name] = const(_as_onnx_type(values[name], et), et)
                continue
            t = b.value_tensor(F32, shp)
            lib.ggml_set_input(t)
            lib.ggml_set_name(t, name.encode()[:63])
            self.input_tensors[name] = (t, shp, et)
            vals[name] = Val(shp, et, t=t)
        b.input_by_ptr = {int(ffi.cast("uintptr_t", t)): n for n, (t, _, _) in self.input_tensors.items()}
        self.n_folded = 0
        # what the pattern finders read; they see the top-level nodes only, so a graph with subgraphs
        # (which may read any value by name) is built node by node
        first_fused = first and not has_subgraphs(nodes)
        ix = GraphIndex(g, model.initializers) if first_fused else None
        gelu, skipped = find_gelu(ix) if first_fused else ({}, set())
        self.n_fused = len(gelu)
        gelu_private = gelu_input_private(ix, gelu) if gelu else set()  # GELUs a linear layer's node may apply itself
        # Conv + Add + Relu and MatMul + bias as one kernel node each: CPU graphs with ggmlpy's
        # kernels, one stage only
        fusing = b.kernels if first_fused and not any(op_key(n) in HOST_OPS for n in nodes) else None
        convs, conv_skipped = ({}, set())
        if fusing is not None and fusing.conv2d is not None:
            convs, conv_skipped = find_conv_epilogues(ix)
        linears, lin_skipped = ({}, set())
        if fusing is not None and fusing.linear is not None:
            linears, lin_skipped = find_linear_bias(ix)
        residuals = find_linear_residual(ix) if fusing is not None else {}  # Add after a linear layer: in its node
        splits = transposes_of_products(ix) if fusing is not None else set()  # q, k, v apart: the layer writes them
        attns, swapped, muls = {}, set(), {}  # attention as one node: patterns sharing no node with another fusion's
        if fusing is not None and fusing.attention is not None:
            others = skipped | conv_skipped | lin_skipped | set(gelu) | set(convs) | set(linears)
            attns = {k: p for k, p in find_attention(ix)[0].items() if not others & set(p[4])}
            swapped = heads_transposed(ix)  # attention outputs whose heads go side by side next
            muls = products_of(ix)  # a query or key scaled before the attention: the scale folded in
        skipped = skipped | conv_skipped | lin_skipped | {j for p in attns.values() for j in p[4][:-1]}
        self.deferred, pending = [], set()

        def place(node, out, members):
            """A fused pattern ending at `node`: its value, or (out None: the pattern does not apply
            here) its nodes built one by one."""
            if out is not None:
                vals[node.output[0]] = out[0]
            else:
                for j in members:
                    build(nodes[j])

        def build(node):
            b.node = node
            if b.headroom() < node_budget(node):
                raise b.fail("the graph outgrew its context (a builder made far more ggml tensors than expected)")
            try:
                ins = [vals[n] if n else None for n in node.input]
            except KeyError as e:
                raise b.fail(f"input {e} is neither a graph input, an initializer nor an earlier node's output")
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            present = [v for v in ins if v is not None]
            if op_key(node) in HOST_OPS:  # all inputs known at load time
                try:
                    outs = [const(a) for a in HOST_OPS[op_key(node)]([None if v is None else v.const for v in ins],
                                                                     attrs, model.opset)]
                except OnnxError as e:
                    raise b.fail(str(e)) from None
                self.n_folded += 1
            elif (present and all(v.is_const for v in present) and node.domain in ("", "ai.onnx")
                    and (node.op_type not in _SELF_FOLDING or any(v.size == 0 for v in present))):
                try:
                    outs = _fold(model, node, ins)
                    self.n_folded += 1
                except FoldError:  # built in the graph from its constant inputs instead
                    outs = None
            else:
                outs = None
            if outs is None:
                try:
                    outs = rank5.build(b, node, ins, attrs, OPS[op_key(node)])
                except NeedsValue as e:  # the names of the values it needed, for the model to trace
                    e.names = [n for n, v in zip(node.input, ins) if v is not None and not v.is_const and
                               (not e.vals or any(v is w for w in e.vals))]
                    raise
            for name, v in zip(node.output, outs):
                if name:
                    vals[name] = v

        work = list(nodes)  # an If on a known condition is replaced by its branch's nodes, inserted after it
        try:
            for k, node in enumerate(work):  # (a list iterator reads by index: it goes on into inserted nodes)
                b.node = node
                cond = vals.get(node.input[0]) if node.op_type == "If" else None
                if cond is not None and cond.is_const:
                    spliced, inits = branch_nodes(b, node, cond)
                    vals.update(inits)
                    work[k + 1:k + 1] = spliced
                    continue
                host = op_key(node) in HOST_OPS
                # an If whose condition this graph computes is deferred with what depends on it to the next
                # stage, planned for the condition's value (shaping.value_inputs)
                if any(n in pending for n in reads(node)) or (
                        host and any(not vals[n].is_const for n in node.input if n and n in vals)) or \
                        _reads_empty(node, vals) or (cond is not None and not cond.is_const):
                    self.deferred.append(node)  # needs what only a host step after this graph knows
                    pending.update(o for o in node.output if o)
                    continue
                if k in skipped:  # inside a fused pattern: its value is never read
                    continue
                if k in gelu:
                    x = vals[gelu[k]]
                    y = linear_gelu(b, x) if k in gelu_private and b.kernels is not None else None
                    vals[node.output[0]] = y if y is not None else b.out(b.gelu_erf(contiguous_f32(b, x)), x.shape,
                                                                         x.dtype)
                    continue
                if k in convs:
                    ci, res, relu, pool, members = convs[k]
                    cnode = b.node = nodes[ci]
                    ins = [vals.get(n) if n else None for n in cnode.input]
                    at = {a.name: helper.get_attribute_value(a) for a in cnode.attribute}
                    out = None
                    if all(n in vals for n in cnode.input if n) and not ins[0].is_const and (res is None or res in vals):
                        if pool is not None and res is None:
                            out = conv_pool(b, cnode, ins, at, relu, nodes[pool],
                                            {a.name: helper.get_attribute_value(a) for a in nodes[pool].attribute})
                        if out is None:
                            out = conv_epilogue(b, cnode, ins, at, vals[res] if res else None, relu)
                            if out is not None and pool is not None:  # the conv's node, then the pooling's
                                vals[nodes[members[-2]].output[0]] = out[0]
                                build(nodes[pool])
                                continue
                    place(node, out, members)
                    continue
                if k in attns:
                    si, scale, mask, smi, members = attns[k]
                    snode, smnode = nodes[si], nodes[smi]
                    names = [snode.input[0], snode.input[1], node.input[1]] + ([mask] if mask else [])
                    out = None
                    if all(n in vals for n in names):
                        for i in (0, 1):  # Q or K^T a constant times a value of its shape: the constant in the scale
                            names[i], f = _unscaled(vals, muls.get(names[i]), names[i])
                            scale *= f
                        axis = next((helper.get_attribute_value(a) for a in smnode.attribute if a.name == "axis"),
                                    -1 if model.opset >= 13 else 1)
                        out = attention(b, vals[names[0]], vals[names[1]], vals[names[2]],
                                        vals[mask] if mask else None, scale, axis, node.output[0] in swapped)
                    place(node, out, members)
                    continue
                if k in linears:
                    mi, bias, members = linears[k]
                    mnode = b.node = nodes[mi]
                    out = None
                    if all(n in vals for n in mnode.input) and bias in vals:
                        out = linear_bias(b, mnode, [vals[n] for n in mnode.input], {}, vals[bias])
                    place(node, out, members)
                    continue
                if k in splits and node.input[0] in vals and not rank5.big(vals[node.input[0]]):
                    perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
                    x = vals[node.input[0]]
                    out = linear_split(b, x, perm if perm is not None else list(range(x.rank))[::-1])
                    if out is not None:
                        vals[node.output[0]] = out
                        continue
                if k in residuals and all(n in vals for n in residuals[k]):
                    out = linear_residual(b, *(vals[n] for n in residuals[k]))
                    if out is not None:
                        vals[node.output[0]] = out
                        continue
                build(node)
        except (GGMLError, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - a converter's failure on this model (a stride of 0...): its node named
            raise b.fail(f"cannot be built: {type(e).__name__}: {e}") from e
        b.node = None
        wrong = [n for n, shape in getattr(g, "expected", {}).items() if n in vals and tuple(vals[n].shape) != shape]
        if wrong:
            b.free()
            raise MisNarrowed(f"narrowed values built with shapes other than inferred: {wrong[:3]}")
        self.n_narrowed = len(getattr(g, "narrowed", {}))
        self.consts = {n: v for n, v in vals.items() if v.is_const}
        # host steps that can run as soon as this graph is computed; the rest is the next stage
        known, self.host_steps, self.rest = set(vals), [], []
        for node in self.deferred:
            if op_key(node) in HOST_OPS and all(n in known for n in node.input if n):
                self.host_steps.append((node, {a.name: helper.get_attribute_value(a) for a in node.attribute}))
                known.update(o for o in node.output if o)
            else:
                self.rest.append(node)
        self.rest_reads_empty = any(v.is_const and v.size == 0 for node in self.rest for v in _data_inputs(node, vals))
        needed = {n for node in self.deferred for n in reads(node) if n in vals and not vals[n].is_const}
        self.outputs = []  # (name, Val, ggml tensor or None, fed input name or None)
        out_ts = []
        for name in list(model.output_names) + sorted(needed - set(model.output_names)):
            if name not in vals:
                if name in pending or not first:
                    continue  # computed by a later stage, or by an earlier one
                raise OnnxError(f"onnx_load: graph output '{name}' is produced by no node")
            v = vals[name]
            if v.is_const:
                self.outputs.append((name, v, None, None))
                continue
            t = v.t
            fed = b.input_by_ptr.get(int(ffi.cast("uintptr_t", t)))
            if fed is not None and (not first or name not in model.output_names):  # handed on as it came in
                self.outputs.append((name, v, None, fed))
                continue
            if t.type != F32:
                t = lib.ggml_cast(b.ctx, t, F32)
            if t.view_src != _NULL or t.op == lib.GGML_OP_NONE or not lib.ggml_is_contiguous(t):
                t = lib.ggml_cont(b.ctx, t)
            lib.ggml_set_output(t)
            self.outputs.append((name, v, t, None))
            out_ts.append(t)
        self.next_plans, self.rest_value_inputs, self.n_next_built = {}, {}, 0
        self._build_graph(out_ts)
        if b.kernels is not None and b.kernels.linear_packed is not None and b.packed_linears:
            kernels.chain_linears(b.kernels, self.graph)
        if self.n_nodes:
            self._allocate(model, sched)
        else:
            self.cpu_fallback = []

    def _build_graph(self, out_ts):
        b = self.builder
        size = int(lib.ggml_used_mem(b.ctx)) // TENSOR_OVERHEAD + len(b.weights) + 64
        self.gctx = GraphContext(0, n_nodes=size)  # the graph only: its tensors live in the builder's contexts
        self.gctx.expand(out_ts)
        self.graph = self.gctx.graph
        self.n_nodes = int(lib.ggml_graph_n_nodes(self.graph))

    def _allocate(self, model, sched=None):
        """Weights into a buffer of their own, then the graph placed (graph.CompiledGraph): on the
        CPU, ggml's BLAS backend takes the large f32 products it accepts (32 or more rows, columns
        and depth); on another device, the ops it lacks run on the CPU, as in ggmlR."""
        b = self.builder
        backend = model.backend
        b.weights.upload(backend)
        try:
            self.compiled = CompiledGraph(self.graph, backend, blas=model.blas, blas_ops=(lib.GGML_OP_MUL_MAT,),
                                          fallback=model.cpu, sched=sched)
        except OnnxError:
            raise
        except GGMLError as e:  # the CPU itself lacks a kernel
            raise OnnxError(f"onnx_load: {e}") from None
        self.cpu_fallback = self.compiled.fallback_ops
        if self.compiled.sched is None and backend is model.cpu and sequence_bound(self.compiled.nodes):
            self.compute_on = model.single_thread_cpu().ptr

    @property
    def sched(self):
        return self.compiled.sched if self.compiled is not None else None

    # -- running --------------------------------------------------------------------------------------
    def run(self, arrays: dict) -> dict:
        """Compute the graph: model outputs and exports by name, as numpy arrays in their ONNX types."""
        for name, (t, shp, et) in self.input_tensors.items():
            if t.buffer == _NULL:  # an input no output depends on: not in the graph
                continue
            a = arrays[name]
            L = self.builder.index_inputs.get(name)
            if L is not None:  # indices from the caller: ggml would abort on one out of range
                ai = np.asarray(a, dtype=np.int64)
                lo, hi = (ai.min(), ai.max()) if ai.size else (0, 0)
                if lo < -L or hi >= L:
                    raise OnnxError(f"onnx_run: input '{name}' holds indices outside [-{L}, {L})")
                a = np.where(ai < 0, ai + L, ai) if lo < 0 else ai  # (one numpy pass, not two, where none is negative)
            a = np.ascontiguousarray(a, dtype=np.float32)
            lib.ggml_backend_tensor_set(t, ffi.from_buffer(a), 0, a.nbytes)
        if self.n_nodes:  # none when every output is an input or a constant, as a host step may need
            try:
                self.compiled.compute(self.compute_on)
            except OnnxError:
                raise
            except GGMLError as e:
                raise OnnxError(f"onnx_run: {e}") from None
        out = {}
        for name, v, t, fed in self.outputs:
            dt = boundary_dtype(v.dtype)
            if t is None and fed is None:
                out[name] = np.array(v.const, copy=True).astype(dt, copy=False)
                continue
            if fed is not None:  # the input itself, or a reshaping of it that kept its tensor (Squeeze...)
                y = np.asarray(arrays[fed]).reshape(v.shape)
            else:
                y = np.empty(v.shape, dtype=np.float32)
                lib.ggml_backend_tensor_get(t, ffi.from_buffer(y), 0, y.nbytes)
                check_tensor_device(t)
            if dt.kind in "iu" and y.dtype.kind == "f":
                y = np.rint(y)
            out[name] = y.astype(dt) if y.dtype != dt else y
        return out

    def next_plan(self, model: OnnxModel, feeds: dict, nodes=None) -> "OnnxShapePlan":
        """The graph of the deferred nodes (or of `nodes`, those of them left after empty branches
        were computed on the host: empty_branches.py) for these fed values, built once per node set,
        set of shapes and values of the feeds that fix its shapes or parameters."""
        if nodes is None:
            nodes, left_out = self.rest, ()
        else:
            kept = {id(n) for n in nodes}
            left_out = tuple(i for i, n in enumerate(self.rest) if id(n) not in kept)
        fixing = self.rest_value_inputs.get(left_out)
        if fixing is None:
            fixing = self.rest_value_inputs[left_out] = value_inputs(nodes, feeds)
        while True:
            values = {n: feeds[n] for n in fixing}
            key = (left_out,) + plan_key({n: a.shape for n, a in feeds.items()}, values) + (
                tuple(sorted((n, a.dtype.str) for n, a in feeds.items())),)
            plan = self.next_plans.pop(key, None)
            if plan is not None:
                break
            types = {n: helper.np_dtype_to_tensor_dtype(a.dtype) for n, a in feeds.items()}
            t0 = time.perf_counter()
            try:
                plan = OnnxShapePlan(model, {n: a.shape for n, a in feeds.items()}, nodes=nodes, feed_types=types,
                             consts=self.consts, values=values)
            except NeedsValue as e:
                found = upstream(nodes, e.names, feeds) - fixing
                if not found:
                    raise OnnxError(str(e)) from None
                fixing |= found
                for p in self.next_plans.values():
                    p.free()
                self.next_plans = {}
                continue
            model.note_plan(time.perf_counter() - t0, replan=self.n_next_built > 0)
            self.n_next_built += 1
            if len(self.next_plans) >= self.MAX_NEXT_PLANS:
                self.next_plans.pop(next(iter(self.next_plans))).free()
            break
        self.next_plans[key] = plan  # most recently used last
        return plan

    @property
    def nbytes(self) -> int:
        """The memory this plan holds on its device: the graph's buffer and the weights."""
        n = self.compiled.buffer_bytes if self.compiled is not None else 0
        w = self.builder.weights.buffer if getattr(self, "builder", None) is not None else None
        return n + (int(lib.ggml_backend_buffer_get_size(w)) if w is not None else 0)

    @uninterruptible
    def free(self):
        for plan in getattr(self, "next_plans", {}).values():
            plan.free()
        self.next_plans = {}
        if getattr(self, "compiled", None) is not None:
            self.compiled.free()  # a borrowed scheduler (onnx_profile's) stays its owner's
            self.compiled = None
        if getattr(self, "gctx", None) is not None:
            self.gctx.free()
            self.gctx = None
        if getattr(self, "builder", None) is not None:
            self.builder.free()

    @uninterruptible
    def __del__(self):
        try:
            self.free()
        except Exception:
            pass
