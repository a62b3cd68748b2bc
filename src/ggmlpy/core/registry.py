"""ggml's backend registry, started on first use, and what must be set before it starts.

`devices()` lists what the loaded libggml reports, `backends()` its registries. Three things happen
before ggml's backends start, and that order matters:

* **ggml's log** goes to Python's `logging` first (ggml_log.py, imported here before anything
  reaches the registry).
* **Software Vulkan.** ggml-vulkan hides Vulkan devices of type CPU (Mesa's
  lavapipe, SwiftShader) unless ``GGML_VK_VISIBLE_DEVICES`` lists them, and it
  reads that variable exactly once: when its backend registers, i.e. at the
  first device query of the process. ``GGMLPY_SOFTWARE_VULKAN=1`` in the
  environment, or `enable_software_vulkan()` called before the first device is
  used (right after ``import ggmlpy``), sets it to every Vulkan device, hardware
  GPUs first. Called later, `enable_software_vulkan()` raises DeviceError.
* **The registry starts lazily**, at the first device query (any ``ag_*`` op,
  `devices()`, `get_backend()`), not at import, so that switch stays open
  after ``import ggmlpy``. Builds with loadable backends (a wheel, ``--portable``)
  load their modules then too, or at the first use of a CPU backend function.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ..bindings import c_str, ffi, found, lib
from ..errors import DeviceError, GGMLError
from .ggml_log import log  # first: ggml's log goes to Python's logging before any backend starts
from .rpc import is_rpc_device
from .vulkan_driver import physical_device_properties

_NULL = ffi.NULL


_TYPES = {
    lib.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu",
    lib.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
    lib.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu",
    lib.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel",
}


# -- software Vulkan (Mesa lavapipe): GGML_VK_VISIBLE_DEVICES before ggml-vulkan registers ------
VK_ENV = "GGML_VK_VISIBLE_DEVICES"


@dataclass(frozen=True)
class VulkanDevice:
    index: int   # the physical device index GGML_VK_VISIBLE_DEVICES refers to
    type: str    # discrete-gpu, integrated-gpu, virtual-gpu, cpu, other
    name: str


def vulkan_physical_devices() -> list[VulkanDevice]:
    """Every Vulkan physical device the system's Vulkan loader reports, in its order (the
    indices GGML_VK_VISIBLE_DEVICES uses), including the CPU-type ones ggml hides.
    Empty when there is no Vulkan loader (libvulkan.so.1) or no driver."""
    return [VulkanDevice(i, p["type"], p["name"]) for i, p in enumerate(physical_device_properties())]


def _has_backend_library(name: str) -> bool:
    return any((found.lib_dir / f"libggml-{name}{ext}").exists() for ext in (".so", ".dylib", ".dll"))


def _software_vulkan_value() -> tuple[str, list[VulkanDevice]]:
    """GGML_VK_VISIBLE_DEVICES listing every Vulkan device: hardware GPUs first, so "Vulkan0" stays
    the GPU ggml would have picked anyway, then virtual, other and CPU-type (software) devices."""
    devs = vulkan_physical_devices()
    rank = {"discrete-gpu": 0, "integrated-gpu": 1, "virtual-gpu": 2, "other": 3, "cpu": 4}
    order = sorted(devs, key=lambda d: (rank[d.type], d.index))
    return ",".join(str(d.index) for d in order), order


_software_vk: dict = {"requested": False, "devices": []}


def _apply_software_vulkan(strict: bool) -> str | None:
    """Set GGML_VK_VISIBLE_DEVICES (unless the user set it). Returns its value, or None."""
    if os.environ.get(VK_ENV):
        return os.environ[VK_ENV]  # the user's choice wins
    value, order = _software_vulkan_value()
    if not value:
        if strict:
            raise DeviceError("enable_software_vulkan(): the Vulkan loader reports no device. "
                              "Install Mesa's software driver: apt-get install mesa-vulkan-drivers "
                              "(and the loader: libvulkan1)")
        log.info("GGMLPY_SOFTWARE_VULKAN: no Vulkan device found")
        return None
    os.environ[VK_ENV] = value  # os.environ calls putenv: ggml's getenv() sees it
    _software_vk["devices"] = order
    return value


def enable_software_vulkan() -> str:
    """Make ggml's Vulkan backend show CPU-type Vulkan devices (Mesa lavapipe) too.

    Sets GGML_VK_VISIBLE_DEVICES to every Vulkan device (hardware GPUs first), unless it is
    already set, and returns its value. ggml-vulkan reads the variable once, when its backend
    registers at the first device query, so call this right after ``import ggmlpy`` (or set
    GGMLPY_SOFTWARE_VULKAN=1 in the environment): afterwards it raises DeviceError.
    The software devices then appear as ``Vulkan<i>`` in devices(); ``ag_device("gpu")``
    prefers a hardware GPU and takes a software device only when there is none."""
    with registry_lock:
        if not _has_backend_library("vulkan"):
            raise DeviceError(f"enable_software_vulkan(): the libggml at {found.lib_dir} has no Vulkan "
                              "backend. Build it with: python build_ggml.py --backend vulkan --backend rpc")
        if _registry["ready"]:
            if _registry["vk_env"] is not None:
                return _registry["vk_env"]  # already in effect (environment variable, or a second call)
            raise DeviceError(
                "enable_software_vulkan() was called too late: ggml's Vulkan backend has already listed its "
                "devices (it reads GGML_VK_VISIBLE_DEVICES once, at the first device query). Call it right "
                "after `import ggmlpy`, before creating tensors or querying devices, or start Python with "
                "GGMLPY_SOFTWARE_VULKAN=1 in the environment.")
        user_set = bool(os.environ.get(VK_ENV))
        value = _apply_software_vulkan(strict=True)
        ensure_backends()
        try:
            _check_vulkan_took(value)
        except DeviceError:
            if not user_set:  # it did not take: do not leave it for child processes either
                os.environ.pop(VK_ENV, None)
                _software_vk["devices"] = []
            raise
        _software_vk["requested"] = True
        return value


def _check_vulkan_took(value: str) -> None:
    """The registry may have been started behind our back (a direct ggml call): then the variable
    came too late, and ggml-vulkan lists fewer devices than it names."""
    want = len([v for v in value.replace(",", " ").split() if v.strip()])
    reg = lib.ggml_backend_reg_by_name(b"Vulkan")
    have = int(lib.ggml_backend_reg_dev_count(reg)) if reg != _NULL else 0
    if have < want:
        raise DeviceError(
            f"enable_software_vulkan(): ggml's Vulkan backend shows {have} device(s), but "
            f"GGML_VK_VISIBLE_DEVICES={value} names {want}: the backend had already registered before the "
            "variable was set (or rejected it). Start Python with GGMLPY_SOFTWARE_VULKAN=1 instead.")


def software_vulkan_enabled() -> bool:
    """True if software Vulkan devices (Mesa's lavapipe) were requested for this process."""
    return bool(_software_vk["requested"])


# -- the registry, started on first use -------------------------------------------------------------
registry_lock = threading.RLock()
_registry = {"ready": False, "vk_env": None}
DL_BUILD = lib.dl_build  # GGML_BACKEND_DL: backends are loadable modules


def _load_backends() -> None:
    """Static builds register their backends at the first registry call; GGML_BACKEND_DL builds
    need them loaded from disk."""
    if lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU) == _NULL:
        lib.ggml_backend_load_all_from_path(str(found.lib_dir).encode())
    if lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU) == _NULL:
        raise GGMLError(f"libggml at {found.lib_dir} registers no CPU backend")


