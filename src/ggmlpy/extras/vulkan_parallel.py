"""ggmlR's Vulkan tensor-parallel helpers, built on what the pinned ggml has.

ggmlR's fork of ggml adds a Vulkan "split" buffer type and peer-to-peer transports. ggml 0.25.3
has neither, but it has a meta backend (core/meta_backend.py): one device made of several, with
every weight split across them. So here

- ggml_vulkan_split_buffer_type is a meta device over the Vulkan devices, whose split function
  cuts each weight by rows with ggmlR's arithmetic (ggml_vulkan_split_row_ranges) and mirrors
  graph inputs (ggml_set_input) and single-row tensors;
- ggml_vulkan_split_mul_mat computes X W^T on such a device: each device multiplies its band of
  W's rows by the whole X, and reading the result gathers the bands;
- ggml_vulkan_p2p_selftest copies a byte pattern between two devices with
  ggml_backend_tensor_copy (through host memory: ggmlR's "host-staging", the only transport
  here) and compares it;
- ggml_vulkan_shutdown releases every backend, pool and cached graph ggmlpy holds on Vulkan
  devices (ggml 0.25.3 has no call that tears its Vulkan instance down).

The cores take ggml devices of any kind, so the same code runs over CPU devices where there is
no GPU; the ggml_vulkan_* names pick Vulkan devices by index, as ggmlR's do.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..bindings import ffi, lib
from ..core.api import (GGML_TYPE_F32, GGML_TYPE_I32, ggml_backend_alloc_ctx_tensors, ggml_backend_graph_compute,
                        ggml_free, ggml_init, ggml_new_tensor_1d, ggml_new_tensor_2d, ggml_set_input, ggml_set_name)
from ..core.registry_api import Device, ggml_backend_dev_init
from ..core.buffers import ggml_backend_tensor_get_data, ggml_backend_tensor_set_data
from ..core.device import cached_backend_names, forget_backend
from ..core.graph import ggml_build_forward_expand
from ..core.graph_alloc import ggml_gallocr_alloc_graph, ggml_gallocr_new
from ..core.meta_backend import MetaDevice, ggml_backend_meta_device
from ..core.ops import ggml_mul_mat
from ..core.vulkan import (MAX_DEVICES, ggml_vulkan_device_count, ggml_vulkan_init, ggml_vulkan_split_row_ranges,
                           vulkan_device_handles)
from ..errors import GGMLError
from ..keras.model import release_model_backends
from ..params import NamedList
from ..runtime.state import STATE, release_device

__all__ = ["ggml_vulkan_p2p_selftest", "ggml_vulkan_shutdown", "ggml_vulkan_split_buffer_type",
           "ggml_vulkan_split_mul_mat"]

TRANSPORTS = ("host-staging", "opaque-fd", "device-group")
_INPUT_FLAG = 1  # GGML_TENSOR_FLAG_INPUT


def check_transport(transport: str) -> None:
    """ggmlR's transports: only "host-staging" exists on ggml 0.25.3."""
    if transport not in TRANSPORTS:
        raise GGMLError(f"transport must be one of {list(TRANSPORTS)}, got {transport!r}")
    if transport != "host-staging":
        raise GGMLError(f"transport {transport!r}: only 'host-staging' exists on ggml 0.25.3 (ggmlR's "
                        "'opaque-fd' and 'device-group' are Vulkan peer-to-peer paths of its own ggml fork)")


def vulkan_devices(n_devices=None, device_ids=None, what: str = "ggml_vulkan") -> list[int]:
    """The Vulkan device indices a call names (ggmlR's n_devices / device_ids), checked."""
    count = ggml_vulkan_device_count()
    if device_ids is not None:
        ids = [int(i) for i in np.atleast_1d(device_ids)]
    else:
        n = count if n_devices is None else n_devices
        if isinstance(n, bool) or int(n) != n:
            raise GGMLError(f"{what}: n_devices must be a whole number, got {n_devices!r}")
        ids = list(range(int(n)))
    if not 1 <= len(ids) <= MAX_DEVICES:
        raise GGMLError(f"{what}: n_devices must be in 1..{MAX_DEVICES}, got {len(ids)}"
                        + ("" if count else " (no Vulkan device is visible)"))
    bad = [i for i in ids if not 0 <= i < count]
    if bad:
        raise GGMLError(f"{what}: Vulkan device(s) {bad} do not exist ({count} Vulkan device(s) visible)")
    return ids


