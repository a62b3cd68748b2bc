"""The selected device and dtype, and the pools and graph cache that belong to them.

ggmlR keeps these in `.ag_device_state`: `ctx_gen` counts resets of the pass
pool, `p_ctx_gen` resets of the persistent pool. `ag_device()` and `ag_dtype()`
switch them; switching resets the persistent pool (its tensors become stale).
"""
from __future__ import annotations

import threading
import warnings

from ..bindings import ffi, lib
from ..errors import GGMLError
from .device import Backend, _resolve, blas_backend, forget_backend, get_backend
from .executor import Executor
from .pool import PassPool, PersistentPool

DTYPES = {"f32": lib.GGML_TYPE_F32, "f16": lib.GGML_TYPE_F16, "bf16": lib.GGML_TYPE_BF16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class DeviceContext:
    """Everything ggmlpy keeps per device: backend, both pools, and the compiled-op cache."""

    def __init__(self, spec: str):
        self.spec = spec
        self.backend: Backend = get_backend(spec)
        self.name = self.backend.device_name
        self.pass_pool = PassPool(self.backend)
        self.persistent = PersistentPool(self.backend)
        self.blas = blas_backend(self.backend.n_threads) if self.backend.is_cpu else None
        # CUDA queues ops on its stream: measured on an H200, a 4-layer 256-wide Adam step took
        # 2.7 ms waiting for each op, 2.1 ms queued. Host transfers call sync() first. Vulkan
        # stays synchronous: queued that way, ggml's Vulkan backend crashed on lavapipe.
        self.executor = Executor(self.backend, small_backend=self._single_threaded(), blas=self.blas,
                                 asynchronous=self.name.startswith("CUDA"))

    def sync(self) -> None:
        """Wait for this device's queued ops: before the host reads or writes device memory."""
        self.executor.sync()

    def _single_threaded(self):
        """A second CPU backend with one thread, for graphs too small to share."""
        if not self.backend.is_cpu:
            return None
        return Backend(lib.ggml_backend_dev_init(self.backend.dev, ffi.NULL), self.name).single_threaded()

    def __repr__(self):
        return f"<device {self.name}>"


class _State:
    def __init__(self):
        self.lock = threading.RLock()
        self.contexts: dict[str, DeviceContext] = {}
        self.current: DeviceContext | None = None
        self.dtype = lib.GGML_TYPE_F32
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


def ag_device(spec: str | None = None) -> str:
    """Select the device for new tensors and ops: "cpu", "gpu" (best available), "vulkan",
    "vulkan:1", "cuda", "cuda:0", "rpc://host:port". Returns the device name in use.

    Changing device resets the persistent pool (p_ctx_gen), as ggmlR does."""
    if spec is None:
        return STATE.context().name
    with STATE.lock:
        dc = STATE._get(spec)
        if STATE.current is not dc:
            if STATE.current is not None:
                STATE.current.persistent.reset()
            STATE.current = dc
            _check_dtype(dc, STATE.dtype)
        return dc.name


def release_device(spec: str) -> None:
    """Free what ggmlpy holds on a device: its cached op graphs, pass pool and shared backend
    (an RPC connection closes once nothing uses it). Selected, it hands over to "cpu" first.
    Tensors still alive on it keep their own buffers until they are dropped; drop them first
    (the gradient tape keeps the last tape's tensors: an empty ``with with_grad_tape(): pass``
    clears it), above all before stopping an RPC server: ggml aborts the process when a
    buffer's server is gone."""
    with STATE.lock:
        name = _resolve(spec)  # no new connection: the server may be gone already
        dc = STATE.contexts.pop(name, None)
        if dc is None:
            return
        if STATE.current is dc:
            STATE.current = None
            ag_device("cpu")
        dc.persistent.reset()
        dc.executor.clear()
        dc.pass_pool.free()
        forget_backend(name)


def ag_default_device() -> str:
    """The name of the device new ag tensors and ops use now."""
    return STATE.context().name


def ag_dtype(dtype: str | None = None) -> str:
    """Select the storage dtype of new tensors: "f32" (default), "f16" or "bf16".
    Ops compute in f32. Changing it resets the persistent pool (p_ctx_gen)."""
    if dtype is None:
        return DTYPE_NAMES[STATE.dtype]
    if dtype not in DTYPES:
        raise GGMLError(f"ag_dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    with STATE.lock:
        want = _check_dtype(STATE.context(), DTYPES[dtype])
        if want != STATE.dtype:
            STATE.context().persistent.reset()
            STATE.dtype = want
        return DTYPE_NAMES[STATE.dtype]


def _check_dtype(dc: DeviceContext, t: int) -> int:
    """Vulkan has no bf16 kernels for most ops: fall back to f16, warning once (as ggmlR does)."""
    if t == lib.GGML_TYPE_BF16 and dc.name.startswith("Vulkan"):
        if not STATE._warned_bf16:
            warnings.warn("bf16 is not supported on Vulkan; using f16 instead", stacklevel=3)
            STATE._warned_bf16 = True
        STATE.dtype = lib.GGML_TYPE_F16
        return lib.GGML_TYPE_F16
    return t
