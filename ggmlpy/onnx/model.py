"""onnx_load / onnx_run / onnx_summary / onnx_inputs: ONNX models as one ggml graph (ggmlR's API).

The file is parsed by the `onnx` package. For each set of input shapes (and
values of the inputs that fix shapes or op parameters, see shaping.py) the
whole model becomes ONE ggml graph: weights in a backend buffer of their own,
intermediates placed by ggml's graph allocator (they share memory), inputs
uploaded and outputs read back per call. On a device other than the CPU, ops
the device has no kernel for run on the CPU through ggml's scheduler (as in
ggmlR). Everything that can fail is checked before ggml sees it: unsupported
operators are reported with their node before anything is built.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
import warnings
from collections import Counter, defaultdict

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

from .._sigint import uninterruptible
from .. import kernels
from ..bindings import ffi, lib
from .._arrays import numeric_array
from ..core.device import Backend, blas_backend, check_tensor_device, get_backend, is_software_device
from ..core.sched import Scheduler
from ..core.threads import checked_count
from ..errors import DeviceError, GGMLError
from ..graph import TENSOR_OVERHEAD, ByteCache, CompiledGraph, GraphContext
from . import ops_extra, ops_nn, ops_resize, ops_rnn  # noqa: F401  (their builders register in OPS)
from .graph import (F32, NUMERIC_TYPES, Builder, NeedsValue, OnnxError, Val, boundary_dtype, const, node_budget,
                    np_dtype, op_key, type_name)
from .fusion import (GraphIndex, const_values, find_attention, find_conv_epilogues, find_gelu, find_linear_bias,
                     find_linear_residual, gelu_input_private, heads_transposed, products_of,
                     transposes_of_products)
from .narrowing import has_seed, narrow, static_shapes
from .ops_basic import OPS
from .ops_basic import f as contiguous_f32
from .ops_host import HOST_OPS
from .ops_nn import attention, conv_epilogue, conv_pool, linear_bias, linear_gelu, linear_residual, linear_split
from .shaping import upstream, value_inputs

_NULL = ffi.NULL
# Resolve now what the finalizers call: cffi resolves a symbol under a lock of its own, and a
# finalizer run by the garbage collector during another resolution would wait on it forever.
for _sym in ("ggml_backend_free", "ggml_gallocr_free", "ggml_backend_buffer_free", "ggml_free",
             "ggml_backend_sched_free"):
    getattr(lib, _sym)
DTYPES = {"f32": "f32", "f16": "f16", "fp16": "f16", "float16": "f16"}
# The bytes of built plans (graph buffers and weights) a model keeps; the least recently used go first.
PLAN_CACHE_BYTES = int(os.environ.get("GGMLPY_ONNX_PLAN_CACHE_BYTES", 1 << 30))

# Builders that turn constant inputs into constant outputs themselves (cheap, no ggml tensor).
_SELF_FOLDING = {"Constant", "Shape", "Size", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                 "Cast", "CastLike", "ConstantOfShape", "EyeLike", "Split", "Dropout"}


def supported_ops() -> list[str]:
    """The ONNX operator types onnx_load can build (others' domains as "com.microsoft:QGemm")."""
    return sorted(set(OPS) | set(HOST_OPS))


def _read_model(path):
    if isinstance(path, onnx.ModelProto):
        _check(path, "not a valid ONNX model")
        return path
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"onnx_load: no such file: '{path}'")
    if os.path.getsize(path) == 0:
        raise OnnxError(f"onnx_load: '{path}' is empty")
    try:
        model = onnx.load(path)
    except DecodeError as e:
        raise OnnxError(f"onnx_load: '{path}' is not an ONNX model (protobuf parse failed: {e}); "
                        "the file may be truncated or of another format") from None
    except Exception as e:  # external data missing, unreadable
        raise OnnxError(f"onnx_load: cannot read '{path}': {e}") from None
    if not model.graph.node and not model.graph.output:
        raise OnnxError(f"onnx_load: '{path}' holds no ONNX graph (not an ONNX file, or truncated)")
    _check(model, f"'{path}' is not a valid ONNX model")
    return model