# -- the split buffer type: a meta device splitting weights by rows ----------------------------------------
def _row_split(weights):
    """A meta device split function: a tensor's rows (ggml's ne1) cut by ggmlR's row arithmetic;
    graph inputs, single-row tensors and higher-dimensional ones mirrored."""
    def split(info: dict, n_devs: int):
        ne = info["ne"]
        if info["flags"] & _INPUT_FLAG or ne[1] < 2 or ne[2] != 1 or ne[3] != 1:
            return "mirrored"
        r = ggml_vulkan_split_row_ranges(ne[1], n_devs, weights)
        return (1, [int(h - lo) for lo, h in zip(r["row_low"], r["row_high"])])
    return split


_SPLITS: dict[tuple, MetaDevice] = {}  # ggml keeps a meta device for the process: one per configuration


def split_device(devices: Sequence[Device], weights=None) -> MetaDevice:
    """The meta device over `devices` that row-splits weights by `weights` (cached)."""
    w = None if weights is None else tuple(float(v) for v in np.asarray(weights, dtype=np.float64).ravel())
    if w is not None and len(w) != len(devices):
        raise GGMLError(f"weights length ({len(w)}) must equal n_devices ({len(devices)})")
    key = (tuple(int(ffi.cast("uintptr_t", d.ptr)) for d in devices), w)
    meta = _SPLITS.get(key)
    if meta is None:
        meta = _SPLITS[key] = ggml_backend_meta_device(list(devices), _row_split(w))
    return meta


def _slice_bytes(meta: MetaDevice, n: int, k: int, weights) -> float:
    """Bytes an f32 [n, k] weight takes on the split device: each device's band of rows, in that
    device's own buffer type (ggml's meta buffer type reports the largest whole tensor instead)."""
    r = ggml_vulkan_split_row_ranges(n, meta.n_devs, weights)
    ctx = ggml_init(16 * int(lib.ggml_tensor_overhead()), no_alloc=True)
    try:
        total = 0
        for dev, lo, hi in zip(meta.devices, r["row_low"], r["row_high"]):
            if hi > lo:
                band = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, int(hi - lo))
                total += int(lib.ggml_backend_buft_get_alloc_size(lib.ggml_backend_dev_buffer_type(dev.ptr), band.ptr))
        return float(total)
    finally:
        ggml_free(ctx)


def ggml_vulkan_split_buffer_type(n_devices: int | None = None, main_device: int = 0, weights: ArrayLike | None = None,
                                  device_ids: Sequence[int] | None = None, transport: str = "host-staging",
                                  probe: Sequence[int] | None = None) -> NamedList:
    """ggmlR's tensor-split buffer type over Vulkan devices (all of them by default, or
    `device_ids`): a weight allocated in it has its rows split across the devices
    (ggml_vulkan_split_row_ranges, by `weights`); graph inputs and single-row tensors are
    mirrored on every device. Returns {"ptr": the ggml buffer type, "name", "alloc_size": the
    bytes an f32 weight of `probe` = (N rows, K columns) takes over the devices (0 without
    probe), "device": the meta device to allocate and compute on (ggml_backend_dev_init)}.
    Cached per configuration. `main_device` must be one of the devices (ggmlR keeps unsplit
    tensors there; ggml's meta backend mirrors them instead)."""
    check_transport(transport)
    ids = vulkan_devices(n_devices, device_ids, "ggml_vulkan_split_buffer_type")
    if int(main_device) not in range(ggml_vulkan_device_count()):
        raise GGMLError(f"ggml_vulkan_split_buffer_type: main_device {main_device} does not exist")
    devs = vulkan_device_handles()
    meta = split_device([Device(devs[i]) for i in ids], weights)
    alloc = 0.0
    if probe is not None:
        p = [int(v) for v in np.atleast_1d(probe)]
        if len(p) != 2 or min(p) < 1:
            raise GGMLError(f"probe must be (N rows, K columns), two positive sizes, got {probe!r}")
        alloc = _slice_bytes(meta, p[0], p[1], weights)
    wname = "" if weights is None else ":" + ",".join(f"{float(v):g}" for v in np.ravel(weights))
    name = f"vk_split[{','.join(map(str, ids))}{wname}]"
    return NamedList(ptr=lib.ggml_backend_dev_buffer_type(meta.ptr), name=name, alloc_size=alloc, device=meta)


