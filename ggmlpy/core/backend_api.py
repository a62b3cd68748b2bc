"""ggmlR's backend API: devices and registries, buffers, tensor data, events, graph plans and
async copies, plus the ggml_cpu_has_* feature queries (one table).

Handles are small Python objects around ggml's pointers (`Device`, `Registry`, `Event`,
`GraphPlan`); a lookup that finds nothing returns None, as ggmlR returns NULL. Every call
that would reach a ggml assertion (wrong sizes, freed objects, unallocated tensors, RPC
servers that are gone) is checked first.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..errors import GGMLError, check
from . import device as _device
from .backend_compute import BackendBuffer, is_meta
from .context import NP_DTYPES, Tensor, _to_storage, get_data, meta_check, on_meta, set_data  # noqa: F401
from .device import Backend
from .graph import Graph, check_graph
from .graph_alloc import GraphAllocator
from .meta_split import _DEVICES
from .meta_split import check_graph as check_meta_graph
from .sched import Scheduler

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_NULL = ffi.NULL

# Resolve now the C functions that __del__ methods call. cffi resolves a library attribute under a
# lock on first use; a garbage collection that runs a __del__ in the middle of such a first use
# (it allocates) and needs another unresolved function waits on that same lock forever.
for _fn in ("ggml_backend_buffer_free", "ggml_gallocr_free", "ggml_free", "ggml_backend_free",
            "ggml_threadpool_free", "ggml_backend_event_free", "ggml_backend_graph_plan_free",
            "ggml_backend_sched_free"):
    try:
        getattr(lib, _fn)
    except AttributeError:  # not in this build
        pass


def _s(p) -> str:
    return ffi.string(p).decode() if p != _NULL else ""


# -- constants --------------------------------------------------------------------------------------------
def ggml_backend_device_type_cpu() -> int:
    """GGML_BACKEND_DEVICE_TYPE_CPU."""
    return int(lib.GGML_BACKEND_DEVICE_TYPE_CPU)


def ggml_backend_device_type_gpu() -> int:
    """GGML_BACKEND_DEVICE_TYPE_GPU."""
    return int(lib.GGML_BACKEND_DEVICE_TYPE_GPU)


def ggml_backend_device_type_igpu() -> int:
    """GGML_BACKEND_DEVICE_TYPE_IGPU (integrated GPU)."""
    return int(lib.GGML_BACKEND_DEVICE_TYPE_IGPU)


def ggml_backend_device_type_accel() -> int:
    """GGML_BACKEND_DEVICE_TYPE_ACCEL (an accelerator used alongside the CPU, e.g. BLAS)."""
    return int(lib.GGML_BACKEND_DEVICE_TYPE_ACCEL)


def ggml_backend_buffer_usage_any() -> int:
    """GGML_BACKEND_BUFFER_USAGE_ANY."""
    return int(lib.GGML_BACKEND_BUFFER_USAGE_ANY)


def ggml_backend_buffer_usage_weights() -> int:
    """GGML_BACKEND_BUFFER_USAGE_WEIGHTS."""
    return int(lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)


def ggml_backend_buffer_usage_compute() -> int:
    """GGML_BACKEND_BUFFER_USAGE_COMPUTE."""
    return int(lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE)


_USAGES = (0, 1, 2)
_DEV_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


# -- devices and registries ------------------------------------------------------------------------------
_LOADED: set = set()    # registries this process loaded with ggml_backend_load (int addresses)
_UNLOADED: set = set()  # ... and later unloaded: their devices are gone


class Device:
    """A ggml device (ggml_backend_dev_t). Devices live as long as the process, unless their backend
    module is unloaded (ggml_backend_unload), after which the handle refuses to be used."""

    __slots__ = ("ptr", "reg")

    def __init__(self, ptr):
        self.ptr = ptr
        self.reg = int(ffi.cast("uintptr_t", lib.ggml_backend_dev_backend_reg(ptr)))

    @property
    def name(self) -> str:
        """The device's name, as ggml gives it ("CPU", "Vulkan0", ...)."""
        return _s(lib.ggml_backend_dev_name(self.ptr))

    def __eq__(self, other):
        return isinstance(other, Device) and self.ptr == other.ptr

    def __hash__(self):
        return hash(int(ffi.cast("uintptr_t", self.ptr)))

    def __repr__(self):
        return f"<ggml Device {self.name}>"


