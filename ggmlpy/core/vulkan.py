"""ggmlR's ggml_vulkan_* device information and backends, through ggml's registry.

Everything goes through the "Vulkan" registry and its devices (never the ggml-vulkan
symbols directly), so it works in builds with loadable backends and answers "no
Vulkan" cleanly in builds without it. Software devices (lavapipe) are listed only
after enable_software_vulkan() / GGMLPY_SOFTWARE_VULKAN=1, as ggml-vulkan hides them.
"""
from __future__ import annotations

from . import device as _device
from .device import Backend
from ..bindings import ffi, lib
from ..errors import GGMLError, check

_NULL = ffi.NULL


def _s(p) -> str:
    return ffi.string(p).decode() if p != _NULL else ""


def _vk_devs() -> list:
    _device._ensure_backends()
    reg = lib.ggml_backend_reg_by_name(b"Vulkan")
    if reg == _NULL:
        return []
    return [lib.ggml_backend_reg_dev_get(reg, i) for i in range(int(lib.ggml_backend_reg_dev_count(reg)))]


def _vk_dev(device: int):
    devs = _vk_devs()
    i = int(device)
    if not 0 <= i < len(devs):
        raise GGMLError(f"Vulkan device {i} does not exist ({len(devs)} Vulkan device(s) visible)")
    return devs[i]


def ggml_vulkan_available() -> bool:
    """Whether the loaded libggml has the Vulkan backend and it sees at least one device."""
    return len(_vk_devs()) > 0


def ggml_vulkan_device_count() -> int:
    """How many Vulkan devices ggml sees (0 without the Vulkan backend)."""
    return len(_vk_devs())


def ggml_vulkan_device_description(device: int = 0) -> str:
    """The device's description (the GPU's name)."""
    return _s(lib.ggml_backend_dev_description(_vk_dev(device)))


def ggml_vulkan_device_memory(device: int = 0) -> dict:
    """{"free": bytes, "total": bytes} of a Vulkan device's memory."""
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    lib.ggml_backend_dev_memory(_vk_dev(device), free, total)
    return {"free": float(free[0]), "total": float(total[0])}


def ggml_vulkan_list_devices() -> list:
    """One dict per Vulkan device: index, name, free_memory, total_memory."""
    out = []
    for i, d in enumerate(_vk_devs()):
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        lib.ggml_backend_dev_memory(d, free, total)
        out.append({"index": i, "name": _s(lib.ggml_backend_dev_description(d)),
                    "free_memory": float(free[0]), "total_memory": float(total[0])})
    return out


def ggml_vulkan_init(device: int = 0) -> Backend:
    """A new backend on Vulkan device `device`."""
    d = _vk_dev(device)
    return Backend(lib.ggml_backend_dev_init(d, _NULL), _s(lib.ggml_backend_dev_name(d)))


def ggml_vulkan_is_backend(backend: object) -> bool:
    """Whether `backend` runs on a Vulkan device."""
    if not isinstance(backend, Backend) or backend.ptr is None or backend.dev == _NULL:
        return False
    reg = lib.ggml_backend_dev_backend_reg(backend.dev)
    return _s(lib.ggml_backend_reg_name(reg)) == "Vulkan"


def ggml_vulkan_backend_name(backend: Backend) -> str:
    """The Vulkan backend's name (e.g. "Vulkan0")."""
    check(ggml_vulkan_is_backend(backend), "ggml_vulkan_backend_name: not a Vulkan backend")
    return backend.name


def ggml_vulkan_free(backend: Backend) -> None:
    """Free a Vulkan backend."""
    check(ggml_vulkan_is_backend(backend), "ggml_vulkan_free: not a Vulkan backend")
    backend.free()


def ggml_vulkan_status() -> None:
    """Print whether Vulkan is available and its devices with their memory."""
    if not ggml_vulkan_available():
        print("Vulkan: NOT AVAILABLE")
        if lib.ggml_backend_reg_by_name(b"Vulkan") != _NULL:
            print("  the Vulkan backend is built in but sees no device (software devices such as lavapipe "
                  "need ggmlpy.enable_software_vulkan() or GGMLPY_SOFTWARE_VULKAN=1)")
        else:
            print("  this libggml has no Vulkan backend: python build_ggml.py --backend vulkan")
        return None
    devs = ggml_vulkan_list_devices()
    print("Vulkan: AVAILABLE")
    print(f"  Devices: {len(devs)}")
    for d in devs:
        print(f"  [{d['index']}] {d['name']}")
        print(f"      Memory: {d['free_memory'] / 1e9:.2f} GB free / {d['total_memory'] / 1e9:.2f} GB total")
    return None


__all__ = sorted(n for n in globals() if n.startswith("ggml_vulkan_"))
