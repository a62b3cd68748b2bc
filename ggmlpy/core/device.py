"""Devices and backends from ggml's registry: CPU, Vulkan, CUDA, RPC.

`devices()` lists what the loaded libggml reports. `Device` is one initialised
backend (a ggml_backend_t) with its buffer type; ggmlpy keeps one per device
name, so every pool and graph on a device shares it.

Three things here happen before ggml's backends start, and that order matters:

* **ggml's log** goes to Python's `logging` (logger ``ggmlpy.ggml``, level
  WARNING unless you set another, or ``GGMLPY_GGML_LOG=debug|info|warning|error``)
  instead of straight to stderr. ggml-vulkan also writes a few error messages
  with ``std::cerr``; those cannot be redirected.
* **Software Vulkan.** ggml-vulkan hides Vulkan devices of type CPU (Mesa's
  lavapipe, SwiftShader) unless ``GGML_VK_VISIBLE_DEVICES`` lists them, and it
  reads that variable exactly once: when its backend registers, i.e. at the
  first device query of the process. ``GGMLPY_SOFTWARE_VULKAN=1`` in the
  environment, or `enable_software_vulkan()` called before the first device is
  used (right after ``import ggmlpy``), sets it to every Vulkan device, hardware
  GPUs first. Called later, `enable_software_vulkan()` raises DeviceError.
* **The registry starts lazily**, at the first device query (any ``ag_*`` op,
  `devices()`, `get_backend()`), not at import, so that switch stays open
  after ``import ggmlpy``. Builds with loadable backends (``--portable``) still
  load them at import, so there only the environment variable works.

RPC (``ag_device("rpc://host:port")``): ggmlpy checks an endpoint itself before
ggml connects (a TCP connect plus ggml's HELLO handshake, with a timeout), never
asks an RPC device for its memory in `devices()`, and checks the server again
before opening a new backend on it. A server that dies or stops answering later
costs its device, not the process: build_ggml.py patches ggml's RPC client
(rpc-fail-soft) so that a failed send or receive, or one that waits longer than
the RPC timeout (`set_rpc_timeout`, ``GGMLPY_RPC_TIMEOUT``, in seconds, default 5), marks
the connection lost instead of aborting; every ggmlpy call on that device then
raises `DeviceLostError` (a DeviceError), at once from the first loss on, and the
other devices go on. Without the patch (an older build) ggml's client aborts as
before. ggml's rpc-server has no authentication: bind it to loopback or a private
network only.
"""
from __future__ import annotations

import atexit
import logging
import os
import socket
import struct
import threading
from dataclasses import dataclass

import cffi

from .._sigint import uninterruptible
from ..bindings import ffi, found, lib
from ..errors import DeviceError, DeviceLostError, GGMLError
from . import threadpool, threads

_NULL = ffi.NULL
_TYPES = {
    lib.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu",
    lib.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
    lib.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu",
    lib.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel",
}


def _s(p) -> str:
    return ffi.string(p).decode(errors="replace") if p != _NULL else ""


# -- ggml's log -> logging.getLogger("ggmlpy.ggml") ---------------------------------------------
log = logging.getLogger("ggmlpy.ggml")
if log.level == logging.NOTSET:  # ggml is chatty at INFO/DEBUG; users opt in
    _lvl = os.environ.get("GGMLPY_GGML_LOG", "WARNING").upper()
    log.setLevel(getattr(logging, "WARNING" if _lvl == "WARN" else _lvl, logging.WARNING))

_LEVELS = {
    lib.GGML_LOG_LEVEL_NONE: logging.INFO,
    lib.GGML_LOG_LEVEL_DEBUG: logging.DEBUG,
    lib.GGML_LOG_LEVEL_INFO: logging.INFO,
    lib.GGML_LOG_LEVEL_WARN: logging.WARNING,
    lib.GGML_LOG_LEVEL_ERROR: logging.ERROR,
}
_CONT = lib.GGML_LOG_LEVEL_CONT
_log_state = threading.local()  # a message may arrive in pieces (GGML_LOG_LEVEL_CONT), per thread

# ggml-vulkan says what it decided about each device (fp16, subgroup size, matrix cores, ...) in
# one DEBUG line as the device registers, "ggml_vulkan: <index> = <name> (<driver>) | uma: 0 |
# fp16: 1 | ...", and nowhere else: kept whatever the log level, for ggml_vulkan_device_caps.
VK_DEVICE_REPORTS: dict[int, str] = {}
_VK_REPORT = b"ggml_vulkan: "