class Registry:
    """A ggml backend registry (ggml_backend_reg_t): one per backend library (CPU, Vulkan, RPC, ...)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    @property
    def name(self) -> str:
        """The registry's (backend family's) name, as ggml gives it."""
        return _s(lib.ggml_backend_reg_name(self.ptr))

    def __eq__(self, other):
        return isinstance(other, Registry) and self.ptr == other.ptr

    def __hash__(self):
        return hash(int(ffi.cast("uintptr_t", self.ptr)))

    def __repr__(self):
        return f"<ggml Registry {self.name}>"


def _dev(d, what) -> Device:
    if not isinstance(d, Device):
        raise GGMLError(f"{what}: expected a Device (ggml_backend_dev_get), got {type(d).__name__}")
    if d.reg in _UNLOADED:
        raise GGMLError(f"{what}: the device's backend module has been unloaded")
    return d


def _reg(r, what) -> Registry:
    if not isinstance(r, Registry):
        raise GGMLError(f"{what}: expected a Registry (ggml_backend_reg_get), got {type(r).__name__}")
    if int(ffi.cast("uintptr_t", r.ptr)) in _UNLOADED:
        raise GGMLError(f"{what}: the backend module has been unloaded")
    return r


def _backend(b, what) -> Backend:
    if not isinstance(b, Backend):
        raise GGMLError(f"{what}: expected a Backend, got {type(b).__name__}")
    if b.ptr is None:
        raise GGMLError(f"{what}: the backend has been freed")
    return b


def _index(i, n, what) -> int:
    i = int(i)
    if not 0 <= i < n:
        raise GGMLError(f"{what}: index {i} is out of range 0..{n - 1} (0-based)")
    return i


def ggml_backend_dev_get(i: int) -> Device:
    """Device i (0-based)."""
    _device._ensure_backends()
    n = int(lib.ggml_backend_dev_count())
    return Device(lib.ggml_backend_dev_get(_index(i, n, "ggml_backend_dev_get")))


def ggml_backend_dev_by_name(name: str) -> Device | None:
    """The device called `name` ("CPU", "Vulkan0", ...), or None."""
    _device._ensure_backends()
    p = lib.ggml_backend_dev_by_name(str(name).encode())
    return None if p == _NULL else Device(p)


def ggml_backend_dev_by_type(type: int) -> Device | None:
    """The first device of a type (ggml_backend_device_type_*()), or None."""
    _device._ensure_backends()
    t = int(type)
    check(t in _DEV_TYPES, f"ggml_backend_dev_by_type: unknown device type {t}")
    p = lib.ggml_backend_dev_by_type(t)
    return None if p == _NULL else Device(p)


def ggml_backend_dev_name(dev: Device) -> str:
    """The device's name."""
    return _dev(dev, "ggml_backend_dev_name").name


def ggml_backend_dev_description(dev: Device) -> str:
    """The device's description (for RPC devices: the server endpoint)."""
    return _s(lib.ggml_backend_dev_description(_dev(dev, "ggml_backend_dev_description").ptr))


def ggml_backend_dev_type(dev: Device) -> int:
    """The device's type code (see ggml_backend_device_type_*)."""
    return int(lib.ggml_backend_dev_type(_dev(dev, "ggml_backend_dev_type").ptr))


def _check_reachable(dev: Device) -> None:
    """ggml's RPC client aborts when its server is gone: probe it first."""
    endpoint = _device._endpoint_of(dev.ptr)
    if endpoint:
        host, port, _ = _device._split_endpoint(endpoint)
        _device.rpc_probe(host, port)


def ggml_backend_dev_memory(dev: Device) -> dict:
    """{"free": bytes, "total": bytes} of the device's memory."""
    dev = _dev(dev, "ggml_backend_dev_memory")
    _check_reachable(dev)
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    lib.ggml_backend_dev_memory(dev.ptr, free, total)
    return {"free": float(free[0]), "total": float(total[0])}


def ggml_backend_dev_get_props(dev: Device) -> dict:
    """name, description, memory_free, memory_total, type, device_id (ggml's PCI bus id, or None)
    and capabilities of a device: ggmlR's nested `caps` {"async", "host_buffer",
    "buffer_from_host_ptr", "events", "mmap_support"} (R's `props$caps["async"]` is
    `props["caps"]["async"]`), and the same flags flat as caps_async, caps_host_buffer, ..."""
    dev = _dev(dev, "ggml_backend_dev_get_props")
    _check_reachable(dev)
    return _device.dev_props(dev.ptr)


def ggml_backend_dev_init(dev: Device, params: str | None = None) -> Backend:
    """A new backend on the device."""
    dev = _dev(dev, "ggml_backend_dev_init")
    _check_reachable(dev)
    return Backend(lib.ggml_backend_dev_init(dev.ptr, params.encode() if params else _NULL), dev.name)


def ggml_backend_dev_supports_op(dev: Device, op: Tensor) -> bool:
    """Whether the device has a kernel for the op that computes `op` (with its types and shapes)."""
    dev = _dev(dev, "ggml_backend_dev_supports_op")
    if not isinstance(op, Tensor):
        raise GGMLError("ggml_backend_dev_supports_op: op must be a Tensor")
    return bool(lib.ggml_backend_dev_supports_op(dev.ptr, op.ptr))


def ggml_backend_dev_supports_buft(dev: Device, buft: Backend | BackendBuffer) -> bool:
    """Whether the device can use buffers of type `buft` (a Backend's or a buffer's type)."""
    dev = _dev(dev, "ggml_backend_dev_supports_buft")
    p = buft.buft if isinstance(buft, Backend) else lib.ggml_backend_buffer_get_type(_buffer(buft, "ggml_backend_dev_supports_buft").ptr)
    return bool(lib.ggml_backend_dev_supports_buft(dev.ptr, p))


def ggml_backend_dev_offload_op(dev: Device, op: Tensor) -> bool:
    """Whether ggml's scheduler would move `op` to this device even if its weights are elsewhere."""
    dev = _dev(dev, "ggml_backend_dev_offload_op")
    if not isinstance(op, Tensor):
        raise GGMLError("ggml_backend_dev_offload_op: op must be a Tensor")
    return bool(lib.ggml_backend_dev_offload_op(dev.ptr, op.ptr))


