"""ggmlR's devices and registries (ggml_backend_dev_* and ggml_backend_reg_*): `Device` and
`Registry` handles, loading and unloading backend modules, and the device-type constants.

A lookup that finds nothing returns None, as ggmlR returns NULL; a device of an unloaded backend
module, or an RPC server that is gone, is refused before ggml sees it.
"""
from __future__ import annotations

import glob
import os

from ..bindings import c_str, enum_constants, ffi, found, lib
from ..errors import GGMLError, check
from .buffers import BackendBuffer, buffer_arg
from .checked import index_arg
from .device import Backend, backend_arg, dev_props, endpoint_of
from .handles import Tensor
from .meta_split import _DEVICES
from .registry import DL_BUILD, backends, devices, ensure_backends
from .rpc import rpc_probe, split_endpoint

_NULL = ffi.NULL

_CONSTANTS = {  # ggmlR's function: (ggml's constant, what it means)
    "ggml_backend_device_type_cpu": ("GGML_BACKEND_DEVICE_TYPE_CPU", "GGML_BACKEND_DEVICE_TYPE_CPU."),
    "ggml_backend_device_type_gpu": ("GGML_BACKEND_DEVICE_TYPE_GPU", "GGML_BACKEND_DEVICE_TYPE_GPU."),
    "ggml_backend_device_type_igpu": ("GGML_BACKEND_DEVICE_TYPE_IGPU", "GGML_BACKEND_DEVICE_TYPE_IGPU (integrated GPU)."),
    "ggml_backend_device_type_accel": ("GGML_BACKEND_DEVICE_TYPE_ACCEL", "GGML_BACKEND_DEVICE_TYPE_ACCEL (an accelerator used alongside the CPU, e.g. BLAS)."),
}
globals().update(enum_constants(__name__, _CONSTANTS))


_DEV_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


# -- devices and registries ------------------------------------------------------------------------------
_LOADED: set = set()    # registries this process loaded with ggml_backend_load (int addresses)
_UNLOADED: set = set()  # ... and later unloaded: their devices are gone


class _Handle:
    """A ggml object the process keeps (a device, a registry): equal when the pointer is, shown by name."""

    __slots__ = ()

    def __eq__(self, other):
        return type(other) is type(self) and self.ptr == other.ptr

    def __hash__(self):
        return hash(int(ffi.cast("uintptr_t", self.ptr)))

    def __repr__(self):
        return f"<ggml {type(self).__name__} {self.name}>"


class Device(_Handle):
    """A ggml device (ggml_backend_dev_t). Devices live as long as the process, unless their backend
    module is unloaded (ggml_backend_unload), after which the handle refuses to be used."""

    __slots__ = ("ptr", "reg")

    def __init__(self, ptr):
        self.ptr = ptr
        self.reg = int(ffi.cast("uintptr_t", lib.ggml_backend_dev_backend_reg(ptr)))

    @property
    def name(self) -> str:
        """The device's name, as ggml gives it ("CPU", "Vulkan0", ...)."""
        return c_str(lib.ggml_backend_dev_name(self.ptr))