def _note_vulkan_report(text: bytes) -> None:
    head, sep, rest = text.partition(b" = ")
    index = head[len(_VK_REPORT):]
    if sep and index.isdigit() and b" | " in rest:
        VK_DEVICE_REPORTS[int(index)] = rest.decode(errors="replace").strip()


def _on_ggml_log(level, text, _user_data) -> None:
    try:
        if text != _NULL and level != _CONT:
            raw = ffi.string(text)
            if raw.startswith(_VK_REPORT):
                _note_vulkan_report(raw)
        st = _log_state
        if level == _CONT:
            lvl = getattr(st, "level", logging.INFO)
        else:
            lvl = st.level = _LEVELS.get(int(level), logging.INFO)
        if not log.isEnabledFor(lvl):
            st.buf = ""
            return
        buf = getattr(st, "buf", "") + (ffi.string(text).decode(errors="replace") if text != _NULL else "")
        if buf.endswith("\n") or len(buf) > 8192:
            st.buf = ""
            for line in buf.rstrip("\n").split("\n"):
                log.log(lvl, "%s", line)
        else:
            st.buf = buf
    except Exception:  # never let an exception cross into C
        pass


# ffi.callback keeps a C trampoline alive only as long as this object: keep it at module level.
try:
    _LOG_CALLBACK = ffi.callback("void(enum ggml_log_level, const char *, void *)", _on_ggml_log)
except (MemoryError, OSError) as _e:  # no write+execute memory for the trampoline (hardened kernels)
    _LOG_CALLBACK = None
    logging.getLogger("ggmlpy").warning("ggml's log stays on stderr: no cffi callback (%s)", _e)
if _LOG_CALLBACK is not None:
    lib.ggml_log_set(_LOG_CALLBACK, _NULL)

    @atexit.register
    def _restore_ggml_log() -> None:
        # C destructors run after the interpreter is gone: they must not call back into Python.
        lib.ggml_log_set(_NULL, _NULL)


# -- software Vulkan (Mesa lavapipe): GGML_VK_VISIBLE_DEVICES before ggml-vulkan registers ------
_VK_ENV = "GGML_VK_VISIBLE_DEVICES"
_VK_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}
_VK_CDEF = """
typedef struct { int sType; const void *pNext; const char *pApplicationName; uint32_t applicationVersion;
                 const char *pEngineName; uint32_t engineVersion; uint32_t apiVersion; } VkApplicationInfo;
typedef struct { int sType; const void *pNext; uint32_t flags; const VkApplicationInfo *pApplicationInfo;
                 uint32_t enabledLayerCount; const char *const *ppEnabledLayerNames;
                 uint32_t enabledExtensionCount; const char *const *ppEnabledExtensionNames; } VkInstanceCreateInfo;
typedef struct { uint32_t apiVersion; uint32_t driverVersion; uint32_t vendorID; uint32_t deviceID;
                 int deviceType; char deviceName[256]; uint8_t rest[4096]; } VkPhysicalDevicePropertiesHead;
int vkCreateInstance(const VkInstanceCreateInfo *info, const void *allocator, void **instance);
void vkDestroyInstance(void *instance, const void *allocator);
int vkEnumeratePhysicalDevices(void *instance, uint32_t *count, void **devices);
void vkGetPhysicalDeviceProperties(void *device, VkPhysicalDevicePropertiesHead *props);
"""


@dataclass(frozen=True)
class VulkanDevice:
    index: int   # the physical device index GGML_VK_VISIBLE_DEVICES refers to
    type: str    # discrete-gpu, integrated-gpu, virtual-gpu, cpu, other
    name: str