def ggml_backend_get_device(backend: Backend) -> Device | None:
    """The device a backend runs on."""
    b = _backend(backend, "ggml_backend_get_device")
    if b.dev == _NULL:
        return None
    # a meta device's own handle (its split function, its states)
    return _DEVICES.get(int(ffi.cast("uintptr_t", b.dev))) or Device(b.dev)


def ggml_backend_reg_count() -> int:
    """How many backend registries are loaded."""
    _device._ensure_backends()
    return int(lib.ggml_backend_reg_count())


def ggml_backend_reg_get(i: int) -> Registry:
    """Registry i (0-based)."""
    return Registry(lib.ggml_backend_reg_get(_index(i, ggml_backend_reg_count(), "ggml_backend_reg_get")))


def ggml_backend_reg_by_name(name: str) -> Registry | None:
    """The registry called `name` ("CPU", "Vulkan", "RPC", ...), or None."""
    _device._ensure_backends()
    p = lib.ggml_backend_reg_by_name(str(name).encode())
    return None if p == _NULL else Registry(p)


def ggml_backend_reg_name(reg: Registry) -> str:
    """The registry's name."""
    return _reg(reg, "ggml_backend_reg_name").name


def ggml_backend_reg_dev_count(reg: Registry) -> int:
    """How many devices the registry has."""
    return int(lib.ggml_backend_reg_dev_count(_reg(reg, "ggml_backend_reg_dev_count").ptr))


def ggml_backend_reg_dev_get(reg: Registry, i: int) -> Device:
    """Device i (0-based) of the registry."""
    reg = _reg(reg, "ggml_backend_reg_dev_get")
    n = int(lib.ggml_backend_reg_dev_count(reg.ptr))
    return Device(lib.ggml_backend_reg_dev_get(reg.ptr, _index(i, n, "ggml_backend_reg_dev_get")))


def ggml_backend_register(reg: Registry) -> Registry:
    """Add a registry to ggml's list (no-op when it is already listed)."""
    reg = _reg(reg, "ggml_backend_register")
    if any(lib.ggml_backend_reg_get(i) == reg.ptr for i in range(ggml_backend_reg_count())):
        return reg
    lib.ggml_backend_register(reg.ptr)
    return reg


def ggml_backend_device_register(dev: Device) -> Device:
    """Add a device to ggml's list (no-op when it is already listed)."""
    dev = _dev(dev, "ggml_backend_device_register")
    if any(lib.ggml_backend_dev_get(i) == dev.ptr for i in range(int(lib.ggml_backend_dev_count()))):
        return dev
    lib.ggml_backend_device_register(dev.ptr)
    return dev


def ggml_backend_load(path: str) -> Registry | None:
    """Load a backend module (a shared library) and register it; None when it cannot be loaded."""
    if not os.path.isfile(str(path)):
        return None
    p = lib.ggml_backend_load(str(path).encode())
    if p == _NULL:
        return None
    _LOADED.add(int(ffi.cast("uintptr_t", p)))
    return Registry(p)


def ggml_backend_unload(reg: Registry) -> None:
    """Unregister and unload a backend module that ggml_backend_load loaded (others are in use by
    ggmlpy's own pools). Its Device and Registry handles refuse to be used afterwards."""
    reg = _reg(reg, "ggml_backend_unload")
    addr = int(ffi.cast("uintptr_t", reg.ptr))
    check(addr in _LOADED, "ggml_backend_unload: only modules loaded with ggml_backend_load can be unloaded")
    _UNLOADED.add(addr)
    _LOADED.discard(addr)
    lib.ggml_backend_unload(reg.ptr)


def ggml_backend_load_all() -> None:
    """Load every backend module next to libggml (builds with loadable backends); static builds
    have theirs registered already. Safe to call more than once."""
    _device._ensure_backends()
    if _device._DL_BUILD:
        have = set(_device.backends())
        d = str(_device.found.lib_dir)
        for f in sorted(glob.glob(os.path.join(d, "libggml-*.so"))):
            name = os.path.basename(f)[len("libggml-"):-3]
            if name not in ("base",) and not any(h.lower().startswith(name.split("-")[0]) for h in have):
                lib.ggml_backend_load(f.encode())


def ggml_backend_init_by_type(type: int, params: str | None = None) -> Backend:
    """A new backend on the first device of a type (ggml_backend_device_type_*())."""
    dev = ggml_backend_dev_by_type(type)
    if dev is None:
        raise GGMLError(f"ggml_backend_init_by_type: no device of type {_DEV_TYPES.get(int(type), type)}")
    return ggml_backend_dev_init(dev, params)


def ggml_backend_synchronize(backend: Backend) -> None:
    """Wait until the backend has finished its queued work."""
    lib.ggml_backend_synchronize(_backend(backend, "ggml_backend_synchronize").ptr)


# -- buffers ------------------------------------------------------------------------------------------------
def _buffer(buf, what) -> BackendBuffer:
    if not isinstance(buf, BackendBuffer):
        raise GGMLError(f"{what}: expected a BackendBuffer, got {type(buf).__name__}")
    if buf.ptr is None:
        raise GGMLError(f"{what}: the buffer has been freed")
    return buf