# -- the split product ---------------------------------------------------------------------------------------
def _matrices(W, X):
    W, X = np.asarray(W, dtype=np.float64), np.asarray(X, dtype=np.float64)
    if W.ndim == 1:
        W = W.reshape(1, -1)
    if X.ndim == 1:
        X = X.reshape(1, -1)
    if W.ndim != 2 or X.ndim != 2 or 0 in W.shape or 0 in X.shape:
        raise GGMLError(f"W [N, K] and X [M, K] must be non-empty matrices, got shapes {W.shape} and {X.shape}")
    if X.shape[1] != W.shape[1]:
        raise GGMLError(f"X has {X.shape[1]} columns but W has {W.shape[1]} (both are the K/input dimension)")
    return W, X


def split_mul_mat(meta: MetaDevice, W: np.ndarray, X: np.ndarray) -> np.ndarray:
    """X @ W.T [M, N] on split device `meta`: W's rows split across its devices, X mirrored,
    f32 products (ggml_mul_mat with f32 precision); reading the result gathers the bands."""
    W, X = _matrices(W, X)
    (n, k), m = W.shape, X.shape[0]
    backend = ggml_backend_dev_init(meta)
    wctx = ggml_init(8 * int(lib.ggml_tensor_overhead()), no_alloc=True)
    cctx = buf = galloc = None
    try:
        tw = ggml_set_name(ggml_new_tensor_2d(wctx, GGML_TYPE_F32, k, n), "W")
        tx = ggml_set_input(ggml_set_name(ggml_new_tensor_2d(wctx, GGML_TYPE_F32, k, m), "X"))
        buf = ggml_backend_alloc_ctx_tensors(wctx, backend)
        ggml_backend_tensor_set_data(tw, W.astype(np.float32))
        ggml_backend_tensor_set_data(tx, X.astype(np.float32))
        cctx = ggml_init(64 * int(lib.ggml_tensor_overhead()) + int(lib.ggml_graph_overhead()), no_alloc=True)
        y = ggml_mul_mat(cctx, tw, tx)
        lib.ggml_mul_mat_set_prec(y.ptr, lib.GGML_PREC_F32)
        graph = ggml_build_forward_expand(cctx, y)
        galloc = ggml_gallocr_new(backend)
        if not ggml_gallocr_alloc_graph(galloc, graph):
            raise MemoryError("split mul_mat: the graph allocator could not place the product")
        ggml_backend_graph_compute(backend, graph)
        return ggml_backend_tensor_get_data(y).reshape(m, n).astype(np.float64)
    finally:
        for obj in (galloc, buf):
            if obj is not None:
                obj.free()
        for c in (cctx, wctx):
            if c is not None:
                ggml_free(c)
        backend.free()


def ggml_vulkan_split_mul_mat(W: ArrayLike, X: ArrayLike, n_devices: int | None = None,
                              weights: ArrayLike | None = None, device_ids: Sequence[int] | None = None,
                              transport: str = "host-staging") -> np.ndarray:
    """ggmlR's tensor-parallel product Y = X %*% t(W) ([M, N]) over Vulkan devices: W [N, K]'s
    rows are split across the devices (all by default, or `device_ids`; `weights` sets each
    one's share, ggml_vulkan_split_row_ranges's arithmetic), X [M, K] goes to every device, and
    each device's band of Y's columns is gathered through host memory. f32 products; a Vulkan
    driver may accumulate in f16 (about 1e-3 relative)."""
    check_transport(transport)
    ids = vulkan_devices(n_devices, device_ids, "ggml_vulkan_split_mul_mat")
    W, X = _matrices(W, X)
    devs = vulkan_device_handles()
    return split_mul_mat(split_device([Device(devs[i]) for i in ids], weights), W, X)