def vulkan_physical_devices() -> list[VulkanDevice]:
    """Every Vulkan physical device the system's Vulkan loader reports, in its order (the
    indices GGML_VK_VISIBLE_DEVICES uses), including the CPU-type ones ggml hides.
    Empty when there is no Vulkan loader (libvulkan.so.1) or no driver."""
    vffi = cffi.FFI()
    vffi.cdef(_VK_CDEF)
    try:
        vk = vffi.dlopen("libvulkan.so.1")
    except OSError:
        return []
    app = vffi.new("VkApplicationInfo *", {"sType": 0, "pApplicationName": vffi.NULL,
                                            "apiVersion": (1 << 22) | (1 << 12)})  # 1.1
    info = vffi.new("VkInstanceCreateInfo *", {"sType": 1, "pApplicationInfo": app})
    inst = vffi.new("void **")
    if vk.vkCreateInstance(info, vffi.NULL, inst) != 0:
        return []
    try:
        n = vffi.new("uint32_t *")
        if vk.vkEnumeratePhysicalDevices(inst[0], n, vffi.NULL) != 0 or n[0] == 0:
            return []
        handles = vffi.new("void *[]", n[0])
        if vk.vkEnumeratePhysicalDevices(inst[0], n, handles) not in (0, 5):  # VK_SUCCESS, VK_INCOMPLETE
            return []
        out = []
        for i in range(n[0]):
            props = vffi.new("VkPhysicalDevicePropertiesHead *")
            vk.vkGetPhysicalDeviceProperties(handles[i], props)
            out.append(VulkanDevice(i, _VK_TYPES.get(props.deviceType, "other"),
                                    vffi.string(props.deviceName).decode(errors="replace")))
        return out
    finally:
        vk.vkDestroyInstance(inst[0], vffi.NULL)


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
    if os.environ.get(_VK_ENV):
        return os.environ[_VK_ENV]  # the user's choice wins
    value, order = _software_vulkan_value()
    if not value:
        if strict:
            raise DeviceError("enable_software_vulkan(): the Vulkan loader reports no device. "
                              "Install Mesa's software driver: apt-get install mesa-vulkan-drivers "
                              "(and the loader: libvulkan1)")
        log.info("GGMLPY_SOFTWARE_VULKAN: no Vulkan device found")
        return None
    os.environ[_VK_ENV] = value  # os.environ calls putenv: ggml's getenv() sees it
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
    with _registry_lock:
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
        user_set = bool(os.environ.get(_VK_ENV))
        value = _apply_software_vulkan(strict=True)
        _ensure_backends()
        try:
            _check_vulkan_took(value)
        except DeviceError:
            if not user_set:  # it did not take: do not leave it for child processes either
                os.environ.pop(_VK_ENV, None)
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
_registry_lock = threading.RLock()
_registry = {"ready": False, "vk_env": None}
_DL_BUILD = lib.dl_build  # GGML_BACKEND_DL: backends are loadable modules


def _load_backends() -> None:
    """Static builds register their backends at the first registry call; GGML_BACKEND_DL builds
    need them loaded from disk."""
    if lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU) == _NULL:
        lib.ggml_backend_load_all_from_path(str(found.lib_dir).encode())
    if lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU) == _NULL:
        raise GGMLError(f"libggml at {found.lib_dir} registers no CPU backend")


def _ensure_backends() -> None:
    if _registry["ready"]:
        return
    with _registry_lock:
        if not _registry["ready"]:
            _registry["vk_env"] = os.environ.get(_VK_ENV)
            _load_backends()
            _registry["ready"] = True


if os.environ.get("GGMLPY_SOFTWARE_VULKAN", "").strip().lower() in ("1", "true", "yes", "on"):
    if _has_backend_library("vulkan") and _apply_software_vulkan(strict=False):
        _software_vk["requested"] = True

if _DL_BUILD:  # other modules call ggml's registry directly; in DL builds it is empty until loaded
    _ensure_backends()


@dataclass(frozen=True)
class DeviceInfo:
    name: str          # ggml's device name: "CPU", "Vulkan0", "CUDA0", "RPC0"
    description: str   # for RPC devices: the endpoint "host:port"
    type: str          # cpu, gpu, igpu, accel
    backend: str       # registry name: "CPU", "Vulkan", "CUDA", "RPC"
    memory_free: int   # bytes; 0 for RPC devices (asking would open a connection)
    memory_total: int


def _is_rpc(dev) -> bool:
    reg = lib.ggml_backend_dev_backend_reg(dev)  # NULL for meta devices, which belong to no registry
    return reg != _NULL and _s(lib.ggml_backend_reg_name(reg)).startswith("RPC")


def _all_devs():
    _ensure_backends()
    return [lib.ggml_backend_dev_get(i) for i in range(int(lib.ggml_backend_dev_count()))]