def ggml_backend_buffer_name(buf: BackendBuffer) -> str:
    """The buffer type's name ("CPU", "Vulkan0", ...)."""
    return _s(lib.ggml_backend_buffer_name(_buffer(buf, "ggml_backend_buffer_name").ptr))


def ggml_backend_buffer_get_size(buf: BackendBuffer) -> int:
    """The buffer's size in bytes."""
    if isinstance(buf, MultiBuffer):
        return buf.size()
    return int(lib.ggml_backend_buffer_get_size(_buffer(buf, "ggml_backend_buffer_get_size").ptr))


def ggml_backend_buffer_is_host(buf: BackendBuffer) -> bool:
    """Whether the buffer is in host memory (readable with a plain copy)."""
    return bool(lib.ggml_backend_buffer_is_host(_buffer(buf, "ggml_backend_buffer_is_host").ptr))


def ggml_backend_buffer_get_usage(buf: BackendBuffer) -> int:
    """The buffer's usage code (ggml_backend_buffer_usage_*())."""
    return int(lib.ggml_backend_buffer_get_usage(_buffer(buf, "ggml_backend_buffer_get_usage").ptr))


def ggml_backend_buffer_set_usage(buf: BackendBuffer, usage: int) -> BackendBuffer:
    """Tell ggml what the buffer holds (weights or compute); the scheduler uses it."""
    buf = _buffer(buf, "ggml_backend_buffer_set_usage")
    check(int(usage) in _USAGES, f"ggml_backend_buffer_set_usage: unknown usage {usage}")
    if isinstance(buf, MultiBuffer):
        return ggml_backend_multi_buffer_set_usage(buf, usage)
    lib.ggml_backend_buffer_set_usage(buf.ptr, int(usage))
    return buf


def ggml_backend_buffer_clear(buf: BackendBuffer, value: int = 0) -> BackendBuffer:
    """Fill every byte of the buffer with `value` (0..255)."""
    buf = _buffer(buf, "ggml_backend_buffer_clear")
    v = int(value)
    check(0 <= v <= 255, f"ggml_backend_buffer_clear: value is a byte, 0..255, got {value}")
    if isinstance(buf, MultiBuffer):
        for b in buf.parts:
            lib.ggml_backend_buffer_clear(b.ptr, v)
        return buf
    lib.ggml_backend_buffer_clear(buf.ptr, v)
    return buf


def ggml_backend_buffer_reset(buf: BackendBuffer) -> BackendBuffer:
    """Reset the buffer's allocator state (backends that keep one: a no-op on the CPU)."""
    lib.ggml_backend_buffer_reset(_buffer(buf, "ggml_backend_buffer_reset").ptr)
    return buf


def ggml_backend_buffer_free(buf: BackendBuffer) -> None:
    """Free the buffer. The tensors in it can no longer be used: their context is retired."""
    if isinstance(buf, BackendBuffer) and buf.ptr is None:
        return
    _buffer(buf, "ggml_backend_buffer_free").free()


class MultiBuffer(BackendBuffer):
    """Several backend buffers handled as one: ggml's multi buffer (its entry points are not exported
    by libggml, so ggmlpy keeps the list itself). Size is the sum; usage and clear apply to each;
    freeing it frees them all."""

    def __init__(self, parts):
        self.parts = parts
        self.ptr, self.ctx, self.backend = parts[0].ptr, _NoContext(), parts[0].backend

    def size(self) -> int:
        return sum(b.size() for b in self.parts)

    @uninterruptible
    def free(self):
        for b in self.parts:
            b.free()
        self.ptr = None

    @uninterruptible
    def __del__(self):
        pass


def ggml_backend_buffer_is_multi_buffer(buf: BackendBuffer) -> bool:
    """Whether the buffer wraps several buffers (ggml_backend_multi_buffer_alloc_buffer)."""
    return isinstance(_buffer(buf, "ggml_backend_buffer_is_multi_buffer"), MultiBuffer)


class _NoContext:
    """Stands in for the context of a buffer that has none of its own (a multi buffer)."""

    @uninterruptible
    def free(self):
        pass


def ggml_backend_multi_buffer_alloc_buffer(buffers: Iterable[BackendBuffer]) -> MultiBuffer:
    """One buffer over several, so that set_usage, clear and free reach all of them."""
    parts = [_buffer(b, "ggml_backend_multi_buffer_alloc_buffer") for b in buffers]
    check(len(parts) > 0, "ggml_backend_multi_buffer_alloc_buffer: no buffers given")
    check(len({id(b) for b in parts}) == len(parts), "ggml_backend_multi_buffer_alloc_buffer: a buffer is listed twice")
    check(not any(isinstance(b, MultiBuffer) for b in parts), "ggml_backend_multi_buffer_alloc_buffer: buffers "
          "must be plain buffers")
    return MultiBuffer(parts)


def ggml_backend_multi_buffer_set_usage(buf: BackendBuffer, usage: int) -> BackendBuffer:
    """Set the usage of every buffer inside a multi buffer."""
    buf = _buffer(buf, "ggml_backend_multi_buffer_set_usage")
    check(isinstance(buf, MultiBuffer), "ggml_backend_multi_buffer_set_usage: not a multi buffer")
    for b in buf.parts:
        ggml_backend_buffer_set_usage(b, usage)
    return buf