# -- peer-to-peer self-test ------------------------------------------------------------------------------------
def p2p_copy_check(src, dst, nbytes: int, iters: int) -> NamedList:
    """Copy a byte pattern from a buffer on backend `src` to one on `dst` (ggml_backend_tensor_copy)
    and compare; between two backends also time `iters` copies. {"status": 0 verified / -1
    mismatch, "gbps", "report"}."""
    n = max(1, int(nbytes) // 4)
    ctx = ggml_init(4 * int(lib.ggml_tensor_overhead()), no_alloc=True)
    ctx2 = ggml_init(4 * int(lib.ggml_tensor_overhead()), no_alloc=True)
    bufs = []
    try:
        a = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n)
        b = ggml_new_tensor_1d(ctx2, GGML_TYPE_I32, n)
        bufs = [ggml_backend_alloc_ctx_tensors(ctx, src), ggml_backend_alloc_ctx_tensors(ctx2, dst)]
        pattern = (np.arange(n, dtype=np.int64) * 2654435761 % 2**31).astype(np.int32)
        ggml_backend_tensor_set_data(a, pattern)
        ggml_backend_tensor_set_data(b, np.zeros(n, np.int32))
        lib.ggml_backend_tensor_copy(a.ptr, b.ptr)
        ok = bool(np.array_equal(ggml_backend_tensor_get_data(b), pattern))
        gbps, timing = 0.0, "loopback: no bandwidth measured"
        if ok and src is not dst and iters > 0:
            t0 = time.perf_counter()
            for _ in range(int(iters)):
                lib.ggml_backend_tensor_copy(a.ptr, b.ptr)
            lib.ggml_backend_synchronize(dst.ptr)
            dt = time.perf_counter() - t0
            gbps = 4.0 * n * int(iters) / dt / 1e9 if dt > 0 else 0.0
            timing = f"{int(iters)} copies: {gbps:.2f} GB/s (device -> host -> device)"
        report = (f"host-staging copy {src.device_name} -> {dst.device_name}: {4 * n} bytes "
                  f"{'verified' if ok else 'MISMATCH'}; {timing}\n")
        return NamedList(status=0 if ok else -1, gbps=gbps, report=report)
    finally:
        for buf in bufs:
            buf.free()
        ggml_free(ctx)
        ggml_free(ctx2)


def ggml_vulkan_p2p_selftest(src_device: int, dst_device: int, bytes: int = 64 * 1024 * 1024, iters: int = 50,
                             transport: str = "host-staging") -> NamedList:
    """ggmlR's transfer self-test between Vulkan devices `src_device` and `dst_device` (equal for a
    loopback check): a byte pattern written on the source, copied to the destination, read back
    and compared; between two devices, `iters` timed copies give the bandwidth.
    {"status": 0 data verified, -1 mismatch, -2 transport not available, "gbps", "report"}.
    ggml 0.25.3 copies between devices through host memory ("host-staging"); ggmlR's
    "opaque-fd" and "device-group" transports answer status -2, as ggmlR's do where a driver
    lacks them."""
    if transport not in TRANSPORTS:
        raise GGMLError(f"transport must be one of {list(TRANSPORTS)}, got {transport!r}")
    if int(bytes) < 4 or int(iters) < 0:
        raise GGMLError(f"bytes must be >= 4 and iters >= 0, got {bytes!r}, {iters!r}")
    ids = vulkan_devices(device_ids=[src_device, dst_device], what="ggml_vulkan_p2p_selftest")
    if transport != "host-staging":
        return NamedList(status=-2, gbps=0.0, report=f"transport {transport!r} is not available: ggml 0.25.3 "
                         "has no Vulkan peer-to-peer path (only host-staging)\n")
    src = ggml_vulkan_init(ids[0])
    dst = src if ids[0] == ids[1] else ggml_vulkan_init(ids[1])
    try:
        return p2p_copy_check(src, dst, int(bytes), int(iters))
    finally:
        src.free()
        dst.free()


# -- shutdown ---------------------------------------------------------------------------------------------------
def ggml_vulkan_shutdown(hard: bool = False, status: int = 0) -> None:
    """Release everything ggmlpy holds on Vulkan devices: each one's shared backend, memory pools
    and cached op graphs (release_device: ag tensors still there can be read, or moved with
    ag_to_device, but an op on them raises DeviceError), and compiled Keras-like models' own
    backends and schedulers there (made again when the model next runs). A later call
    re-initialises what it needs. Objects one made oneself (ggml contexts, buffers, backends,
    ONNX models) stay one's own to free. ggml 0.25.3 has no call that destroys its Vulkan
    instance; it lives until the process ends. Idempotent; nothing to do without Vulkan.

    `hard=True` then ends the process at once with os._exit(status) after flushing stdout and
    stderr (ggmlR's guard against an exit-time loader race): only as a script's last statement."""
    release_model_backends("Vulkan")
    for name in [n for n in list(STATE.contexts) if n.startswith("Vulkan")]:
        release_device(name)
    for name in cached_backend_names():
        if name.startswith("Vulkan"):
            forget_backend(name)
    if hard:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, ValueError, OSError):
                pass
        os._exit(int(status))