def _check(model, what: str) -> None:
    """onnx.checker, whose failures include more than its ValidationError (a UnicodeDecodeError
    for a name that is not UTF-8), and the default domain's opset: one newer than the onnx
    package knows is refused, as onnxruntime refuses it (its operators' meaning is unknown)."""
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - any failure of the checker is the file's
        msg = " ".join(str(e).strip().splitlines()[:3]) or type(e).__name__
        raise OnnxError(f"onnx_load: {what}: {msg}") from None
    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise OnnxError(f"onnx_load: {what}: opset {o.version} is newer than any this onnx package knows "
                            f"({newest})")


def _dims(vi):
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else -1 for d in tt.shape.dim]


class OnnxModel:
    """A loaded ONNX model: the parsed file, its device, and one built ggml graph per set of input shapes
    and values of `value_inputs` (the graph inputs that fix shapes or op parameters).

    Shared by threads as an onnxruntime session is: a plan's input tensors, graph and compute buffer,
    and the CPU backend's work buffer, exist once per model, so `_lock` lets one call at a time plan,
    feed, compute and read back (ggml's own threads already use every core for that one call)."""

    def __init__(self, proto, path, device, input_shapes, n_threads, dtype):
        self.proto = proto
        self.path = str(path)
        g = proto.graph
        self.ir_version = int(proto.ir_version)
        self.opset = next((int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.producer = proto.producer_name
        self.graph_name = g.name
        self.n_nodes = len(g.node)
        self.n_weights = len(g.initializer)
        self.ops = list(dict.fromkeys(n.op_type for n in g.node))
        self.op_counts = dict(Counter(n.op_type for n in g.node))
        self.dtype = dtype
        self._check_ops()
        self.initializers = {}
        for init in g.initializer:
            try:
                self.initializers[init.name] = numpy_helper.to_array(init)
            except Exception as e:
                raise OnnxError(f"onnx_load: initializer '{init.name}' cannot be read: {e}") from None
        self.input_info = {}   # name -> (onnx elem type, declared dims with -1 for dynamic)
        for vi in g.input:
            if vi.name in self.initializers:
                continue
            et = vi.type.tensor_type.elem_type
            if not vi.type.HasField("tensor_type") or et not in NUMERIC_TYPES:
                raise OnnxError(f"onnx_load: input '{vi.name}' has type {type_name(et) if et else 'non-tensor'}; "
                                "only numeric tensors are supported")
            dims = _dims(vi)
            if dims is None:
                raise OnnxError(f"onnx_load: input '{vi.name}' has no shape: give it with input_shapes")
            self.input_info[vi.name] = (et, dims)
        self.output_names = [o.name for o in g.output]
        shapes = {n: list(d) for n, (_, d) in self.input_info.items()}
        for name, shp in (input_shapes or {}).items():
            if name not in shapes:
                warnings.warn(f"onnx_load: input_shapes names an unknown input '{name}'", stacklevel=3)
                continue
            shp = [int(s) for s in shp]
            decl = self.input_info[name][1]
            if len(shp) != len(decl) or any(d >= 0 and d != s for d, s in zip(decl, shp)):
                raise OnnxError(f"onnx_load: input_shapes gives '{name}' the shape {shp}, but the model declares "
                                f"{_fmt(decl)}")
            shapes[name] = shp
        for name, shp in shapes.items():
            if any(s < 0 for s in shp):
                dims = "x".join("?" if s < 0 else str(s) for s in shp)
                example = ", ".join(str(s if s >= 0 else 1) for s in shp)
                raise OnnxError(f"Input '{name}' has dynamic shape [{dims}]. Specify fixed shape via input_shapes "
                                f"parameter, e.g. onnx_load(\"{os.path.basename(self.path)}\", input_shapes="
                                f"{{'{name}': ({example})}}). Alternatively, re-export the model with static shapes.")
        self.input_shapes = {n: tuple(s) for n, s in shapes.items()}
        self._devices(device, n_threads)
        self._lock = threading.RLock()
        self._cpu1 = None  # single_thread_cpu()
        self._plans = ByteCache(lambda: PLAN_CACHE_BYTES)  # plan key -> _Plan
        self.plans_built, self.replans, self.plan_seconds = 0, 0, 0.0
        self.narrowing = True  # graph_for narrows (off once a narrowed plan built other shapes than inferred)
        # Inputs read on the host to plan the graph: found statically here, or by a builder (NeedsValue).
        self.value_inputs = value_inputs(g.node, self.input_info)
        if not self.value_inputs:
            self._plan(self.input_shapes)  # build now: errors surface at load, as in ggmlR
        # else the graph is planned at the first run, for the values it is given

    # -- set-up ---------------------------------------------------------------------------------------
    def _check_ops(self):
        bad = []
        for n in self.proto.graph.node:
            if op_key(n) not in OPS and op_key(n) not in HOST_OPS:
                bad.append(f"'{n.op_type}'" + (f" (domain {n.domain})" if n.domain not in ("", "ai.onnx") else "")
                           + f" at node '{n.name or n.output[0]}'")
        if bad:
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise OnnxError("onnx_load: unsupported ONNX operator " + "; ".join(bad[:5]) + more +
                            ". ggmlpy.onnx.supported_ops() lists the supported ones.")

    def _devices(self, device, n_threads):
        cpu_dev = lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)
        if device is None:  # ggmlR: a GPU when there is one, else the CPU (a software Vulkan device is no GPU)
            try:
                device = "cpu" if is_software_device(get_backend("gpu").device_name) else "gpu"
            except DeviceError:
                device = "cpu"
        # private, so that n_threads= is this model's alone; without it, the thread setting's
        self.cpu = Backend(lib.ggml_backend_dev_init(cpu_dev, _NULL), "CPU")
        if n_threads is not None:
            self.cpu.set_n_threads(checked_count(n_threads, "onnx_load: n_threads"))
        self.backend = self.cpu if str(device).strip().lower() == "cpu" else get_backend(device)
        self.device = self.backend.device_name
        self.blas = None  # on the CPU, ggml's BLAS backend (OpenBLAS) takes the large matrix products
        if self.backend is self.cpu and os.environ.get("GGMLPY_ONNX_BLAS", "1") != "0":
            self.blas = blas_backend(None if n_threads is None else self.cpu.n_threads)

    # -- building -------------------------------------------------------------------------------------
    def _plan(self, shapes: dict, arrays: dict | None = None):
        """The plan for these input shapes and, when the model has value_inputs, these arrays' values
        (None at load: the model is then planned at its first run). Builds and caches it if new."""
        while True:
            if self.value_inputs and arrays is None:
                return None
            values = {n: arrays[n] for n in self.value_inputs} if self.value_inputs else {}
            key = plan_key(shapes, values)
            plan = self._plans.get(key)
            if plan is not None:
                return plan
            t0 = time.perf_counter()
            try:
                plan = _Plan(self, shapes, values=values)
            except MisNarrowed:
                self.narrowing = False
                continue
            except NeedsValue as e:
                found = upstream(self.proto.graph.node, e.names, self.input_info) - self.value_inputs
                if not found:
                    raise OnnxError(str(e)) from None
                self.value_inputs |= found  # plans keyed without their values are no longer valid
                self._plans.clear()
                continue
            self.note_plan(time.perf_counter() - t0, replan=self.plans_built > 0)
            self._plans.put(key, plan, plan.nbytes)
            return plan

    def graph_for(self, shapes: dict):
        """The graph to plan for these input shapes: the model's, or where its outputs read only some
        rows of a value computed row by row, one computing only those rows (narrowing.py). A graph
        whose shapes onnx cannot infer is planned as it is."""
        g = self.proto.graph
        if not self.narrowing or not has_seed(g.node):
            return g
        try:
            shapes = static_shapes(self.proto, shapes)
        except Exception:  # noqa: BLE001 - onnx's inference fails on some valid graphs: no narrowing then
            return g
        return narrow(g, shapes, const_values(g, self.initializers), self.opset) or g

    def single_thread_cpu(self) -> Backend:
        """A one-thread CPU backend of this model's own (made on first use), for graphs whose time
        is in one-task nodes (sequence_bound)."""
        if self._cpu1 is None:
            self._cpu1 = Backend(lib.ggml_backend_dev_init(lib.ggml_backend_dev_by_type(
                lib.GGML_BACKEND_DEVICE_TYPE_CPU), _NULL), "CPU").single_threaded()
        return self._cpu1

    def note_plan(self, seconds: float, replan: bool) -> None:
        """Count a plan built (a re-plan: for a stage that had one, new shapes or values)."""
        self.plans_built += 1
        self.replans += bool(replan)
        self.plan_seconds += seconds

    def _any_plan(self):
        """The most recently used plan, or None before the first run of a model planned at run time."""
        plans = list(self._plans.values())
        return plans[-1] if plans else None

    def run(self, inputs: "dict | list") -> dict:
        """onnx_run(self, inputs): numpy inputs by name (or in order) in, outputs by name out."""
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != len(self.input_info):
                raise OnnxError(f"onnx_run: the model has {len(self.input_info)} inputs "
                                f"({', '.join(self.input_info)}), got {len(inputs)} arrays")
            inputs = dict(zip(self.input_info, inputs))
        if not isinstance(inputs, dict):
            raise TypeError("onnx_run: inputs must be a dict name -> array (or a list in input order)")
        unknown = [n for n in inputs if n not in self.input_info]
        if unknown:
            raise OnnxError(f"onnx_run: unknown input(s) {unknown}; the model's inputs are {list(self.input_info)}")
        missing = [n for n in self.input_info if n not in inputs]
        if missing:
            raise OnnxError(f"onnx_run: missing input(s) {missing}")
        arrays, shapes = {}, {}
        for name, x in inputs.items():
            try:
                a = numeric_array(x, f"onnx_run: input '{name}'")
            except GGMLError as e:
                raise OnnxError(str(e)) from None
            decl = self.input_info[name][1]
            fixed = self.input_shapes[name]
            if a.shape != fixed and (len(decl) != a.ndim or any(d >= 0 and d != s for d, s in zip(decl, a.shape))):
                raise OnnxError(f"onnx_run: input '{name}' has shape {list(a.shape)}, the model expects "
                                f"{_fmt(decl) if list(decl) != list(fixed) else list(fixed)}")
            arrays[name], shapes[name] = a, a.shape
        with self._lock:
            return self._run_checked(arrays, shapes)

    def _run_checked(self, arrays: dict, shapes: dict) -> dict:
        plan = self._plan(shapes, arrays)
        values = plan.run(arrays)
        while plan.deferred:
            for node, attrs in plan.host_steps:
                ins = [None if not n else values[n] if n in values else plan.consts[n].const for n in node.input]
                try:
                    outs = HOST_OPS[op_key(node)](ins, attrs, self.opset)
                except OnnxError as e:
                    raise OnnxError(f"onnx_run: node '{node.name or node.output[0]}': {e}") from None
                values.update((o, a) for o, a in zip(node.output, outs) if o)
            if not plan.rest:
                break
            feeds = {n: values[n] for node in plan.rest for n in node.input
                     if n and n in values and n not in plan.consts}
            if any(a.size == 0 for a in feeds.values()):  # ggml has no empty tensors: numpy for the rest
                values.update(_evaluate_on_host(self, plan.rest, values, plan.consts))
                break
            plan = plan.next_plan(self, feeds)
            values.update(plan.run(feeds))
        return {n: values[n] for n in self.output_names}

    def __str__(self):  # ggmlR's print.onnx_model
        lines = [f"ONNX Model: {self.graph_name}", f"  Producer: {self.producer}",
                 f"  IR version: {self.ir_version} / Opset: {self.opset}",
                 f"  Nodes: {self.n_nodes} / Weights: {self.n_weights}"]
        if self.dtype != "f32":
            lines.append(f"  Weight dtype: {self.dtype.upper()}")
        lines.append(f"  Ops: {', '.join(self.ops)}")
        return "\n".join(lines)

    def __repr__(self):
        return (f"<OnnxModel '{self.graph_name}' from {os.path.basename(self.path)}: {self.n_nodes} nodes, "
                f"opset {self.opset}, on {self.device}>")


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


def _fmt(dims):
    return "[" + ", ".join("?" if d < 0 else str(d) for d in dims) + "]"


def _fold(model: OnnxModel, node, ins):
    """Evaluate a node whose inputs are all constants, with onnx's reference implementation."""
    from onnx.reference import ReferenceEvaluator  # loaded when a node is folded: some 60 modules
    vis = [helper.make_tensor_value_info(n, v.dtype, None) for n, v in zip(node.input, ins) if n]
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    g = helper.make_graph([node], "fold", vis, outs)
    m = helper.make_model(g, opset_imports=model.proto.opset_import, ir_version=model.proto.ir_version)
    feeds = {n: v.const for n, v in zip(node.input, ins) if n}
    res = ReferenceEvaluator(m).run(None, feeds)
    return [const(np.asarray(r)) for r in res]


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


def _evaluate_on_host(model: OnnxModel, nodes, values: dict, consts: dict) -> dict:
    """Nodes evaluated one by one in numpy (onnx's reference implementation, ours for host ops):
    for what follows a host step that produced an empty tensor, which no ggml graph can hold."""
    known = {n: v.const for n, v in consts.items()}
    known.update(values)
    for node in nodes:
        ins = [known[n] if n else None for n in node.input]
        if op_key(node) in HOST_OPS:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            outs = HOST_OPS[op_key(node)](ins, attrs, model.opset)
        else:
            outs = [v.const for v in _fold(model, node, [None if a is None else const(a) for a in ins])]
        known.update((o, a) for o, a in zip(node.output, outs) if o)
    return {n: known[n] for n in model.output_names if n in known}


class _Plan:
    """One model graph for one set of input shapes: built, allocated, ready to compute.

    A node that needs a value known only after the graph ran (the output of a host step such as
    NonMaxSuppression, see ops_host.py) is deferred with everything depending on it: `deferred`
    lists those nodes, and `outputs` includes the values this graph hands them. OnnxModel.run runs
    `host_steps`, then a next _Plan built for the nodes left (`rest`; kept in `next_plans`, by shapes
    and the values of the fed inputs that fix its shapes or parameters, `rest_value_inputs`).

    `values`: inputs whose values are known when planning (name -> array): constants of this graph."""

    compiled = None
    compute_on = None  # a backend (pointer) to compute on instead of the model's: see sequence_bound
    MAX_NEXT_PLANS = 8  # shapes a data-dependent stage keeps graphs for (NMS gives a new count each call)

    def __init__(self, model: OnnxModel, shapes: dict, sched=None, nodes=None, feed_types=None, consts=None,
                 values=None):
        first = nodes is None
        g = model.graph_for(shapes) if first and not values else model.proto.graph
        nodes = list(g.node) if first else nodes
        b = self.builder = Builder(nodes, f16_weights=model.dtype == "f16")
        b.opset = model.opset
        b.columns_first = not (model.backend is model.cpu and model.blas is None)  # see ops_nn.conv2d
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
        ix = GraphIndex(g, model.initializers) if first else None  # what the pattern finders read
        gelu, skipped = find_gelu(ix) if first else ({}, set())
        self.n_fused = len(gelu)
        gelu_private = gelu_input_private(ix, gelu) if gelu else set()  # GELUs a linear layer's node may apply itself
        # Conv + Add + Relu and MatMul + bias as one kernel node each: CPU graphs with ggmlpy's
        # kernels, one stage only
        fusing = b.kernels if first and not any(op_key(n) in HOST_OPS for n in nodes) else None
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
            elif (present and all(v.is_const for v in present) and node.op_type not in _SELF_FOLDING
                    and node.domain in ("", "ai.onnx")):
                try:
                    outs = _fold(model, node, ins)
                except Exception as e:
                    raise b.fail(f"constant folding failed: {e}") from None
                self.n_folded += 1
            else:
                try:
                    outs = OPS[op_key(node)](b, node, ins, attrs)
                except NeedsValue as e:  # the names of the values it needed, for the model to trace
                    e.names = [n for n, v in zip(node.input, ins) if v is not None and not v.is_const and
                               (not e.vals or any(v is w for w in e.vals))]
                    raise
            for name, v in zip(node.output, outs):
                if name:
                    vals[name] = v

        try:
            for k, node in enumerate(nodes):
                b.node = node
                host = op_key(node) in HOST_OPS
                if any(n in pending for n in node.input if n) or (
                        host and any(not vals[n].is_const for n in node.input if n and n in vals)):
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
                if k in splits and node.input[0] in vals:
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
        needed = {n for node in self.deferred for n in node.input if n in vals and not vals[n].is_const}
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
        self.next_plans, self.rest_value_inputs, self.n_next_built = {}, None, 0
        self._build_graph(out_ts)
        if b.kernels is not None and b.kernels.linear_packed is not None and b.packed_linears:
            b.kernels.chain_linears(self.graph)
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
                a = np.where(ai < 0, ai + L, ai) if lo < 0 else ai  # (each numpy pass costs ~10 us cold)
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

    def next_plan(self, model: OnnxModel, feeds: dict) -> "_Plan":
        """The graph of the deferred nodes for these fed values (built once per set of shapes and
        values of the feeds that fix its shapes or parameters)."""
        if self.rest_value_inputs is None:
            self.rest_value_inputs = value_inputs(self.rest, feeds)
        while True:
            values = {n: feeds[n] for n in self.rest_value_inputs}
            key = plan_key({n: a.shape for n, a in feeds.items()}, values) + (
                tuple(sorted((n, a.dtype.str) for n, a in feeds.items())),)
            plan = self.next_plans.pop(key, None)
            if plan is not None:
                break
            types = {n: helper.np_dtype_to_tensor_dtype(a.dtype) for n, a in feeds.items()}
            t0 = time.perf_counter()
            try:
                plan = _Plan(model, {n: a.shape for n, a in feeds.items()}, nodes=self.rest, feed_types=types,
                             consts=self.consts, values=values)
            except NeedsValue as e:
                found = upstream(self.rest, e.names, feeds) - self.rest_value_inputs
                if not found:
                    raise OnnxError(str(e)) from None
                self.rest_value_inputs |= found
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


# -- ggmlR's API ----------------------------------------------------------------------------------------
def onnx_load(path: "str | os.PathLike", device: str | None = None,
              input_shapes: dict | None = None, n_threads: int | None = None, dtype: str = "f32") -> OnnxModel:
    """Load an ONNX model (a file path, or an onnx.ModelProto) and build it as one ggml graph on `device`.

    device: "cpu", "vulkan", "vulkan:1", "cuda", "gpu", "rpc://host:port"; None takes a GPU when one is
    available, else the CPU (ggmlR's default). input_shapes: {input name: full shape} fixing dynamic
    dimensions (required when the model has any). n_threads: this model's CPU threads (default: the
    thread setting, ggmlpy.set_num_threads(), which follows later changes). dtype: "f32", or "f16" to store the weights of MatMul, Gemm and Conv with at least 256
    elements in half precision (inputs, outputs and arithmetic stay f32)."""
    if dtype not in DTYPES:
        raise ValueError(f"onnx_load: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if input_shapes is not None and not isinstance(input_shapes, dict):
        raise TypeError("onnx_load: input_shapes must be a dict {input name: shape}")
    proto = _read_model(path)
    where = "<ModelProto>" if not isinstance(path, (str, bytes, os.PathLike)) else os.path.abspath(os.fspath(path))
    return OnnxModel(proto, where, device, input_shapes, n_threads, DTYPES[dtype])


def onnx_run(model: OnnxModel, inputs: "dict | list") -> dict:
    """Run the model: a dict name -> numpy array (or a list in input order) in, a dict of outputs
    (numpy, ONNX's row-major layout and element types) out. The graph built for these input shapes
    is reused; new shapes (for dynamic dimensions) build and keep another."""
    if not isinstance(model, OnnxModel):
        raise TypeError("onnx_run: model must come from onnx_load()")
    return model.run(inputs)


def onnx_summary(model: OnnxModel) -> dict:
    """ggmlR's summary: ir_version, opset_version, producer, graph_name, n_nodes, n_initializers,
    ops (unique, in order of appearance); plus op_counts (a histogram), inputs, outputs (shape None when
    a host step decides it at run time), device, and host_ops (NonMaxSuppression, RoiAlign: run in numpy
    between ggml graphs); value_inputs (inputs whose values fix shapes or parameters: the graph is
    planned for their values at run time), planned (False until the first run of such a model: then
    ggml_nodes, cpu_fallback_ops and the output shapes are None, not known yet), plans (graphs cached),
    plans_built and replans (plans built after the first for a stage: new shapes or values), and
    narrowed_nodes (nodes computing only the rows the outputs read, see narrowing.py; None before
    the first plan)."""
    if not isinstance(model, OnnxModel):
        raise TypeError("onnx_summary: model must come from onnx_load()")
    plan = model._any_plan()
    known = {name: list(v.shape) for name, v, *_ in plan.outputs} if plan is not None else {}
    outs = {name: known.get(name) for name in model.output_names}  # None: known only at run time
    host = {n.op_type for n in model.proto.graph.node if op_key(n) in HOST_OPS}
    return {"ir_version": model.ir_version, "opset_version": model.opset, "producer": model.producer,
            "graph_name": model.graph_name, "n_nodes": model.n_nodes, "n_initializers": model.n_weights,
            "ops": list(model.ops), "op_counts": dict(model.op_counts), "inputs": onnx_inputs(model),
            "outputs": outs, "device": model.device, "dtype": model.dtype,
            "ggml_nodes": plan.n_nodes if plan is not None else None,
            "cpu_fallback_ops": list(plan.cpu_fallback) if plan is not None else None,
            "host_ops": sorted({n.op_type for n in plan.deferred if op_key(n) in HOST_OPS} if plan is not None
                               else host),
            "value_inputs": [n for n in model.input_info if n in model.value_inputs],
            "planned": plan is not None, "plans": len(model._plans), "plans_built": model.plans_built,
            "replans": model.replans, "narrowed_nodes": plan.n_narrowed if plan is not None else None}


def onnx_inputs(model: OnnxModel) -> dict:
    """The model's inputs (initializers excluded): name -> shape as fixed at load (ONNX order)."""
    if not isinstance(model, OnnxModel):
        raise TypeError("onnx_inputs: model must come from onnx_load()")
    return {n: list(s) for n, s in model.input_shapes.items()}



_CUSTOM_OPS = (lib.GGML_OP_CUSTOM, lib.GGML_OP_MAP_CUSTOM1, lib.GGML_OP_MAP_CUSTOM2)


def onnx_profile(model: OnnxModel, inputs: "dict | list", runs: int = 3) -> list:
    """Time per ggml op type for one set of inputs: [(op, ms per run, node count)], slowest first.

    Runs the model's graph through ggml's scheduler with an evaluation callback after every node,
    so each node is timed alone (a few microseconds of overhead each; the total exceeds onnx_run's).
    When the model has planned again (new shapes, or new values of its value_inputs), a last row
    ("onnx.replan", mean ms to build a plan, number of re-plans so far) says what that costs."""
    arrays = {n: np.asarray(v) for n, v in (inputs.items() if isinstance(inputs, dict)
                                             else zip(model.input_info, inputs))}
    with model._lock:
        return _profile(model, arrays, runs)


def _profile(model: OnnxModel, arrays: dict, runs: int) -> list:
    model.run(arrays)  # builds (or finds) the plan and checks the inputs
    shapes = {n: a.shape for n, a in arrays.items()}
    plan = model._plan(shapes, arrays)
    values = {n: arrays[n] for n in model.value_inputs}
    first = model.blas if model.backend is model.cpu else model.backend
    sched = Scheduler([model.cpu] if first is None else [first, model.cpu], graph_size=max(2048, plan.n_nodes + 64))
    totals, counts = defaultdict(float), defaultdict(int)
    last = [0.0]

    def cb(t, ask, _ud):
        if ask:
            return True
        now = time.perf_counter()
        name = ffi.string(lib.ggml_op_desc(t)).decode()
        if t.op in _CUSTOM_OPS and ffi.string(t.name).startswith(b"ggmlpy."):
            name = ffi.string(t.name).decode()  # which of ggmlpy's kernels (graph.Builder.kernel_node)
        totals[name] += now - last[0]
        counts[name] += 1
        last[0] = now
        return True
    c_cb = ffi.callback("ggml_backend_sched_eval_callback", cb)
    lib.ggml_backend_sched_set_eval_callback(sched.ptr, c_cb, _NULL)
    # the plan's allocator owns the graph's memory: a second placement would clash, so build a fresh plan
    fresh = _Plan(model, shapes, sched=sched, values=values)
    try:
        for _ in range(runs):
            last[0] = time.perf_counter()
            fresh.run(arrays)
    finally:
        fresh.free()
        sched.free()
    n = max(1, runs)
    rows = sorted(((k, v * 1e3 / n, counts[k] // n) for k, v in totals.items()), key=lambda r: -r[1])
    if model.replans:  # planning again for new shapes or values: its mean time, and how often so far
        rows.append(("onnx.replan", model.plan_seconds * 1e3 / model.plans_built, model.replans))
    return rows


def onnx_device_info(model: OnnxModel) -> dict:
    """ggmlR's placement diagnostics: backends (on the CPU, "BLAS" too when ggml's BLAS backend takes the
    large products), n_backends, n_splits (1: one backend computes it all),
    n_nodes (ggml nodes), gpu_ops and cpu_ops (node counts), cpu_only_ops (op -> count of the nodes the
    device has no kernel for, which run on the CPU)."""
    if not isinstance(model, OnnxModel):
        raise TypeError("onnx_device_info: model must come from onnx_load()")
    plan = model._any_plan()
    on_cpu = model.backend is model.cpu
    if plan is None:  # planned at the first run (value_inputs): the placement is not known yet
        backends = (["BLAS"] if on_cpu and model.blas is not None else [] if on_cpu else [model.backend.name]) + \
            [model.cpu.name]
        return {"backends": backends, "n_backends": len(backends), "n_splits": None, "n_nodes": None,
                "gpu_ops": None, "cpu_ops": None, "cpu_only_ops": None, "planned": False}
    nodes = [lib.ggml_graph_node(plan.graph, i) for i in range(plan.n_nodes)]
    cpu_only: dict = {}
    n_dev = 0
    for p in nodes:
        if not on_cpu and lib.ggml_backend_supports_op(model.backend.ptr, p):
            n_dev += 1
        elif not on_cpu:
            name = ffi.string(lib.ggml_op_name(p.op)).decode()
            cpu_only[name] = cpu_only.get(name, 0) + 1
    backends = ([model.backend.name] if not on_cpu else ["BLAS"] if plan.sched is not None else []) + [model.cpu.name]
    splits = int(lib.ggml_backend_sched_get_n_splits(plan.sched.ptr)) if plan.sched is not None else 1
    return {"backends": backends, "n_backends": len(backends), "n_splits": splits, "n_nodes": plan.n_nodes,
            "gpu_ops": n_dev, "cpu_ops": plan.n_nodes - n_dev, "cpu_only_ops": cpu_only, "planned": True}