class Registry(_Handle):
    """A ggml backend registry (ggml_backend_reg_t): one per backend library (CPU, Vulkan, RPC, ...)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    @property
    def name(self) -> str:
        """The registry's (backend family's) name, as ggml gives it."""
        return c_str(lib.ggml_backend_reg_name(self.ptr))


def device_arg(d, what) -> Device:
    if not isinstance(d, Device):
        raise GGMLError(f"{what}: expected a Device (ggml_backend_dev_get), got {type(d).__name__}")
    if d.reg in _UNLOADED:
        raise GGMLError(f"{what}: the device's backend module has been unloaded")
    return d


def registry_arg(r, what) -> Registry:
    if not isinstance(r, Registry):
        raise GGMLError(f"{what}: expected a Registry (ggml_backend_reg_get), got {type(r).__name__}")
    if int(ffi.cast("uintptr_t", r.ptr)) in _UNLOADED:
        raise GGMLError(f"{what}: the backend module has been unloaded")
    return r


def ggml_backend_dev_get(i: int) -> Device:
    """Device i (0-based)."""
    ensure_backends()
    n = int(lib.ggml_backend_dev_count())
    return Device(lib.ggml_backend_dev_get(index_arg(i, n, "ggml_backend_dev_get")))


def ggml_backend_dev_by_name(name: str) -> Device | None:
    """The device called `name` ("CPU", "Vulkan0", ...), or None."""
    ensure_backends()
    p = lib.ggml_backend_dev_by_name(str(name).encode())
    return None if p == _NULL else Device(p)


def ggml_backend_dev_by_type(type: int) -> Device | None:
    """The first device of a type (ggml_backend_device_type_*()), or None."""
    ensure_backends()
    t = int(type)
    check(t in _DEV_TYPES, f"ggml_backend_dev_by_type: unknown device type {t}")
    p = lib.ggml_backend_dev_by_type(t)
    return None if p == _NULL else Device(p)


def ggml_backend_dev_name(dev: Device) -> str:
    """The device's name."""
    return device_arg(dev, "ggml_backend_dev_name").name


def ggml_backend_dev_description(dev: Device) -> str:
    """The device's description (for RPC devices: the server endpoint)."""
    return c_str(lib.ggml_backend_dev_description(device_arg(dev, "ggml_backend_dev_description").ptr))


def ggml_backend_dev_type(dev: Device) -> int:
    """The device's type code (see ggml_backend_device_type_*)."""
    return int(lib.ggml_backend_dev_type(device_arg(dev, "ggml_backend_dev_type").ptr))


def _check_reachable(dev: Device) -> None:
    """ggml's RPC client aborts when its server is gone: probe it first."""
    endpoint = endpoint_of(dev.ptr)
    if endpoint:
        host, port, _ = split_endpoint(endpoint)
        rpc_probe(host, port)


def ggml_backend_dev_memory(dev: Device) -> dict:
    """{"free": bytes, "total": bytes} of the device's memory."""
    dev = device_arg(dev, "ggml_backend_dev_memory")
    _check_reachable(dev)
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    lib.ggml_backend_dev_memory(dev.ptr, free, total)
    return {"free": float(free[0]), "total": float(total[0])}


def ggml_backend_dev_get_props(dev: Device) -> dict:
    """name, description, memory_free, memory_total, type, device_id (ggml's PCI bus id, or None)
    and capabilities of a device: ggmlR's nested `caps` {"async", "host_buffer",
    "buffer_from_host_ptr", "events", "mmap_support"} (R's `props$caps["async"]` is
    `props["caps"]["async"]`), and the same flags flat as caps_async, caps_host_buffer, ..."""
    dev = device_arg(dev, "ggml_backend_dev_get_props")
    _check_reachable(dev)
    return dev_props(dev.ptr)


def ggml_backend_dev_init(dev: Device, params: str | None = None) -> Backend:
    """A new backend on the device."""
    dev = device_arg(dev, "ggml_backend_dev_init")
    _check_reachable(dev)
    return Backend(lib.ggml_backend_dev_init(dev.ptr, params.encode() if params else _NULL), dev.name)


def ggml_backend_dev_supports_op(dev: Device, op: Tensor) -> bool:
    """Whether the device has a kernel for the op that computes `op` (with its types and shapes)."""
    dev = device_arg(dev, "ggml_backend_dev_supports_op")
    if not isinstance(op, Tensor):
        raise GGMLError("ggml_backend_dev_supports_op: op must be a Tensor")
    return bool(lib.ggml_backend_dev_supports_op(dev.ptr, op.ptr))