def _names() -> list[str]:
    return [_s(lib.ggml_backend_dev_name(d)) for d in _all_devs()]


def devices() -> list[DeviceInfo]:
    """Every device the loaded backends report (RPC servers once added with ag_device("rpc://...")).
    Software Vulkan devices (lavapipe) only with GGMLPY_SOFTWARE_VULKAN=1 / enable_software_vulkan()."""
    out = []
    for dev in _all_devs():
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        if not _is_rpc(dev):
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
    _ensure_backends()
    return [_s(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
            for i in range(int(lib.ggml_backend_reg_count()))]


def is_software_device(name: str) -> bool:
    """A Vulkan device that runs on the CPU (lavapipe, SwiftShader): "gpu" picks it last."""
    dev = lib.ggml_backend_dev_by_name(name.encode())
    if dev == _NULL or not name.startswith("Vulkan"):
        return False
    desc = _s(lib.ggml_backend_dev_description(dev))
    soft = {d.name for d in _software_vk["devices"] if d.type == "cpu"}
    return desc in soft or any(k in desc.lower() for k in ("llvmpipe", "lavapipe", "swiftshader"))


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
        self.endpoint = _endpoint_of(self.dev) if self.dev != _NULL else None  # "host:port" of an RPC device
        self._free = _Freer(ptr)
        self._thread_setter = _set_n_threads if self.is_cpu else None
        self._pools = threadpool.PoolSet(ptr) if self.is_cpu and threadpool.available() else None
        self._threads_lock = threading.Lock()  # the count ggml holds and n_threads change together
        self._applied = None  # the count ggml computes with: n_threads, or fewer under load
        if self.is_cpu:
            threads.follow(self)

    def set_n_threads(self, n: int | None) -> None:
        """Set how many threads this CPU backend computes with, from now on whatever
        set_num_threads() says; None: follow set_num_threads() again. DeviceError for
        backends without a thread count."""
        if self._thread_setter is None:
            raise DeviceError(f"{self.name} is not a CPU backend; it has no thread count")
        if n is None:
            threads.follow(self)
            return
        n = threads.checked_count(n, "set_n_threads")
        threads.unfollow(self)
        self._use_threads(n)

    def _use_threads(self, n: int) -> None:
        with self._threads_lock:
            if self._free.ptr is None:
                return  # freed: nothing computes here any more
            self._apply_threads(n)
            self.n_threads = n

    def _apply_threads(self, n: int) -> None:
        if self._pools is not None:  # the pool first: while a count grows, a compute planned between the two still fits its pool
            self._pools.use(n)
        self._thread_setter(self.ptr, n)
        self._applied = n

    def fit_threads_to_load(self) -> int:
        """Have this backend compute from now on with as many of its n_threads as the machine's
        load leaves cores for (threads.threads_for_load), on the pool of that count; returns the
        count. Called before each graph compute; the count stays until a compute finds another
        load or the count is set (switching pools wakes the old pool's threads, so it happens
        only when the load changes). Backends without a thread count: unchanged."""
        n = self.n_threads
        if self._thread_setter is None or not n:
            return n
        k = threads.threads_for_load(n)
        if k != self._applied:
            with self._threads_lock:
                if self._free.ptr is not None and self.n_threads == n:  # else a count set meanwhile holds
                    self._apply_threads(k)
        return k

    def single_threaded(self) -> "Backend":
        """This backend, computing on one thread from now on whatever set_num_threads() says."""
        self.set_n_threads(1)
        return self

    def check(self) -> None:
        """Raise DeviceLostError if this is an RPC device whose server died or froze (the patched
        ggml client then skips every command and its replies read as zeros: call this after each
        call that reaches the device, and before trusting what it returned). Free elsewhere."""
        if self.endpoint is not None:
            rpc_check(self.endpoint, self.device_name)

    def supports_op(self, p) -> bool:
        """True if this backend has a kernel for the ggml tensor (op node) `p`."""
        return bool(lib.ggml_backend_supports_op(self.ptr, p))

    @uninterruptible
    def free(self) -> None:
        """Free the backend now (also done when the object is collected)."""
        threads.unfollow(self)
        self._free()
        if self._pools is not None:
            self._pools.free()

    @property
    def freed(self) -> bool:
        """Whether free() (ggml_backend_free) has run: the backend must not compute any more."""
        return self._free.ptr is None

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

    @uninterruptible
    def __del__(self):
        self()


def _set_n_threads(ptr, n: int) -> None:
    try:
        fn = lib.ggml_backend_cpu_set_n_threads
    except AttributeError:  # GGML_BACKEND_DL build: ask the registry for the setter
        reg = lib.ggml_backend_dev_backend_reg(lib.ggml_backend_get_device(ptr))
        addr = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_set_n_threads")
        fn = ffi.cast("ggml_backend_set_n_threads_t", addr)
    fn(ptr, n)


def blas_backend(n_threads: int | None = None) -> "Backend | None":
    """ggml's BLAS backend (OpenBLAS), when this libggml has one: not a device of its own but
    the CPU device's helper for matrix products with a transposed operand, which BLAS reads
    in place where ggml's CPU kernels need a copy. Its threads: `n_threads`, or (None) the
    thread setting, followed as CPU backends follow it."""
    dev = lib.ggml_backend_dev_by_name(b"BLAS")
    if dev == _NULL:
        return None
    b = Backend(lib.ggml_backend_dev_init(dev, _NULL), "BLAS")
    addr = lib.ggml_backend_reg_get_proc_address(lib.ggml_backend_dev_backend_reg(dev), b"ggml_backend_set_n_threads")
    if addr != _NULL:  # never ggml_backend_cpu_set_n_threads: it asserts on a non-CPU backend
        setter = ffi.cast("ggml_backend_set_n_threads_t", addr)
        b._thread_setter = lambda ptr, n: setter(ptr, int(n))
        b.set_n_threads(n_threads)
    return b


# -- named devices, one backend each ------------------------------------------------------------
_lock = threading.RLock()
_cache: dict[str, Backend] = {}


def _resolve(spec: str) -> str:
    """Map ggmlpy's device spellings to a ggml device name."""
    if not isinstance(spec, str):
        raise GGMLError(f"expected a device name such as 'cpu', 'gpu' or 'vulkan:0', got {spec!r}")
    s = spec.strip()
    low = s.lower()
    devs = _all_devs()
    names = [_s(lib.ggml_backend_dev_name(d)) for d in devs]
    if low == "cpu":
        return _s(lib.ggml_backend_dev_name(lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)))
    if low == "gpu":  # a hardware GPU first, a software Vulkan device last, an RPC server never
        local = [(d, n) for d, n in zip(devs, names) if not _is_rpc(d)]
        for want in (lib.GGML_BACKEND_DEVICE_TYPE_GPU, lib.GGML_BACKEND_DEVICE_TYPE_IGPU):
            for d, n in local:
                if lib.ggml_backend_dev_type(d) == want and not is_software_device(n):
                    return n
        for d, n in local:
            if is_software_device(n):
                log.info("'gpu': no hardware GPU, using the software Vulkan device %s", n)
                return n
        raise DeviceError(_unavailable("gpu", names))
    if low.startswith("rpc://"):
        return _rpc_device(s[len("rpc://"):], names)
    for kind in ("vulkan", "cuda"):
        if low == kind or low.startswith(kind + ":"):
            index = low.split(":", 1)[1].strip() if ":" in low else "0"
            if not index.isdigit():
                raise DeviceError(f"device {spec!r}: expected {kind} or {kind}:<index>, e.g. {kind}:0")
            want = f"{'Vulkan' if kind == 'vulkan' else 'CUDA'}{int(index)}"
            if want not in names:
                raise DeviceError(_unavailable(spec, names, kind))
            return want
    for d, n in zip(devs, names):  # ggml's own spelling: "Vulkan0", "CUDA0", "CPU", "RPC0"
        if n.lower() == low:
            if lib.ggml_backend_dev_type(d) == lib.GGML_BACKEND_DEVICE_TYPE_ACCEL:
                raise DeviceError(f"{n} is an accelerator that ggml pairs with the CPU device (the CPU "
                                  f"device uses it by itself), not a device to compute on: use ag_device('cpu')")
            return n
    raise DeviceError(_unavailable(spec, names))