# -- tensor data -----------------------------------------------------------------------------------------------
def _data_tensor(t, what) -> Tensor:
    if not isinstance(t, Tensor):
        raise GGMLError(f"{what}: expected a Tensor, got {type(t).__name__}")
    p = t.ptr
    if p.buffer == _NULL and (p.view_src == _NULL or p.view_src.buffer == _NULL):
        if p.data == _NULL:
            raise GGMLError(f"{what}: tensor '{t.name or '<unnamed>'}' has no backend buffer; "
                            "allocate it with ggml_backend_alloc_ctx_tensors first")
    check(t.is_contiguous(), f"{what}: the tensor is a non-contiguous view; use ggml_cont() first")
    check(t.type in NP_DTYPES, f"{what}: cannot move {t.type_name} data as numbers")
    return t


def _np_of(t) -> np.dtype:
    return np.dtype(np.int32) if t.type == lib.GGML_TYPE_I32 else np.dtype(np.float32)


def _range(t, offset, n, what):
    es = int(lib.ggml_type_size(t.type))
    offset = int(offset)
    check(offset >= 0 and offset % es == 0, f"{what}: offset is in bytes, a multiple of {es}, got {offset}")
    start = offset // es
    n = t.nelements() - start if n is None else int(n)
    check(n >= 0 and start + n <= t.nelements(),
          f"{what}: {n} elements from byte {offset} go past the tensor's {t.nelements()} elements")
    return start, n


def ggml_backend_tensor_set_data(tensor: Tensor, data: ArrayLike, offset: int = 0) -> Tensor:
    """Write numbers into a tensor on any backend, from byte `offset` on (ggmlR's form)."""
    t = _data_tensor(tensor, "ggml_backend_tensor_set_data")
    arr = np.ravel(np.asarray(data))
    check(arr.dtype.kind in "biuf", "ggml_backend_tensor_set_data: data must be numbers")
    start, n = _range(t, offset, arr.size, "ggml_backend_tensor_set_data")
    if start == 0 and n == t.nelements():
        set_data(t, arr, _np_of(t), "ggml_backend_tensor_set_data")
        return t
    raw = _to_storage(arr.astype(_np_of(t)), t.type)
    es = int(lib.ggml_type_size(t.type))
    meta_check(t, "ggml_backend_tensor_set_data", start * es, n * es, write=True)
    lib.ggml_backend_tensor_set(t.ptr, ffi.from_buffer(raw), start * es, n * es) if not t.on_host else \
        ffi.memmove(ffi.cast("char *", t.ptr.data) + start * es, ffi.from_buffer(raw), n * es)
    return t


def ggml_backend_tensor_get_data(tensor: Tensor, offset: int = 0, n_elements: int | None = None) -> np.ndarray:
    """A tensor's numbers (flat, ggml memory order), from byte `offset`, n_elements of them (all by default)."""
    t = _data_tensor(tensor, "ggml_backend_tensor_get_data")
    start, n = _range(t, offset, n_elements, "ggml_backend_tensor_get_data")
    return get_data(t, _np_of(t), "ggml_backend_tensor_get_data").ravel()[start:start + n].copy()


def _async_check(backend, t, what):
    b = _backend(backend, what)
    t = _data_tensor(t, what)
    p = t.ptr
    if on_meta(p) or (p.view_src != _NULL and on_meta(p.view_src)):
        raise GGMLError(f"{what}: not available for tensors of a meta device; use "
                        "ggml_backend_tensor_set_data / ggml_backend_tensor_get_data")
    buf = p.view_src.buffer if p.view_src != _NULL else p.buffer  # the buffer ggml asserts on
    check(buf != _NULL and p.data != _NULL,
          f"{what}: the tensor is not in a backend buffer; allocate it with ggml_backend_alloc_ctx_tensors")
    return b, t


def ggml_backend_tensor_set_async(backend: Backend, tensor: Tensor, data: ArrayLike, offset: int = 0,
                                  size: int | None = None) -> None:
    """Queue a write of `data` into the tensor on `backend` (complete after ggml_backend_synchronize).
    offset and size in bytes; the data is kept alive until the next synchronize."""
    b, t = _async_check(backend, tensor, "ggml_backend_tensor_set_async")
    raw = np.ascontiguousarray(np.ravel(np.asarray(data)).astype(_np_of(t)))
    size = raw.nbytes if size is None else int(size)
    check(0 <= size <= raw.nbytes, f"ggml_backend_tensor_set_async: size {size} is more than the data's {raw.nbytes} bytes")
    check(0 <= int(offset) and int(offset) + size <= t.nbytes(),
          f"ggml_backend_tensor_set_async: bytes {offset}..{int(offset) + size} go past the tensor's {t.nbytes()}")
    b._pending = getattr(b, "_pending", []) + [raw]
    lib.ggml_backend_tensor_set_async(b.ptr, t.ptr, ffi.from_buffer(raw), int(offset), size)


