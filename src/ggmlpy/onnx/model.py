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

import os
import threading
import time
import warnings
from collections import Counter, defaultdict

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from ..bindings import ffi, lib
from .._arrays import numeric_array
from ..core.device import Backend, blas_backend, get_backend
from ..core.registry import is_software_device
from ..core.sched import Scheduler
from ..core.threads import checked_count
from ..errors import DeviceError, GGMLError
from ..graph import ByteCache
from . import leniency
# their builders register in OPS
from . import (ops_control, ops_conv, ops_elementwise, ops_extra, ops_gather_nd, ops_norm, ops_pool,  # noqa: F401
               ops_products, ops_reduce, ops_resize, ops_rnn, ops_shape)
from .graph import (NUMERIC_TYPES, NeedsValue, OnnxError, op_key, type_name)
from .fusion import (const_values)
from .narrowing import has_seed, narrow, static_shapes
from .op_table import OPS
from .ops_host import HOST_OPS
from .empty_branches import split_empty
from .plan import MisNarrowed, OnnxShapePlan, plan_key
from .shaping import has_subgraphs, reads, upstream, value_inputs

_NULL = ffi.NULL
# Resolve now what the finalizers call: cffi resolves a symbol under a lock of its own, and a
# finalizer run by the garbage collector during another resolution would wait on it forever.
for _sym in ("ggml_backend_free", "ggml_gallocr_free", "ggml_backend_buffer_free", "ggml_free",
             "ggml_backend_sched_free"):
    getattr(lib, _sym)
DTYPES = {"f32": "f32", "f16": "f16", "fp16": "f16", "float16": "f16"}
# The bytes of built plans (graph buffers and weights) a model keeps; the least recently used go first.
PLAN_CACHE_BYTES = int(os.environ.get("GGMLPY_ONNX_PLAN_CACHE_BYTES", 1 << 30))



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
    package knows is refused, as onnxruntime refuses it (its operators' meaning is unknown).
    What onnxruntime loads though the checker refuses it (leniency.py) is loaded with a warning."""
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - any failure of the checker is the file's
        msg = " ".join(str(e).strip().splitlines()[:3]) or type(e).__name__
        found = leniency.defects(model)
        try:
            if not found:
                raise
            onnx.checker.check_model(leniency.mended(model))
        except Exception:  # noqa: BLE001 - refused as the checker refused it
            raise OnnxError(f"onnx_load: {what}: {msg}") from None
        warnings.warn(f"onnx_load: the model is loaded as onnxruntime loads it, though it is not valid ONNX: "
                      + "; ".join(found), stacklevel=4)
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
        # name -> (onnx elem type, declared dims with -1 for dynamic; None without a shape: the feed's)
        self.input_info = {}
        for vi in g.input:
            if vi.name in self.initializers:
                continue
            et = vi.type.tensor_type.elem_type
            if not vi.type.HasField("tensor_type") or et not in NUMERIC_TYPES:
                raise OnnxError(f"onnx_load: input '{vi.name}' has type {type_name(et) if et else 'non-tensor'}; "
                                "only numeric tensors are supported")
            self.input_info[vi.name] = (et, _dims(vi))
        self.output_names = [o.name for o in g.output]
        shapes = {n: None if d is None else list(d) for n, (_, d) in self.input_info.items()}
        for name, shp in (input_shapes or {}).items():
            if name not in shapes:
                warnings.warn(f"onnx_load: input_shapes names an unknown input '{name}'", stacklevel=3)
                continue
            shp = [int(s) for s in shp]
            decl = self.input_info[name][1]
            if decl is not None and (len(shp) != len(decl) or any(d >= 0 and d != s for d, s in zip(decl, shp))):
                raise OnnxError(f"onnx_load: input_shapes gives '{name}' the shape {shp}, but the model declares "
                                f"{_fmt(decl)}")
            shapes[name] = shp
        for name, shp in shapes.items():
            if shp is not None and any(s < 0 for s in shp):
                dims = "x".join("?" if s < 0 else str(s) for s in shp)
                example = ", ".join(str(s if s >= 0 else 1) for s in shp)
                raise OnnxError(f"Input '{name}' has dynamic shape [{dims}]. Specify fixed shape via input_shapes "
                                f"parameter, e.g. onnx_load(\"{os.path.basename(self.path)}\", input_shapes="
                                f"{{'{name}': ({example})}}). Alternatively, re-export the model with static shapes.")
        self.input_shapes = {n: None if s is None else tuple(s) for n, s in shapes.items()}  # None: the feed's
        self._devices(device, n_threads)
        self._lock = threading.RLock()
        self._cpu1 = None  # single_thread_cpu()
        self._plans = ByteCache(lambda: PLAN_CACHE_BYTES)  # plan key -> OnnxShapePlan
        self.plans_built, self.replans, self.plan_seconds = 0, 0, 0.0
        self.narrowing = True  # graph_for narrows (off once a narrowed plan built other shapes than inferred)
        # Inputs read on the host to plan the graph: found statically here, or by a builder (NeedsValue).
        self.value_inputs = value_inputs(g.node, self.input_info)
        if not self.value_inputs and None not in self.input_shapes.values():
            self._plan(self.input_shapes)  # build now: errors surface at load, as in ggmlR
        # else the graph is planned at the first run, for the values (or shapes) it is given

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
            if arrays is None and (self.value_inputs or None in shapes.values()):
                return None
            values = {n: arrays[n] for n in self.value_inputs} if self.value_inputs else {}
            key = plan_key(shapes, values)
            plan = self._plans.get(key)
            if plan is not None:
                return plan
            t0 = time.perf_counter()
            try:
                plan = OnnxShapePlan(self, shapes, values=values)
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
        if not self.narrowing or not has_seed(g.node) or has_subgraphs(g.node):
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
            if decl is not None and a.shape != fixed and (
                    len(decl) != a.ndim or any(d >= 0 and d != s for d, s in zip(decl, a.shape))):
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
            feeds = {n: values[n] for node in plan.rest for n in reads(node) if n in values and n not in plan.consts}
            nodes = None
            if any(a.size == 0 for a in feeds.values()) or plan.rest_reads_empty:  # no empty tensors in ggml:
                nodes, computed = split_empty(self, plan.rest, values, plan.consts)  # numpy for their branches
                values.update(computed)
                if not nodes:
                    break
                feeds = {n: values[n] for node in nodes for n in node.input
                         if n and n in values and n not in plan.consts}
            plan = plan.next_plan(self, feeds, nodes)
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


def _fmt(dims):
    return "[" + ", ".join("?" if d < 0 else str(d) for d in dims) + "]"


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
    """The model's inputs (initializers excluded): name -> shape as fixed at load (ONNX order); None for
    an input the model declares without a shape (it takes the shape it is fed)."""
    if not isinstance(model, OnnxModel):
        raise TypeError("onnx_inputs: model must come from onnx_load()")
    return {n: None if s is None else list(s) for n, s in model.input_shapes.items()}


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
            name = ffi.string(t.name).decode()  # which of ggmlpy's kernels (graph.OnnxGraphBuilder.kernel_node)
        totals[name] += now - last[0]
        counts[name] += 1
        last[0] = now
        return True
    c_cb = ffi.callback("ggml_backend_sched_eval_callback", cb)
    lib.ggml_backend_sched_set_eval_callback(sched.ptr, c_cb, _NULL)
    # the plan's allocator owns the graph's memory: a second placement would clash, so build a fresh plan
    fresh = OnnxShapePlan(model, shapes, sched=sched, values=values)
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