def _unavailable(spec: str, names, kind: str | None = None) -> str:
    msg = f"device {spec!r} is not available; available devices: {', '.join(names) or 'none'}"
    built = backends()
    if kind == "vulkan" or (kind is None and spec.lower() == "gpu"):
        if "Vulkan" not in built:
            msg += ("\nThis libggml has no Vulkan backend. Build one with: "
                    "python build_ggml.py --backend vulkan --backend rpc")
        elif not software_vulkan_enabled() and not os.environ.get(_VK_ENV):
            msg += ("\nThe Vulkan backend is built but found no GPU. Software Vulkan devices (Mesa lavapipe: "
                    "apt-get install mesa-vulkan-drivers) are hidden by ggml unless GGML_VK_VISIBLE_DEVICES "
                    "lists them: start Python with GGMLPY_SOFTWARE_VULKAN=1, or call "
                    "ggmlpy.enable_software_vulkan() right after import; then use ag_device('vulkan').")
    if kind == "cuda" or (kind is None and spec.lower() == "gpu"):
        if "CUDA" not in built:
            msg += "\nThis libggml has no CUDA backend. Build one with: python build_ggml.py --backend cuda"
        else:
            msg += "\nThe CUDA backend is built but found no GPU (check nvidia-smi and the driver)."
    if kind == "rpc":
        msg += "\nThis libggml has no RPC backend. Build one with: python build_ggml.py --backend vulkan --backend rpc"
    return msg