def ggml_backend_tensor_get_async(backend: Backend, tensor: Tensor, offset: int = 0,
                                  size: int | None = None) -> np.ndarray:
    """Queue a read of the tensor; returns the numpy array it lands in (valid after ggml_backend_synchronize)."""
    b, t = _async_check(backend, tensor, "ggml_backend_tensor_get_async")
    size = t.nbytes() - int(offset) if size is None else int(size)
    es = int(lib.ggml_type_size(t.type))
    check(0 <= int(offset) and 0 <= size and int(offset) + size <= t.nbytes() and size % es == 0,
          f"ggml_backend_tensor_get_async: bytes {offset}..{int(offset) + size} do not fit the tensor's {t.nbytes()}")
    out = np.empty(size // es, _np_of(t))
    lib.ggml_backend_tensor_get_async(b.ptr, t.ptr, ffi.from_buffer(out), int(offset), size)
    return out


def ggml_backend_tensor_get_and_sync(backend: Backend, tensor: Tensor, offset: int = 0,
                                     size: int | None = None) -> np.ndarray:
    """ggml_backend_tensor_get_async followed by ggml_backend_synchronize: the numbers, flat."""
    out = ggml_backend_tensor_get_async(backend, tensor, offset, size)
    ggml_backend_synchronize(backend)
    return out.astype(np.float64) if out.dtype.kind == "f" else out


def ggml_backend_tensor_copy_async(backend_src: Backend, backend_dst: Backend, src: Tensor, dst: Tensor) -> None:
    """Queue a copy of src into dst (same layout) between backends."""
    bs, s = _async_check(backend_src, src, "ggml_backend_tensor_copy_async")
    bd, d = _async_check(backend_dst, dst, "ggml_backend_tensor_copy_async")
    check(s.type == d.type and s.ne == d.ne and s.nb == d.nb,
          "ggml_backend_tensor_copy_async: src and dst must have the same layout (type, shape and strides)")
    lib.ggml_backend_tensor_copy_async(bs.ptr, bd.ptr, s.ptr, d.ptr)


def ggml_backend_graph_compute_async(backend: Backend, graph: Graph) -> int:
    """Start computing the graph; ggml_backend_synchronize waits for it. Returns ggml's status (0: success)."""
    b = _backend(backend, "ggml_backend_graph_compute_async")
    if not isinstance(graph, Graph):
        raise GGMLError("ggml_backend_graph_compute_async: expected a Graph")
    if is_meta(b):  # first: ggml's meta backend aborts on splits it has no rule for
        check_meta_graph(graph, b.dev)
    check_graph(graph, device=b.dev, need_buffers=not b.is_host)
    status = lib.ggml_backend_graph_compute_async(b.ptr, graph.ptr)
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_graph_compute_async failed with status {status}")
    return int(status)


# -- events ---------------------------------------------------------------------------------------------------------
class Event:
    """A ggml backend event (devices with caps_events: not the CPU)."""

    def __init__(self, ptr, dev: Device):
        self.ptr, self.dev = ptr, dev

    @uninterruptible
    def free(self) -> None:
        """Free the event now (otherwise when it is garbage-collected)."""
        if self.ptr is not None:
            lib.ggml_backend_event_free(self.ptr)
            self.ptr = None

    @uninterruptible
    def __del__(self):
        self.free()


def _event(e, what) -> Event:
    if not isinstance(e, Event) or e.ptr is None:
        raise GGMLError(f"{what}: expected a live Event (ggml_backend_event_new)")
    return e


def ggml_backend_event_new(dev: Device) -> Event | None:
    """A new event on the device, or None when the device has no events (the CPU has none)."""
    dev = _dev(dev, "ggml_backend_event_new")
    props = ffi.new("struct ggml_backend_dev_props *")
    lib.ggml_backend_dev_get_props(dev.ptr, props)
    if not props.caps.events:
        return None
    p = lib.ggml_backend_event_new(dev.ptr)
    return None if p == _NULL else Event(p, dev)


def ggml_backend_event_free(event: Event) -> None:
    """Free an event."""
    if isinstance(event, Event):
        event.free()


def ggml_backend_event_record(event: Event, backend: Backend) -> None:
    """Record the event on the backend's queue."""
    e, b = _event(event, "ggml_backend_event_record"), _backend(backend, "ggml_backend_event_record")
    check(b.dev == e.dev.ptr, "ggml_backend_event_record: the backend is on another device than the event")
    lib.ggml_backend_event_record(e.ptr, b.ptr)


def ggml_backend_event_synchronize(event: Event) -> None:
    """Wait on the host until the event has happened."""
    lib.ggml_backend_event_synchronize(_event(event, "ggml_backend_event_synchronize").ptr)


def ggml_backend_event_wait(backend: Backend, event: Event) -> None:
    """Make the backend's queue wait for the event."""
    lib.ggml_backend_event_wait(_backend(backend, "ggml_backend_event_wait").ptr, _event(event, "ggml_backend_event_wait").ptr)


# -- graph plans ----------------------------------------------------------------------------------------------------
class GraphPlan:
    """A graph prepared once for repeated compute on one backend (the CPU backend supports plans)."""

    def __init__(self, ptr, backend: Backend, graph: Graph):
        self.ptr, self.backend, self.graph = ptr, backend, graph

    @uninterruptible
    def free(self) -> None:
        """Free the plan now (otherwise when it is garbage-collected)."""
        if self.ptr is not None and self.backend.ptr is not None:
            lib.ggml_backend_graph_plan_free(self.backend.ptr, self.ptr)
        self.ptr = None

    @uninterruptible
    def __del__(self):
        self.free()


def ggml_backend_graph_plan_create(backend: Backend, graph: Graph) -> GraphPlan:
    """Prepare the graph for the backend (checked as for compute)."""
    b = _backend(backend, "ggml_backend_graph_plan_create")
    if not isinstance(graph, Graph):
        raise GGMLError("ggml_backend_graph_plan_create: expected a Graph")
    # only the CPU backend implements plans; ggml asserts on the others
    check(b.is_cpu, f"ggml_backend_graph_plan_create: backend {b.name} has no graph plans (only the CPU backend has)")
    check_graph(graph, device=b.dev, need_buffers=not b.is_host)
    p = lib.ggml_backend_graph_plan_create(b.ptr, graph.ptr)
    if p == _NULL:
        raise GGMLError(f"ggml_backend_graph_plan_create: backend {b.name} does not support graph plans")
    return GraphPlan(p, b, graph)


def ggml_backend_graph_plan_compute(backend: Backend, plan: GraphPlan) -> None:
    """Run a prepared plan."""
    b = _backend(backend, "ggml_backend_graph_plan_compute")
    if not isinstance(plan, GraphPlan) or plan.ptr is None:
        raise GGMLError("ggml_backend_graph_plan_compute: expected a live GraphPlan")
    check(plan.backend is b and b.is_cpu, "ggml_backend_graph_plan_compute: the plan was made for another backend")
    check_graph(plan.graph, device=b.dev, need_buffers=not b.is_host)
    status = lib.ggml_backend_graph_plan_compute(b.ptr, plan.ptr)
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_graph_plan_compute failed with status {status}")


def ggml_backend_graph_plan_free(backend: Backend, plan: GraphPlan) -> None:
    """Free a plan."""
    if isinstance(plan, GraphPlan):
        plan.free()


# -- graph allocator helpers ggmlR adds -------------------------------------------------------------------------------
def ggml_gallocr_reserve(galloc: GraphAllocator, graph: Graph) -> bool:
    """Size the allocator's buffer for `graph` without assigning memory."""
    if not isinstance(galloc, GraphAllocator) or galloc.ptr is None:
        raise GGMLError("ggml_gallocr_reserve: expected a live graph allocator")
    if not isinstance(graph, Graph):
        raise GGMLError("ggml_gallocr_reserve: expected a Graph")
    graph.check_alive()
    return bool(lib.ggml_gallocr_reserve(galloc.ptr, graph.ptr))


def ggml_gallocr_free(galloc: GraphAllocator) -> None:
    """Free the allocator (tensors it placed become unusable: their contexts are retired)."""
    if isinstance(galloc, GraphAllocator):
        galloc.free()


# -- the scheduler (ggmlpy.core.sched.Scheduler) ----------------------------------------------------------------
def _sched(s, what):
    if not isinstance(s, Scheduler) or s.ptr is None:
        raise GGMLError(f"{what}: expected a live Scheduler (ggml_backend_sched_new)")
    return s


def _sched_graph(s, graph, what, leaves_placed=False):
    s = _sched(s, what)
    if not isinstance(graph, Graph):
        raise GGMLError(f"{what}: expected a Graph")
    s.check(graph, leaves_placed=leaves_placed)
    return s


def ggml_backend_sched_free(sched: Scheduler) -> None:
    """Free the scheduler (and the buffers it allocated graphs in)."""
    if isinstance(sched, Scheduler):
        sched.free()


def ggml_backend_sched_get_n_backends(sched: Scheduler) -> int:
    """How many backends the scheduler distributes over."""
    return int(lib.ggml_backend_sched_get_n_backends(_sched(sched, "ggml_backend_sched_get_n_backends").ptr))


def ggml_backend_sched_get_backend(sched: Scheduler, i: int) -> Backend:
    """Backend i (0-based, priority order) of the scheduler."""
    s = _sched(sched, "ggml_backend_sched_get_backend")
    return s.backends[_index(i, len(s.backends), "ggml_backend_sched_get_backend")]


def ggml_backend_sched_get_n_splits(sched: Scheduler) -> int:
    """Into how many per-backend pieces the last graph was split."""
    return int(lib.ggml_backend_sched_get_n_splits(_sched(sched, "ggml_backend_sched_get_n_splits").ptr))


def ggml_backend_sched_get_n_copies(sched: Scheduler) -> int:
    """How many copies of the inputs the scheduler keeps (more than 1 with parallel=True)."""
    return int(lib.ggml_backend_sched_get_n_copies(_sched(sched, "ggml_backend_sched_get_n_copies").ptr))


def ggml_backend_sched_get_tensor_backend(sched: Scheduler, t: Tensor) -> Backend | None:
    """The backend the scheduler assigned `t` to, or None."""
    s = _sched(sched, "ggml_backend_sched_get_tensor_backend")
    if not isinstance(t, Tensor):
        raise GGMLError("ggml_backend_sched_get_tensor_backend: expected a Tensor")
    p = lib.ggml_backend_sched_get_tensor_backend(s.ptr, t.ptr)
    return next((b for b in s.backends if b.ptr == p), None)


def ggml_backend_sched_set_tensor_backend(sched: Scheduler, t: Tensor, backend: Backend) -> None:
    """Pin `t` (a node of the next graph) to one of the scheduler's backends."""
    s = _sched(sched, "ggml_backend_sched_set_tensor_backend")
    if not isinstance(t, Tensor):
        raise GGMLError("ggml_backend_sched_set_tensor_backend: expected a Tensor")
    b = _backend(backend, "ggml_backend_sched_set_tensor_backend")
    check(any(x is b for x in s.backends), "ggml_backend_sched_set_tensor_backend: the backend is not one of the "
          "scheduler's")  # ggml asserts it
    check(b.supports_op(t.ptr) or t.ptr.op == lib.GGML_OP_NONE,
          f"ggml_backend_sched_set_tensor_backend: {b.name} has no kernel for this op")
    lib.ggml_backend_sched_set_tensor_backend(s.ptr, t.ptr, b.ptr)


def ggml_backend_sched_reserve(sched: Scheduler, graph: Graph) -> bool:
    """Size the scheduler's buffers for graphs like `graph` (nothing is computed)."""
    s = _sched_graph(sched, graph, "ggml_backend_sched_reserve", leaves_placed=True)
    return bool(lib.ggml_backend_sched_reserve(s.ptr, graph.ptr))


def ggml_backend_sched_alloc_graph(sched: Scheduler, graph: Graph) -> bool:
    """Split the graph across the backends and give its unallocated tensors (leaves included: fill
    the inputs afterwards, as ggmlR does) memory."""
    s = _sched_graph(sched, graph, "ggml_backend_sched_alloc_graph", leaves_placed=True)
    lib.ggml_backend_sched_reset(s.ptr)
    ok = bool(lib.ggml_backend_sched_alloc_graph(s.ptr, graph.ptr))
    if ok:
        s.mark_allocated(graph)
    return ok


def ggml_backend_sched_reset(sched: Scheduler) -> None:
    """Forget the last graph's placement (its intermediates' memory is reused by the next one)."""
    s = _sched(sched, "ggml_backend_sched_reset")
    lib.ggml_backend_sched_reset(s.ptr)
    s.graph = None


def ggml_backend_sched_graph_compute_async(sched: Scheduler, graph: Graph) -> int:
    """Start computing a graph (allocated first if needed); ggml_backend_sched_synchronize waits."""
    s = _sched(sched, "ggml_backend_sched_graph_compute_async")
    placed = isinstance(graph, Graph) and s.allocated(graph)
    s = _sched_graph(sched, graph, "ggml_backend_sched_graph_compute_async", leaves_placed=placed)
    if not placed:
        lib.ggml_backend_sched_reset(s.ptr)
        if not lib.ggml_backend_sched_alloc_graph(s.ptr, graph.ptr):
            raise MemoryError("the scheduler could not allocate the graph")
        s.mark_allocated(graph)
    status = lib.ggml_backend_sched_graph_compute_async(s.ptr, graph.ptr)
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"ggml_backend_sched_graph_compute_async failed (status {status})")
    return int(status)


