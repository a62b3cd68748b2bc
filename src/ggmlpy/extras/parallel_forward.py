"""ggmlR's model-parallel forwards over several devices: ggml_pp_forward (pipeline: layers split
into stages, one device each, one activation hand-off between stages), ggml_pp_dp_forward (the
batch split across replicas of such a pipeline) and ggml_tp_dp_forward (Y = X W^T with W's rows
split across the devices of a group, the batch split across groups).

Everything runs on ggml's generic backend API, so a stage or group member is any ggml device: an
int is a Vulkan device index, as in ggmlR, and a string any ggmlpy device spelling ("cpu",
"vulkan:1", "rpc://host:port", ...). The hand-off between stages is ggml_backend_tensor_copy
(through host memory when the devices differ: ggmlR's "host-staging"); its other transports
("opaque-fd", "device-group") are Vulkan peer-to-peer paths of ggmlR's own ggml fork. Replicas and
group members run one after another, as in ggmlR.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..bindings import lib
from ..core.api import (GGML_TYPE_F32, ggml_backend_alloc_ctx_tensors, ggml_backend_graph_compute,
                        ggml_backend_init_by_name, ggml_init, ggml_new_tensor, ggml_new_tensor_2d)
from ..core.buffers import ggml_backend_tensor_get_data, ggml_backend_tensor_set_data
from ..core.handles import Tensor
from ..core.device import _resolve
from ..core.graph import ggml_build_forward_expand
from ..core.ops import ggml_mul_mat
from ..core.vulkan import ggml_vulkan_init
from ..errors import GGMLError
from .vulkan_parallel import check_transport

__all__ = ["ggml_pp_forward", "ggml_pp_dp_forward", "ggml_tp_dp_forward"]

_MIB16 = 16 * 1024 * 1024


def _backend_for(device):
    """A fresh backend for one stage or group member (freed by the caller)."""
    if isinstance(device, (bool, np.bool_)):
        raise GGMLError(f"a device is a Vulkan index or a device name, got {device!r}")
    if isinstance(device, (int, np.integer)):
        return ggml_vulkan_init(int(device))
    if isinstance(device, str):
        return ggml_backend_init_by_name(_resolve(device))
    raise GGMLError(f"a device is a Vulkan index or a device name, got {device!r}")


def _batch_shards(m: int, n: int) -> list:
    """Rows 0..m-1 in n contiguous, near-equal blocks (the first ones one longer), empty ones dropped."""
    if n <= 1:
        return [np.arange(m)]
    base, rem = divmod(m, n)
    sizes = [base + (1 if i < rem else 0) for i in range(n)]
    ends = np.cumsum(sizes)
    return [np.arange(e - s, e) for s, e in zip(sizes, ends) if s > 0]


def _check_replicas(replicas, what):
    if not isinstance(replicas, (list, tuple)) or not replicas:
        raise GGMLError(f"replicas must be a non-empty list of device groups ({what})")
    groups = [list(r) if isinstance(r, (list, tuple, np.ndarray)) else [r] for r in replicas]
    if any(not grp for grp in groups):
        raise GGMLError("every replica needs at least one device")
    return groups


def ggml_pp_forward(stages: Sequence[dict], x: ArrayLike, out_shape: Sequence[int], mem_per_stage: int = _MIB16) -> np.ndarray:
    """Run a forward pass split by layers across devices (pipeline parallelism).

    Each stage is a dict: `device` (a Vulkan index or a device name), `in_shape` (the ggml ne of
    its input, 1 to 4 entries) and `build(ctx, input)`, which builds the stage's graph from the
    input tensor in a no_alloc context and returns the output tensor, or a dict {"output": t,
    "set_weights": fn} whose fn fills the stage's weights once they are allocated on the device.
    `x` feeds the first stage (ggml order); each later stage's input receives the previous
    stage's output (same number of elements, f32). Returns the first prod(out_shape) values of
    the last output, flat, in ggml order."""
    if not isinstance(stages, (list, tuple)) or not stages:
        raise GGMLError("stages must be a non-empty list of stage descriptors")
    x = np.ravel(np.asarray(x, dtype=np.float32))
    n_out = int(np.prod([int(d) for d in out_shape])) if len(out_shape) else 1
    keep = []                                 # backends, contexts and buffers live until the pass is done
    prev = None
    try:
        for i, st in enumerate(stages):
            if not isinstance(st, dict) or not {"device", "in_shape", "build"} <= set(st):
                raise GGMLError(f"stage {i + 1} must be a dict with device, in_shape and build")
            shape = [int(d) for d in np.atleast_1d(st["in_shape"])]
            if not 1 <= len(shape) <= 4 or min(shape) < 1:
                raise GGMLError(f"stage {i + 1}: in_shape must be 1 to 4 positive sizes (a ggml ne), got {shape}")
            backend = _backend_for(st["device"])
            keep.append(backend)
            ctx = ggml_init(int(mem_per_stage), no_alloc=True)
            keep.append(ctx)
            inp = ggml_new_tensor(ctx, GGML_TYPE_F32, len(shape), shape)
            built = st["build"](ctx, inp)
            out, set_weights = (built.get("output"), built.get("set_weights")) if isinstance(built, dict) else (built, None)
            if not isinstance(out, Tensor):
                raise GGMLError(f"stage {i + 1}: build() must return a tensor or {{'output': tensor, ...}}")
            graph = ggml_build_forward_expand(ctx, out)
            buf = ggml_backend_alloc_ctx_tensors(ctx, backend)
            keep.append(buf)
            if set_weights is not None:
                set_weights()
            if prev is None:
                if x.size != inp.nelements():
                    raise GGMLError(f"x has {x.size} values, stage 1's input has {inp.nelements()} ({shape})")
                ggml_backend_tensor_set_data(inp, x)
            else:
                if prev.nelements() != inp.nelements() or prev.type != GGML_TYPE_F32:
                    raise GGMLError(f"stage {i + 1}: its input has {inp.nelements()} values, the previous stage's "
                                    f"output {prev.nelements()} ({'f32' if prev.type == GGML_TYPE_F32 else 'not f32'})")
                if not prev.is_contiguous():
                    raise GGMLError(f"stage {i}: its output must be contiguous to hand it to the next stage")
                if prev.ne == inp.ne:
                    lib.ggml_backend_tensor_copy(prev.ptr, inp.ptr)  # through host memory across devices
                else:                                                # same values, another shape
                    ggml_backend_tensor_set_data(inp, ggml_backend_tensor_get_data(prev))
            ggml_backend_graph_compute(backend, graph)
            prev = out
        if n_out > prev.nelements():
            raise GGMLError(f"out_shape asks for {n_out} values, the last stage's output has {prev.nelements()}")
        return ggml_backend_tensor_get_data(prev, n_elements=n_out).astype(np.float64)
    finally:
        for obj in reversed(keep):
            obj.free()


def ggml_pp_dp_forward(make_stages: Callable, x: ArrayLike, replicas: Sequence, out_ncol: int,
                       mem_per_stage: int = _MIB16) -> np.ndarray:
    """Pipeline x data parallelism: the rows (samples) of `x` [M, K] are split into contiguous
    shards, one per replica; replica i runs `make_stages(replicas[i], m_shard)` (its devices and
    its shard's size -> a stage list for ggml_pp_forward, first in_shape [K, m_shard]) on its
    shard. Returns the [M, out_ncol] result, each shard's rows in place."""
    if not callable(make_stages):
        raise GGMLError("make_stages must be a function(devices, m_shard) returning a stage list")
    groups = _check_replicas(replicas, "each a list of pipeline devices")
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise GGMLError(f"x must be a matrix [samples, features], got {x.ndim} dims")
    n = int(out_ncol)
    y = np.zeros((x.shape[0], n))
    for idx, devices in zip(_batch_shards(x.shape[0], len(groups)), groups):
        stages = make_stages(devices, len(idx))
        # rows of x[idx] (row-major) are ggml ne [K, m_shard]: one column per sample
        out = ggml_pp_forward(stages, x[idx].ravel(), (n, len(idx)), mem_per_stage)
        y[idx] = out.reshape(len(idx), n)
    return y


def _row_bands(nrows: int, n: int, weights) -> list:
    """Contiguous bands of rows, one per device, sized by `weights` (even without), covering all rows."""
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
    if w.size != n or np.any(~np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise GGMLError(f"weights must be {n} non-negative numbers, not all zero")
    bounds = np.floor(np.cumsum(w) / w.sum() * nrows).astype(int)
    bounds[-1] = nrows
    lows = np.concatenate([[0], bounds[:-1]])
    return [(int(lo), int(hi)) for lo, hi in zip(lows, bounds)]


def _mul_mat_on(device, w_band: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x @ w_band.T with ggml's mul_mat on one device."""
    (nb, k), m = w_band.shape, x.shape[0]
    backend = _backend_for(device)
    ctx = ggml_init(_MIB16, no_alloc=True)
    buf = None
    try:
        tw = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, nb)
        tx = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, m)
        out = ggml_mul_mat(ctx, tw, tx)
        lib.ggml_mul_mat_set_prec(out.ptr, lib.GGML_PREC_F32)
        graph = ggml_build_forward_expand(ctx, out)
        buf = ggml_backend_alloc_ctx_tensors(ctx, backend)
        ggml_backend_tensor_set_data(tw, np.ascontiguousarray(w_band, dtype=np.float32))
        ggml_backend_tensor_set_data(tx, np.ascontiguousarray(x, dtype=np.float32))
        ggml_backend_graph_compute(backend, graph)
        return ggml_backend_tensor_get_data(out).reshape(m, nb).astype(np.float64)
    finally:
        if buf is not None:
            buf.free()
        ctx.free()
        backend.free()


def ggml_tp_dp_forward(W: ArrayLike, X: ArrayLike, replicas: Sequence, weights: ArrayLike | None = None, transport: str = "host-staging") -> np.ndarray:
    """Y = X @ W.T ([M, N]) by tensor x data parallelism: the rows of X (the batch) are split into
    contiguous shards, one per replica (a group of devices); within a group, W's rows [N, K] are
    split into bands (by `weights`, one per device, even without), each device multiplies its
    band with ggml's mul_mat (f32), and the bands are gathered on the host. Only ggmlR's
    "host-staging" transport exists here (its others are Vulkan peer-to-peer paths of its fork)."""
    check_transport(transport)
    groups = _check_replicas(replicas, "each a list of devices")
    W = np.asarray(W, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if W.ndim != 2 or X.ndim != 2:
        raise GGMLError("W [N, K] and X [M, K] must be matrices")
    if X.shape[1] != W.shape[1]:
        raise GGMLError(f"X has {X.shape[1]} columns but W has {W.shape[1]} (both are the K/input dimension)")
    Y = np.zeros((X.shape[0], W.shape[0]))
    for idx, group in zip(_batch_shards(X.shape[0], len(groups)), groups):
        for device, (lo, hi) in zip(group, _row_bands(W.shape[0], len(group), weights)):
            if hi > lo:
                Y[np.ix_(idx, np.arange(lo, hi))] = _mul_mat_on(device, W[lo:hi], X[idx])
    return Y
