"""Backends on ggml's devices: CPU, Vulkan, CUDA, RPC.

`Backend` is one initialised backend (a ggml_backend_t) with its buffer type; ggmlpy keeps one
per device name (`get_backend`), so every pool and graph on a device shares it, and resolves
ggmlpy's spellings of a device ("cpu", "gpu", "vulkan:1", "rpc://host:port", "Vulkan0") to
ggml's names. What the registry holds, and what must be set before it starts: registry.py;
RPC servers' checks: rpc.py; ggml's log: ggml_log.py.
"""
from __future__ import annotations

import os
import threading

from .._sigint import uninterruptible
from ..bindings import c_str, ffi, lib
from ..errors import DeviceError, GGMLError
from . import threadpool, threads
from .checked import handle_arg
from .ggml_log import log
from .registry import VK_ENV, all_devices, backends, device_names, is_software_device, registry_lock, software_vulkan_enabled
from .rpc import is_rpc_device, rpc_check, rpc_endpoints, rpc_probe, set_ggml_rpc_timeout, split_endpoint

_NULL = ffi.NULL


class Backend:
    """An initialised ggml backend. Freed when garbage-collected or by .free()."""

    def __init__(self, ptr, label: str | None = None):
        if ptr == _NULL:
            raise DeviceError(f"could not initialise backend {label or ''}".strip())
        self.ptr = ptr
        self.dev = lib.ggml_backend_get_device(ptr)
        self.name = c_str(lib.ggml_backend_name(ptr))
        self.device_name = c_str(lib.ggml_backend_dev_name(self.dev)) if self.dev != _NULL else self.name
        self.is_cpu = self.dev != _NULL and lib.ggml_backend_dev_type(self.dev) == lib.GGML_BACKEND_DEVICE_TYPE_CPU
        self.buft = lib.ggml_backend_get_default_buffer_type(ptr)
        self.alignment = int(lib.ggml_backend_get_alignment(ptr))
        self.is_host = bool(lib.ggml_backend_buft_is_host(self.buft))
        self.n_threads = None
        self.endpoint = endpoint_of(self.dev) if self.dev != _NULL else None  # "host:port" of an RPC device
        self._free = _Freer(ptr)
        self._thread_setter = _set_n_threads if self.is_cpu else None
        self._pools = threadpool.PoolSet(ptr) if self.is_cpu and threadpool.available() else None
        self._threads_lock = threading.Lock()  # the count ggml holds and n_threads change together
        self._applied = None  # the count ggml computes with: n_threads, or fewer under load
        # True where the thread count decides a result's last bits (OpenBLAS, which ggml's BLAS
        # backend runs on n_threads, cuts a product by its threads): never fewer under load
        self.count_decides_results = False
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

    def fit_threads_to_load(self, planned: bool = False) -> int:
        """Have this backend compute from now on with as many of its n_threads as the machine's
        load leaves cores for (threads.threads_for_load), on the pool of that count; returns the
        count. Called before each graph compute; the count stays until a compute finds another
        load or the count is set (switching pools wakes the old pool's threads, so it happens
        only when the load changes). `planned`, or a backend whose results its count decides
        (count_decides_results, ggml's BLAS backend): all n_threads, whatever the load. Backends
        without a thread count: unchanged."""
        n = self.n_threads
        if self._thread_setter is None or not n:
            return n
        k = n if planned or self.count_decides_results else threads.threads_for_load(n)
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
    b.count_decides_results = True  # OpenBLAS rounds a product by its thread count
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
    devs = all_devices()
    names = [c_str(lib.ggml_backend_dev_name(d)) for d in devs]
    if low == "cpu":
        return c_str(lib.ggml_backend_dev_name(lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)))
    if low == "gpu":  # a hardware GPU first, a software Vulkan device last, an RPC server never
        local = [(d, n) for d, n in zip(devs, names) if not is_rpc_device(d)]
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
        elif not software_vulkan_enabled() and not os.environ.get(VK_ENV):
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


def _rpc_device(text: str, names) -> str:
    host, port, index = split_endpoint(text)
    endpoint = f"{host}:{port}"
    with registry_lock:
        devs = rpc_endpoints.get(endpoint)
        if devs is None:
            reg = lib.ggml_backend_reg_by_name(b"RPC")
            if reg == _NULL:
                raise DeviceError(_unavailable("rpc://" + text, names, "rpc"))
            add = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
            if add == _NULL:
                raise DeviceError("this libggml's RPC backend cannot add servers")
            rpc_probe(host, port)  # a clear message now; ggml's own connect would only log one
            set_ggml_rpc_timeout()
            sub = ffi.cast("ggml_backend_reg_t (*)(const char *)", add)(endpoint.encode())
            if sub == _NULL or lib.ggml_backend_reg_dev_count(sub) == 0:
                raise DeviceError(f"the ggml RPC server at {endpoint} reports no devices")
            lib.ggml_backend_register(sub)  # add_server does not register: without this no lookup finds it
            devs = rpc_endpoints[endpoint] = [c_str(lib.ggml_backend_dev_name(lib.ggml_backend_reg_dev_get(sub, i)))
                                               for i in range(int(lib.ggml_backend_reg_dev_count(sub)))]
            log.info("RPC server %s: devices %s", endpoint, ", ".join(devs))
    if index >= len(devs):
        raise DeviceError(f"the RPC server at {endpoint} has {len(devs)} device(s); no device {index}")
    return devs[index]  # lost or not: get_backend and new_backend say (release_device must not)


def endpoint_of(dev) -> str | None:
    return c_str(lib.ggml_backend_dev_description(dev)) if is_rpc_device(dev) else None


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
        raise DeviceError(_unavailable(spec, device_names()))
    endpoint = endpoint_of(dev)
    if endpoint:  # the server may have gone since it was added
        rpc_check(endpoint, name)
        host, port, _ = split_endpoint(endpoint)
        rpc_probe(host, port)
        set_ggml_rpc_timeout()
    return Backend(lib.ggml_backend_dev_init(dev, _NULL), name)


def dev_props(dev) -> dict:
    """ggml_backend_dev_get_props of a device handle, as ggmlpy.ggml_backend_dev_get_props returns it."""
    props = ffi.new("struct ggml_backend_dev_props *")
    lib.ggml_backend_dev_get_props(dev, props)
    c = props.caps
    caps = {"async": bool(getattr(c, "async")),  # a keyword in Python
            "host_buffer": bool(c.host_buffer), "buffer_from_host_ptr": bool(c.buffer_from_host_ptr),
            "events": bool(c.events), "mmap_support": bool(c.mmap_support)}
    return {"name": c_str(props.name), "description": c_str(props.description),
            "memory_free": float(props.memory_free), "memory_total": float(props.memory_total),
            "type": int(props.type), "device_id": c_str(props.device_id) or None, "caps": caps,
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


def backend_arg(b, what) -> Backend:
    return handle_arg(b, Backend, what, "backend")
