"""The selected device and dtype, and the pools and graph cache that belong to them.

ggmlR keeps these in `.ag_device_state`: `ctx_gen` counts resets of the pass
pool, `p_ctx_gen` resets of the persistent pool. `ag_device()` and `ag_dtype()`
switch the defaults for new tensors; tensors already made keep their device,
dtype and values (ggmlR invalidates them; a value the user holds must keep it).

Threads (PyTorch's contract): the selected device and dtype are process-wide;
each thread has its own pass pool (so its own tape's resets) and, on the CPU,
its own executor with its own ggml CPU backends, so independent eager work in
several threads runs in parallel. Other devices have one executor, and every
graph compute on a device (eager ops there, compiled steps everywhere) holds
the device's lock: ggml backends keep per-backend scratch state.
"""
from __future__ import annotations

import threading
import warnings
import weakref

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..errors import DeviceError, GGMLError
from ..core.device import Backend, _resolve, blas_backend, forget_backend, get_backend
from ..core.registry import devices
from . import executor as ex_mod
from .executor import Executor
from .pool import PassPool, PersistentPool

DTYPES = {"f32": lib.GGML_TYPE_F32, "f16": lib.GGML_TYPE_F16, "bf16": lib.GGML_TYPE_BF16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class _Lease:
    """A thread's own pass pool or executor. A thread's locals are dropped when it ends: the
    lease then hands its item back, and the next new thread starts with its warm caches (a
    thread per task would otherwise recompile every op graph)."""

    __slots__ = ("item", "free")

    def __init__(self, item, free: list):
        self.item, self.free = item, free

    @uninterruptible
    def __del__(self):
        self.free.append(self.item)


def lease(local, name: str, free: list, make):
    """`local.<name>`, taken from `free` (or made) on a thread's first use, handed back at its end."""
    try:
        item = free.pop()
    except IndexError:
        item = make()
    setattr(local, name + "_lease", _Lease(item, free))
    setattr(local, name, item)
    return item


class DeviceContext:
    """Everything ggmlpy keeps per device: backend, both pools, and the compiled-op cache."""

    def __init__(self, spec: str):
        self.spec = spec
        self.backend: Backend = get_backend(spec)
        self.name = self.backend.device_name
        self.persistent = PersistentPool(self.backend)
        self.lock = threading.RLock()  # held by every graph compute on a shared backend
        self.released = False
        self._local = threading.local()  # per thread: pass pool; on the CPU, executor
        self._free_pools: list = []  # of threads that have ended (see _Lease)
        self._pools = weakref.WeakSet()  # every thread's, for release_device
        self._free_executors: list = []
        self.blas = blas_backend() if self.backend.is_cpu else None
        # CUDA queues ops on its stream: not waiting for each op is faster (docs/benchmarks.md).
        # Host transfers call sync() first. Vulkan
        # stays synchronous: queued that way, ggml's Vulkan backend crashed on lavapipe.
        self._shared_executor = None if self.backend.is_cpu else Executor(
            self.backend, asynchronous=self.name.startswith("CUDA"), lock=self.lock)

    @property
    def pass_pool(self) -> PassPool:
        """This thread's pass pool on the device."""
        try:
            return self._local.pass_pool
        except AttributeError:
            return lease(self._local, "pass_pool", self._free_pools, self._new_pass_pool)

    def _new_pass_pool(self) -> PassPool:
        pool = PassPool(self.backend, keep=self._keep)
        self._pools.add(pool)
        return pool

    @property
    def executor(self) -> Executor:
        """The compiled-op cache this thread runs eager ops through."""
        if self.released:
            self.check_usable()
        ex = self._shared_executor
        if ex is not None:
            return ex
        try:
            return self._local.executor
        except AttributeError:
            return lease(self._local, "executor", self._free_executors, self._cpu_executor)

    def _cpu_executor(self) -> Executor:
        """CPU backends of this thread's own: ggml's CPU backend keeps its work buffer per backend.
        The main one and its BLAS helper follow the thread setting; the small one has one thread."""
        main = Backend(lib.ggml_backend_dev_init(self.backend.dev, ffi.NULL), self.name)
        small = Backend(lib.ggml_backend_dev_init(self.backend.dev, ffi.NULL), self.name).single_threaded()
        return Executor(main, small_backend=small, blas=blas_backend() if self.blas is not None else None)

    def single_thread_backend(self) -> Backend:
        """A one-thread CPU backend of this device, for compiled graphs' nodes that run best on one
        thread (made once; compiled graphs compute under the device lock)."""
        b = getattr(self, "_single", None)
        if b is None:
            b = self._single = Backend(lib.ggml_backend_dev_init(self.backend.dev, ffi.NULL), self.name).single_threaded()
        return b

    def check_usable(self) -> None:
        if self.released:
            raise DeviceError(f"device {self.name} was released (release_device): its tensors can still be "
                              "read, or moved with ag_to_device(), but nothing computes there any more")

    def _keep(self, s) -> None:
        """A pass-pool tensor still held at a reset: copy it to the persistent pool, in place."""
        new = self.persistent.alloc(*s.spec)
        self.sync()
        if self.backend.is_host:
            ffi.memmove(new.data, s.data, s.nbytes)
        else:
            lib.ggml_backend_tensor_copy(s.t, new.t)
        s._become(new)

    def sync(self) -> None:
        """Wait for this device's queued ops: before the host reads or writes device memory."""
        ex = self._shared_executor or getattr(self._local, "executor", None)
        if ex is not None:
            ex.sync()

    def __repr__(self):
        return f"<device {self.name}>"


class _State:
    def __init__(self):
        self.lock = threading.RLock()
        self.contexts: dict[str, DeviceContext] = {}
        self.current: DeviceContext | None = None
        self.dtype = lib.GGML_TYPE_F32
        self.label: str | None = None  # the device setting as given to ag_device() (ggmlR's "cpu"/"gpu")
        self._warned_bf16 = False

    def context(self, spec: str | None = None) -> DeviceContext:
        """The DeviceContext for `spec` (default: the selected device), created on first use."""
        with self.lock:
            if spec is None:
                if self.current is None:
                    self.current = self._get("cpu")
                return self.current
            return self._get(spec)

    def _get(self, spec: str) -> DeviceContext:
        backend = get_backend(spec)
        dc = self.contexts.get(backend.device_name)
        if dc is None:
            dc = self.contexts[backend.device_name] = DeviceContext(spec)
        return dc

    # -- generation counters, as ggmlR names them ------------------------------------------------
    @property
    def ctx_gen(self) -> int:
        return self.context().pass_pool.gen

    @property
    def p_ctx_gen(self) -> int:
        return self.context().persistent.gen


STATE = _State()


def _has_gpu() -> bool:
    return any(d.type in ("gpu", "igpu") and d.backend in ("Vulkan", "CUDA") for d in devices())


def ag_device(spec: str | None = None) -> str:
    """Select the device for new tensors and ops: "cpu", "gpu" (best available), "vulkan",
    "vulkan:1", "cuda", "cuda:0", "rpc://host:port". Returns the *previous* setting, as ggmlR
    does (so `prev = ag_device("gpu"); ...; ag_device(prev)` restores it); with no argument,
    the current one (ag_default_device()).

    "gpu" with no GPU falls back to the CPU with a warning, as ggmlR's does (its
    ggml_backend_init_best() returns the CPU backend). Tensors already made stay where they
    are, with their values (ggmlR makes them stale); an op mixing devices raises, and
    ag_to_device() moves a tensor."""
    if spec is None:
        return ag_default_device()
    if not isinstance(spec, str):
        raise GGMLError(f"ag_device: expected a device name such as 'cpu' or 'vulkan', got {spec!r}")
    with STATE.lock:
        previous = ag_default_device()
        target = spec
        if spec.strip().lower() == "gpu" and not _has_gpu():
            warnings.warn("ag_device('gpu'): no GPU here; computing on the CPU", RuntimeWarning, stacklevel=2)
            target = "cpu"
        dc = STATE._get(target)
        if STATE.current is not dc:
            if STATE.current is not None:
                STATE.current.persistent.free_spare()
            STATE.current = dc
            _check_dtype(dc, STATE.dtype)
        STATE.label = spec
        return previous


def ag_device_name() -> str:
    """The ggml name of the device new tensors and ops use now ("CPU", "Vulkan0", "CUDA0", ...)."""
    return STATE.context().name


def release_device(spec: str) -> None:
    """Free what ggmlpy holds on a device: its cached op graphs, pass pools and shared backend
    (an RPC connection closes once nothing uses it). Selected, it hands over to "cpu" first.
    Tensors still alive on it keep their memory and can be read, but any op on them raises
    DeviceError: move them first (ag_to_device). Drop them before stopping an RPC server:
    ggml aborts the process when a buffer's server is gone."""
    if not isinstance(spec, str):
        raise GGMLError(f"release_device: expected a device name, got {spec!r}")
    with STATE.lock:
        name = _resolve(spec)  # no new connection: the server may be gone already
        dc = STATE.contexts.pop(name, None)
        if dc is None:
            return
        with dc.lock:
            dc.released = True
            if STATE.current is dc:
                STATE.current = None
                ag_device("cpu")
            dc.persistent.free_spare()
            for pool in list(dc._pools):
                pool.free_spare()
            if dc._shared_executor is not None:
                dc._shared_executor.clear()
            forget_backend(name)


def set_cache_limits(graph_cache_bytes: int | None = None, spare_bytes: int | None = None) -> dict:
    """Bound the memory ggmlpy keeps to go faster; returns the limits in force before.

    graph_cache_bytes: compiled op graphs, per executor (each thread on the CPU has one); the
      least recently used are freed beyond it. Default 32 MiB (GGMLPY_GRAPH_CACHE_BYTES).
    spare_bytes: freed persistent buffers kept for reuse by a tensor of the same type and shape
      (a training loop's gradients), per device. Default 64 MiB (GGMLPY_SPARE_BYTES).
    Lowering a limit frees what is above it at the next allocation."""
    before = {"graph_cache_bytes": ex_mod.GRAPH_CACHE_BYTES, "spare_bytes": PersistentPool.SPARE_BYTES}
    for name, value in (("graph_cache_bytes", graph_cache_bytes), ("spare_bytes", spare_bytes)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise GGMLError(f"set_cache_limits: {name} must be a non-negative int, got {value!r}")
    if graph_cache_bytes is not None:
        ex_mod.GRAPH_CACHE_BYTES = graph_cache_bytes
    if spare_bytes is not None:
        PersistentPool.SPARE_BYTES = spare_bytes
        for dc in list(STATE.contexts.values()):
            dc.persistent.free_spare()
    return before


def ag_default_device() -> str:
    """The device setting, as it was given to ag_device(): "cpu" (the default), "gpu", "vulkan:1", ...
    (ag_device_name() gives the ggml device it resolved to)."""
    with STATE.lock:
        if STATE.current is None or STATE.label is None:
            return "cpu" if STATE.context().backend.is_cpu else STATE.context().name
        return STATE.label


def ag_default_dtype() -> str:
    """The storage dtype new tensors get now: "f32" (the default), "f16" or "bf16"."""
    return DTYPE_NAMES[STATE.dtype]


def ag_dtype(dtype: str | None = None) -> str:
    """Select the storage dtype of new tensors: "f32" (default), "f16" or "bf16". Returns the
    *previous* setting, as ggmlR does; with no argument, the current one (ag_default_dtype()).
    Ops compute in f32. Tensors already made keep their dtype and values."""
    if dtype is None:
        return ag_default_dtype()
    if dtype not in DTYPES:
        raise GGMLError(f"ag_dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    with STATE.lock:
        previous = DTYPE_NAMES[STATE.dtype]
        want = _check_dtype(STATE.context(), DTYPES[dtype])
        if want != STATE.dtype:
            STATE.context().persistent.free_spare()
            STATE.dtype = want
        return previous


def _check_dtype(dc: DeviceContext, t: int) -> int:
    """Vulkan has no bf16 kernels for most ops: fall back to f16, warning once (as ggmlR does)."""
    if t == lib.GGML_TYPE_BF16 and dc.name.startswith("Vulkan"):
        if not STATE._warned_bf16:
            warnings.warn("bf16 is not supported on Vulkan; using f16 instead", stacklevel=3)
            STATE._warned_bf16 = True
        STATE.dtype = lib.GGML_TYPE_F16
        return lib.GGML_TYPE_F16
    return t