def vulkan_visible_devices() -> str | None:
    """GGML_VK_VISIBLE_DEVICES as ggml-vulkan read it when its backend registered (None: unset);
    its order maps ggml's Vulkan device i to a physical device."""
    return _registry["vk_env"]


def ensure_backends() -> None:
    if _registry["ready"]:
        return
    with registry_lock:
        if not _registry["ready"]:
            _registry["vk_env"] = os.environ.get(VK_ENV)
            _load_backends()
            _registry["ready"] = True


if os.environ.get("GGMLPY_SOFTWARE_VULKAN", "").strip().lower() in ("1", "true", "yes", "on"):
    if _has_backend_library("vulkan") and _apply_software_vulkan(strict=False):
        _software_vk["requested"] = True

# A GGML_BACKEND_DL build's registry is empty, and the CPU backend's own functions absent, until the
# modules are loaded: the first registry call or look-up of a name the libraries lack loads them (not
# the import, so that enable_software_vulkan still comes before ggml-vulkan reads GGML_VK_VISIBLE_DEVICES).
lib.load_modules_first(ensure_backends)


@dataclass(frozen=True)
class DeviceInfo:
    name: str          # ggml's device name: "CPU", "Vulkan0", "CUDA0", "RPC0"
    description: str   # for RPC devices: the endpoint "host:port"
    type: str          # cpu, gpu, igpu, accel
    backend: str       # registry name: "CPU", "Vulkan", "CUDA", "RPC"
    memory_free: int   # bytes; 0 for RPC devices (asking would open a connection)
    memory_total: int


def all_devices():
    ensure_backends()
    return [lib.ggml_backend_dev_get(i) for i in range(int(lib.ggml_backend_dev_count()))]


def device_names() -> list[str]:
    return [c_str(lib.ggml_backend_dev_name(d)) for d in all_devices()]


def devices() -> list[DeviceInfo]:
    """Every device the loaded backends report (RPC servers once added with ag_device("rpc://...")).
    Software Vulkan devices (lavapipe) only with GGMLPY_SOFTWARE_VULKAN=1 / enable_software_vulkan()."""
    out = []
    for dev in all_devices():
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        if not is_rpc_device(dev):
            lib.ggml_backend_dev_memory(dev, free, total)
        out.append(DeviceInfo(
            name=c_str(lib.ggml_backend_dev_name(dev)),
            description=c_str(lib.ggml_backend_dev_description(dev)),
            type=_TYPES.get(int(lib.ggml_backend_dev_type(dev)), "other"),
            backend=c_str(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
            memory_free=int(free[0]), memory_total=int(total[0])))
    return out


def backends() -> list[str]:
    """Registry names of the compiled-in (or loaded) backends."""
    ensure_backends()
    return [c_str(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
            for i in range(int(lib.ggml_backend_reg_count()))]


def is_software_device(name: str) -> bool:
    """A Vulkan device that runs on the CPU (lavapipe, SwiftShader): "gpu" picks it last."""
    dev = lib.ggml_backend_dev_by_name(name.encode())
    if dev == _NULL or not name.startswith("Vulkan"):
        return False
    desc = c_str(lib.ggml_backend_dev_description(dev))
    soft = {d.name for d in _software_vk["devices"] if d.type == "cpu"}
    return desc in soft or any(k in desc.lower() for k in ("llvmpipe", "lavapipe", "swiftshader"))