def ggml_backend_sched_synchronize(sched: Scheduler) -> None:
    """Wait for the scheduler's backends to finish."""
    lib.ggml_backend_sched_synchronize(_sched(sched, "ggml_backend_sched_synchronize").ptr)


# -- CPU feature queries: one table -----------------------------------------------------------------------------------
_CPU_FEATURES = ["sse3", "ssse3", "avx", "avx_vnni", "avx2", "bmi2", "f16c", "fma", "avx512", "avx512_vbmi",
                 "avx512_vnni", "avx512_bf16", "amx_int8", "neon", "arm_fma", "fp16_va", "dotprod", "matmul_int8",
                 "sve", "sme", "riscv_v", "vsx", "vxe", "wasm_simd", "llamafile"]


def _cpu_fn(name):
    """A ggml-cpu entry point; in builds with loadable CPU variants, from the variant the registry loaded."""
    try:
        return getattr(lib, name)
    except AttributeError:
        reg = lib.ggml_backend_dev_backend_reg(lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU))
        addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
        if addr == _NULL:
            raise GGMLError(f"{name} is not available in this libggml build")
        return ffi.cast("int (*)(void)", addr)


def _cpu_has(feature):
    cname = f"ggml_cpu_has_{feature}"

    def q() -> bool:
        return bool(_cpu_fn(cname)())
    q.__name__ = q.__qualname__ = cname
    q.__doc__ = f"Whether ggml's CPU backend was built for, and runs with, {feature.upper()}."
    return q


for _f in _CPU_FEATURES:
    globals()[f"ggml_cpu_has_{_f}"] = _cpu_has(_f)


def ggml_cpu_get_sve_cnt() -> int:
    """SVE vector length in bytes (0 without SVE)."""
    return int(_cpu_fn("ggml_cpu_get_sve_cnt")())


def ggml_cpu_get_rvv_vlen() -> int:
    """RISC-V vector length in bytes (0 without RVV)."""
    return int(_cpu_fn("ggml_cpu_get_rvv_vlen")())


def ggml_cpu_features() -> dict:
    """Every ggml_cpu_has_* answer by feature name, plus sve_cnt and rvv_vlen."""
    out = {f: globals()[f"ggml_cpu_has_{f}"]() for f in _CPU_FEATURES}
    out["sve_cnt"] = ggml_cpu_get_sve_cnt()
    out["rvv_vlen"] = ggml_cpu_get_rvv_vlen()
    return out


from .vulkan import *  # noqa: F401,F403,E402  (ggml_vulkan_*: device information through the registry)

__all__ = sorted(n for n in globals() if n.startswith("ggml_")) + ["Device", "Registry", "Event", "GraphPlan", "MultiBuffer"]