# -- RPC ----------------------------------------------------------------------------------------
RPC_PROTO_MAJOR, RPC_PROTO_MINOR = 7, 0  # ggml 0.25.3's ggml-rpc.h
_RPC_CMD_HELLO, _RPC_CONN_CAPS_SIZE = 14, 24
_rpc_endpoints: dict[str, list[str]] = {}  # "host:port" -> its device names, once registered


_rpc_timeout_setting: list = [None]  # set_rpc_timeout's value; None: GGMLPY_RPC_TIMEOUT, else 5 s
_rpc_lost: dict[str, str] = {}  # "host:port" -> why it was lost, for good


def rpc_timeout() -> float:
    """Seconds an RPC server may take to answer before its device is given up: set_rpc_timeout(),
    else $GGMLPY_RPC_TIMEOUT, else 5."""
    if _rpc_timeout_setting[0] is not None:
        return _rpc_timeout_setting[0]
    text = os.environ.get("GGMLPY_RPC_TIMEOUT", "5")
    try:
        value = float(text)
    except ValueError:
        raise DeviceError(f"GGMLPY_RPC_TIMEOUT={text!r}: expected a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise DeviceError(f"GGMLPY_RPC_TIMEOUT={text!r}: expected a positive, finite number of seconds")
    return value


def set_rpc_timeout(seconds: float | None) -> float:
    """How long an RPC server may take to answer (each send or receive, and the connection
    check) before its device is given up and DeviceLostError raised; None: back to
    $GGMLPY_RPC_TIMEOUT, else five seconds. It applies to connections made from now on (ggml sets it on
    the socket as it connects), so set it before the first ag_device("rpc://..."). It must
    exceed the longest graph a server computes in one go: ggml waits for the result in one
    receive. Returns the previous value."""
    previous = rpc_timeout()
    if seconds is not None:
        try:
            value = float(seconds)
        except (TypeError, ValueError):
            raise DeviceError(f"set_rpc_timeout: seconds must be a number, got {seconds!r}") from None
        if not value > 0 or value == float("inf"):
            raise DeviceError(f"set_rpc_timeout: seconds must be positive and finite, got {seconds!r}")
        seconds = value
    _rpc_timeout_setting[0] = seconds
    return previous


def _rpc_proc(name: str, ctype: str):
    """A function of the patched RPC client (build_ggml.py's rpc-fail-soft), or None."""
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode()) if reg != _NULL else _NULL
    return ffi.cast(ctype, addr) if addr != _NULL else None


_rpc_fns: dict = {}


def _rpc_fn(name: str, ctype: str):
    if name not in _rpc_fns:
        _rpc_fns[name] = _rpc_proc(name, ctype)
    return _rpc_fns[name]


def rpc_fail_soft() -> bool:
    """Whether this libggml's RPC client survives a lost server (build_ggml.py's rpc-fail-soft)."""
    return _rpc_fn("ggml_backend_rpc_lost", "int (*)(const char *)") is not None


