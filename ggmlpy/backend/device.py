"""Devices and backends from ggml's registry: CPU, Vulkan, CUDA, RPC.

`devices()` lists what the loaded libggml reports. `Device` is one initialised
backend (a ggml_backend_t) with its buffer type; ggmlpy keeps one per device
name, so every pool and graph on a device shares it.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ..bindings import ffi, found, lib
from ..errors import DeviceError, GGMLError

_NULL = ffi.NULL
_TYPES = {
    lib.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu",
    lib.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
    lib.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu",
    lib.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel",
}


def _s(p) -> str:
    return ffi.string(p).decode() if p != _NULL else ""


def _load_backends() -> None:
    """Static builds register their backends at load; GGML_BACKEND_DL builds need loading from disk."""
    if lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU) == _NULL:
        lib.ggml_backend_load_all_from_path(str(found.lib_dir).encode())
    if lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU) == _NULL:
        raise GGMLError(f"libggml at {found.lib_dir} registers no CPU backend")


_load_backends()


@dataclass(frozen=True)
class DeviceInfo:
    name: str          # ggml's device name: "CPU", "Vulkan0", "CUDA0", "RPC[127.0.0.1:50052]"
    description: str
    type: str          # cpu, gpu, igpu, accel
    backend: str       # registry name: "CPU", "Vulkan", "CUDA", "RPC"
    memory_free: int
    memory_total: int


def devices() -> list[DeviceInfo]:
    """Every device the loaded backends report."""
    out = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        lib.ggml_backend_dev_memory(dev, free, total)
        out.append(DeviceInfo(
            name=_s(lib.ggml_backend_dev_name(dev)),
            description=_s(lib.ggml_backend_dev_description(dev)),
            type=_TYPES.get(int(lib.ggml_backend_dev_type(dev)), "other"),
            backend=_s(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
            memory_free=int(free[0]), memory_total=int(total[0])))
    return out


def backends() -> list[str]:
    """Registry names of the compiled-in (or loaded) backends."""
    return [_s(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
            for i in range(int(lib.ggml_backend_reg_count()))]


class Backend:
    """An initialised ggml backend. Freed when garbage-collected or by .free()."""

    def __init__(self, ptr, label: str | None = None):
        if ptr == _NULL:
            raise DeviceError(f"could not initialise backend {label or ''}".strip())
        self.ptr = ptr
        self.dev = lib.ggml_backend_get_device(ptr)
        self.name = _s(lib.ggml_backend_name(ptr))
        self.device_name = _s(lib.ggml_backend_dev_name(self.dev)) if self.dev != _NULL else self.name
        self.is_cpu = self.dev != _NULL and lib.ggml_backend_dev_type(self.dev) == lib.GGML_BACKEND_DEVICE_TYPE_CPU
        self.buft = lib.ggml_backend_get_default_buffer_type(ptr)
        self.alignment = int(lib.ggml_backend_get_alignment(ptr))
        self.is_host = bool(lib.ggml_backend_buft_is_host(self.buft))
        self.n_threads = None
        self._free = _Freer(ptr)
        if self.is_cpu:
            self.set_n_threads(_default_threads())

    def set_n_threads(self, n: int) -> None:
        if not self.is_cpu:
            raise DeviceError(f"{self.name} is not a CPU backend; it has no thread count")
        n = int(n)
        if n < 1:
            raise GGMLError(f"n_threads must be >= 1, got {n}")
        _set_n_threads(self.ptr, n)
        self.n_threads = n

    def supports_op(self, p) -> bool:
        return bool(lib.ggml_backend_supports_op(self.ptr, p))

    def free(self) -> None:
        self._free()

    def __repr__(self):
        return f"<ggml Backend {self.device_name}>"


class _Freer:
    """Idempotent free: explicit free() and garbage collection must not free twice."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __call__(self):
        if self.ptr is not None:
            lib.ggml_backend_free(self.ptr)
            self.ptr = None

    def __del__(self):
        self()


def _default_threads() -> int:
    env = os.environ.get("GGMLPY_N_THREADS")
    if env:
        return max(1, int(env))
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _set_n_threads(ptr, n: int) -> None:
    try:
        fn = lib.ggml_backend_cpu_set_n_threads
    except AttributeError:  # GGML_BACKEND_DL build: ask the registry for the setter
        reg = lib.ggml_backend_dev_backend_reg(lib.ggml_backend_get_device(ptr))
        addr = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_set_n_threads")
        fn = ffi.cast("ggml_backend_set_n_threads_t", addr)
    fn(ptr, n)


# -- named devices, one backend each ------------------------------------------------------------
_lock = threading.Lock()
_cache: dict[str, Backend] = {}


def _resolve(spec: str) -> str:
    """Map ggmlpy's device spellings to a ggml device name."""
    s = spec.strip()
    low = s.lower()
    names = [d.name for d in devices()]
    if low == "cpu":
        return next(d.name for d in devices() if d.type == "cpu")
    if low == "gpu":
        dev = lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_GPU)
        if dev == _NULL:
            dev = lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_IGPU)
        if dev == _NULL:
            raise DeviceError(_unavailable("gpu", names))
        return _s(lib.ggml_backend_dev_name(dev))
    if low.startswith("rpc://"):
        return _rpc_device(s[len("rpc://"):], names)
    for kind in ("vulkan", "cuda"):
        if low == kind or low.startswith(kind + ":"):
            index = low.split(":", 1)[1] if ":" in low else "0"
            want = f"{'Vulkan' if kind == 'vulkan' else 'CUDA'}{index}"
            if want not in names:
                raise DeviceError(_unavailable(spec, names, kind))
            return want
    for n in names:  # ggml's own spelling: "Vulkan0", "CUDA0", "CPU"
        if n.lower() == low:
            return n
    raise DeviceError(_unavailable(spec, names))


def _unavailable(spec: str, names, kind: str | None = None) -> str:
    hint = f"\nBuild the backend with: python build_ggml.py --backend {kind}" if kind else ""
    if kind == "vulkan":
        hint += ("\nSoftware Vulkan devices (Mesa lavapipe) are hidden by ggml unless "
                 "GGML_VK_VISIBLE_DEVICES lists them; ggmlpy.enable_software_vulkan() sets it.")
    return f"device {spec!r} is not available; available devices: {', '.join(names) or 'none'}{hint}"


def _rpc_device(endpoint: str, names) -> str:
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if reg == _NULL:
        raise DeviceError(_unavailable("rpc://" + endpoint, names, "rpc"))
    add = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if add == _NULL:
        raise DeviceError("this libggml's RPC backend cannot add servers")
    add_server = ffi.cast("ggml_backend_reg_t (*)(const char *)", add)
    sub = add_server(endpoint.encode())
    if sub == _NULL or lib.ggml_backend_reg_dev_count(sub) == 0:
        raise DeviceError(f"could not reach the ggml RPC server at {endpoint}")
    return _s(lib.ggml_backend_dev_name(lib.ggml_backend_reg_dev_get(sub, 0)))


def get_backend(spec: str = "cpu") -> Backend:
    """The shared backend for a device spelling ("cpu", "gpu", "vulkan:1", "cuda", "rpc://h:p", "Vulkan0")."""
    with _lock:
        name = _resolve(spec)
        b = _cache.get(name)
        if b is None:
            dev = lib.ggml_backend_dev_by_name(name.encode())
            if dev == _NULL:
                raise DeviceError(_unavailable(spec, [d.name for d in devices()]))
            b = _cache[name] = Backend(lib.ggml_backend_dev_init(dev, _NULL), name)
        return b