def ggml_backend_dev_supports_buft(dev: Device, buft: Backend | BackendBuffer) -> bool:
    """Whether the device can use buffers of type `buft` (a Backend's or a buffer's type)."""
    dev = device_arg(dev, "ggml_backend_dev_supports_buft")
    p = buft.buft if isinstance(buft, Backend) else lib.ggml_backend_buffer_get_type(buffer_arg(buft, "ggml_backend_dev_supports_buft").ptr)
    return bool(lib.ggml_backend_dev_supports_buft(dev.ptr, p))


def ggml_backend_dev_offload_op(dev: Device, op: Tensor) -> bool:
    """Whether ggml's scheduler would move `op` to this device even if its weights are elsewhere."""
    dev = device_arg(dev, "ggml_backend_dev_offload_op")
    if not isinstance(op, Tensor):
        raise GGMLError("ggml_backend_dev_offload_op: op must be a Tensor")
    return bool(lib.ggml_backend_dev_offload_op(dev.ptr, op.ptr))


def ggml_backend_get_device(backend: Backend) -> Device | None:
    """The device a backend runs on."""
    b = backend_arg(backend, "ggml_backend_get_device")
    if b.dev == _NULL:
        return None
    # a meta device's own handle (its split function, its states)
    return _DEVICES.get(int(ffi.cast("uintptr_t", b.dev))) or Device(b.dev)


def ggml_backend_reg_count() -> int:
    """How many backend registries are loaded."""
    ensure_backends()
    return int(lib.ggml_backend_reg_count())


def ggml_backend_reg_get(i: int) -> Registry:
    """Registry i (0-based)."""
    return Registry(lib.ggml_backend_reg_get(index_arg(i, ggml_backend_reg_count(), "ggml_backend_reg_get")))


def ggml_backend_reg_by_name(name: str) -> Registry | None:
    """The registry called `name` ("CPU", "Vulkan", "RPC", ...), or None."""
    ensure_backends()
    p = lib.ggml_backend_reg_by_name(str(name).encode())
    return None if p == _NULL else Registry(p)


def ggml_backend_reg_name(reg: Registry) -> str:
    """The registry's name."""
    return registry_arg(reg, "ggml_backend_reg_name").name


def ggml_backend_reg_dev_count(reg: Registry) -> int:
    """How many devices the registry has."""
    return int(lib.ggml_backend_reg_dev_count(registry_arg(reg, "ggml_backend_reg_dev_count").ptr))


def ggml_backend_reg_dev_get(reg: Registry, i: int) -> Device:
    """Device i (0-based) of the registry."""
    reg = registry_arg(reg, "ggml_backend_reg_dev_get")
    n = int(lib.ggml_backend_reg_dev_count(reg.ptr))
    return Device(lib.ggml_backend_reg_dev_get(reg.ptr, index_arg(i, n, "ggml_backend_reg_dev_get")))


def ggml_backend_register(reg: Registry) -> Registry:
    """Add a registry to ggml's list (no-op when it is already listed)."""
    reg = registry_arg(reg, "ggml_backend_register")
    if any(lib.ggml_backend_reg_get(i) == reg.ptr for i in range(ggml_backend_reg_count())):
        return reg
    lib.ggml_backend_register(reg.ptr)
    return reg


def ggml_backend_device_register(dev: Device) -> Device:
    """Add a device to ggml's list (no-op when it is already listed)."""
    dev = device_arg(dev, "ggml_backend_device_register")
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
    reg = registry_arg(reg, "ggml_backend_unload")
    addr = int(ffi.cast("uintptr_t", reg.ptr))
    check(addr in _LOADED, "ggml_backend_unload: only modules loaded with ggml_backend_load can be unloaded")
    _UNLOADED.add(addr)
    _LOADED.discard(addr)
    lib.ggml_backend_unload(reg.ptr)


def ggml_backend_load_all() -> None:
    """Load every backend module next to libggml (builds with loadable backends); static builds
    have theirs registered already. Safe to call more than once."""
    ensure_backends()
    if DL_BUILD:
        have = set(backends())
        d = str(found.lib_dir)
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


def ggml_backend_dev_count() -> int:
    """The number of devices the loaded backends report."""
    return len(devices())