def rpc_lost(endpoint: str) -> str | None:
    """Why the RPC connection to "host:port" was lost, or None while it works."""
    why = _rpc_lost.get(endpoint)
    if why is None:
        fn = _rpc_fn("ggml_backend_rpc_lost", "int (*)(const char *)")
        code = int(fn(endpoint.encode())) if fn is not None else 0
        if code:
            why = _rpc_lost.setdefault(endpoint, (
                f"did not answer within {rpc_timeout():g} s (set_rpc_timeout, GGMLPY_RPC_TIMEOUT): frozen?"
                if code == 2 else "closed the connection or could not be reached: it died?"))
    return why


def rpc_check(endpoint: str, device: str | None = None) -> None:
    """DeviceLostError if the RPC connection to endpoint is lost."""
    why = rpc_lost(endpoint)
    if why is not None:
        name = device or f"rpc://{endpoint}"
        raise DeviceLostError(f"RPC device {name}: the server at {endpoint} {why} The device is lost for the "
                              "rest of this process (its tensors and gradients there are gone); the other "
                              "devices go on.", name, endpoint)


def check_tensor_device(t) -> None:
    """DeviceLostError if ggml tensor `t` (a cdata pointer) has its memory on a lost RPC device: call
    after reading or writing device memory outside ggmlpy's executor. Free before any RPC device."""
    if not _rpc_endpoints or t.buffer == _NULL:
        return
    dev = lib.ggml_backend_buft_get_device(lib.ggml_backend_buffer_get_type(t.buffer))
    if dev != _NULL and _is_rpc(dev):
        rpc_check(_s(lib.ggml_backend_dev_description(dev)), _s(lib.ggml_backend_dev_name(dev)))


def _set_ggml_rpc_timeout() -> None:
    fn = _rpc_fn("ggml_backend_rpc_set_timeout_ms", "void (*)(int)")
    if fn is not None:
        fn(max(1, int(round(rpc_timeout() * 1000))))


def _split_endpoint(text: str) -> tuple[str, int, int]:
    """ "host:port" or "host:port/device" -> (host, port, device index)."""
    ep, _, dev = text.strip().partition("/")
    host, sep, port = ep.rpartition(":")
    if not sep or not host or ":" in host or not port.isdigit() or not 0 < int(port) < 65536 \
            or (dev and not dev.isdigit()):
        raise DeviceError(f"rpc endpoint {text!r}: expected rpc://host:port (ggml's RPC takes IPv4 "
                          "addresses or host names, not IPv6), optionally /<device index>")
    return host, int(port), int(dev or 0)


def _recv_exact(sock, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
    return buf


def rpc_probe(host: str, port: int, timeout: float | None = None) -> tuple[int, int, int]:
    """Connect and do ggml's HELLO handshake, as ggml's client would, but with a timeout and a
    Python exception instead of abort(). Returns the server's protocol version."""
    timeout = rpc_timeout() if timeout is None else timeout
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(bytes([_RPC_CMD_HELLO]) + struct.pack("=Q", _RPC_CONN_CAPS_SIZE)
                         + bytes(_RPC_CONN_CAPS_SIZE))
            (size,) = struct.unpack("=Q", _recv_exact(sock, 8))
            if size != 4 + _RPC_CONN_CAPS_SIZE:
                raise DeviceError(f"{where} answered ggml's RPC HELLO with {size} bytes: not a ggml "
                                  f"{RPC_PROTO_MAJOR}.x RPC server")
            major, minor, patch = _recv_exact(sock, size)[:3]
    except socket.timeout:
        raise DeviceError(f"the ggml RPC server at {where} did not answer within {timeout:g} s "
                          "(GGMLPY_RPC_TIMEOUT). ggml's rpc-server serves one client at a time: is another "
                          "process connected to it? Or it is not a ggml RPC server.") from None
    except (OSError, ConnectionError) as e:
        raise DeviceError(f"could not reach a ggml RPC server at {where}: {e}. Start one with: "
                          f"python -m ggmlpy rpc-server --host {host} --port {port}") from None
    if major != RPC_PROTO_MAJOR or minor > RPC_PROTO_MINOR:
        raise DeviceError(f"the RPC server at {where} speaks protocol {major}.{minor}.{patch}; this libggml "
                          f"(ggml 0.25.3) needs {RPC_PROTO_MAJOR}.{RPC_PROTO_MINOR}.x. Start the rpc-server of "
                          "the same build: python -m ggmlpy rpc-server")
    return major, minor, patch


def _rpc_device(text: str, names) -> str:
    host, port, index = _split_endpoint(text)
    endpoint = f"{host}:{port}"
    with _registry_lock:
        devs = _rpc_endpoints.get(endpoint)
        if devs is None:
            reg = lib.ggml_backend_reg_by_name(b"RPC")
            if reg == _NULL:
                raise DeviceError(_unavailable("rpc://" + text, names, "rpc"))
            add = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
            if add == _NULL:
                raise DeviceError("this libggml's RPC backend cannot add servers")
            rpc_probe(host, port)  # a clear message now; ggml's own connect would only log one
            _set_ggml_rpc_timeout()
            sub = ffi.cast("ggml_backend_reg_t (*)(const char *)", add)(endpoint.encode())
            if sub == _NULL or lib.ggml_backend_reg_dev_count(sub) == 0:
                raise DeviceError(f"the ggml RPC server at {endpoint} reports no devices")
            lib.ggml_backend_register(sub)  # add_server does not register: without this no lookup finds it
            devs = _rpc_endpoints[endpoint] = [_s(lib.ggml_backend_dev_name(lib.ggml_backend_reg_dev_get(sub, i)))
                                               for i in range(int(lib.ggml_backend_reg_dev_count(sub)))]
            log.info("RPC server %s: devices %s", endpoint, ", ".join(devs))
    if index >= len(devs):
        raise DeviceError(f"the RPC server at {endpoint} has {len(devs)} device(s); no device {index}")
    return devs[index]  # lost or not: get_backend and new_backend say (release_device must not)


def _endpoint_of(dev) -> str | None:
    return _s(lib.ggml_backend_dev_description(dev)) if _is_rpc(dev) else None


def get_backend(spec: str = "cpu") -> Backend:
    """The shared backend for a device spelling ("cpu", "gpu", "vulkan:1", "cuda", "rpc://h:p", "Vulkan0")."""
    with _lock:
        name = _resolve(spec)
        b = _cache.get(name)
        if b is None:
            b = _cache[name] = new_backend(name)
        b.check()  # a lost RPC device: DeviceLostError at once
        return b


def new_backend(spec: str = "cpu") -> Backend:
    """A backend of one's own on a device (any spelling get_backend takes), freed with the object."""
    name = _resolve(spec)
    dev = lib.ggml_backend_dev_by_name(name.encode())
    if dev == _NULL:
        raise DeviceError(_unavailable(spec, _names()))
    endpoint = _endpoint_of(dev)
    if endpoint:  # the server may have gone since it was added
        rpc_check(endpoint, name)
        host, port, _ = _split_endpoint(endpoint)
        rpc_probe(host, port)
        _set_ggml_rpc_timeout()
    return Backend(lib.ggml_backend_dev_init(dev, _NULL), name)


def dev_props(dev) -> dict:
    """ggml_backend_dev_get_props of a device handle, as ggmlpy.ggml_backend_dev_get_props returns it."""
    props = ffi.new("struct ggml_backend_dev_props *")
    lib.ggml_backend_dev_get_props(dev, props)
    c = props.caps
    caps = {"async": bool(getattr(c, "async")),  # a keyword in Python
            "host_buffer": bool(c.host_buffer), "buffer_from_host_ptr": bool(c.buffer_from_host_ptr),
            "events": bool(c.events), "mmap_support": bool(c.mmap_support)}
    return {"name": _s(props.name), "description": _s(props.description),
            "memory_free": float(props.memory_free), "memory_total": float(props.memory_total),
            "type": int(props.type), "device_id": _s(props.device_id) or None, "caps": caps,
            **{f"caps_{k}": v for k, v in caps.items()}}


def cached_backend_names() -> list[str]:
    """The devices whose shared backend (get_backend) exists now."""
    with _lock:
        return list(_cache)


def forget_backend(name: str) -> None:
    """Drop and free the shared backend of device `name` (state.release_device uses it)."""
    with _lock:
        b = _cache.pop(name, None)
    if b is not None:
        b.free()


def rpc_server_binary():
    """ggml's rpc-server from the same build as the loaded libggml (install/bin next to install/lib)."""
    for d in ([found.bin_dir] if found.bin_dir else []) + [found.lib_dir.parent / "bin"]:
        p = d / "rpc-server"
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None
