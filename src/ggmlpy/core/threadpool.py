"""ggml's own thread pools, one per CPU backend and thread count.

build_ggml.py builds libggml without OpenMP: a CPU backend computes each graph on a
ggml_threadpool. Without one set on the backend, ggml makes a pool for every graph compute
(starting n - 1 threads) and stops it at the end; ggmlpy gives each CPU backend a pool that lasts
as long as the backend instead. No OpenMP runtime is involved, so neither the import order (torch
ships its own libgomp.so.1) nor any GOMP_* or OMP_* variable changes how ggml's threads wait.

How the threads wait: within a graph, at the barrier after every node, a thread spins 2 000 times,
then sleeps until the last one arrives (build_ggml.py's patch of ggml's barrier, which otherwise
spins for ever: a thread the scheduler took off its core then kept the others spinning for whole
time slices). After a graph, a
pool's workers poll for the next one for a while, then sleep on a condition variable until a
compute wakes them; the polling level (ggml's `poll`, 0-100, in units of 128K pause
instructions) is POLL, or $GGMLPY_THREAD_POLL. ggml's own default (50) polls for a tenth of a
second or more, which keeps a core busy between calls and slows whatever else runs there.

Invariants: a backend's pools are freed with the backend, never when the thread count changes (a
compute in another thread may still be running on the pool it was planned with), and a count used
again reuses its pool, so a backend holds at most one pool per count it was given. A forked child
has none of the parent's pool threads: every live pool set gets new pools there (the parent's are
left unfreed, since freeing joins threads that do not exist in the child). A set whose backend was
freed is not live, even while the Backend object is still referenced.
"""
from __future__ import annotations

import os
import threading
import weakref

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..errors import DeviceError, GGMLError

ENV_VAR = "GGMLPY_THREAD_POLL"
POLL = 0

# re-entrant: a collected set frees itself (and leaves _live) from __del__, which may run inside a held section
_lock = threading.RLock()
_live: "weakref.WeakSet[PoolSet]" = weakref.WeakSet()


def poll_level() -> int:
    """The polling level new pools get: $GGMLPY_THREAD_POLL (0-100), else POLL."""
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return POLL
    try:
        level = int(text)
    except ValueError:
        raise GGMLError(f"{ENV_VAR}={text!r} is not a whole number (0-100)") from None
    if not 0 <= level <= 100:
        raise GGMLError(f"{ENV_VAR}={text!r}: the polling level is 0 to 100")
    return level


def available() -> bool:
    """Whether this libggml lets ggmlpy set a CPU backend's pool (builds with loadable backends,
    --portable, keep the CPU backend's own entry points out of reach: there ggml makes a pool per
    graph compute)."""
    try:
        lib.ggml_threadpool_new  # noqa: B018
        lib.ggml_backend_cpu_set_threadpool  # noqa: B018
    except AttributeError:
        return False
    return True


def cpu_features() -> dict:
    """The CPU backend's build features (ggml_backend_get_features: "OPENMP", "AVX2", ...)."""
    reg = lib.ggml_backend_reg_by_name(b"CPU")
    addr = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features") if reg != ffi.NULL else ffi.NULL
    if addr == ffi.NULL:
        return {}
    feats, out = ffi.cast("ggml_backend_get_features_t", addr)(reg), {}
    i = 0
    while feats[i].name != ffi.NULL:
        out[ffi.string(feats[i].name).decode()] = ffi.string(feats[i].value).decode()
        i += 1
    return out


def uses_openmp() -> bool:
    """Whether this libggml's CPU backend runs its threads on OpenMP (a build made with
    -DGGML_OPENMP=ON, as build_ggml.py's were) rather than on ggml's own pool."""
    return "OPENMP" in cpu_features()


class PoolSet:
    """The pools of one CPU backend (`backend_ptr`), by thread count; `use(n)` sets that count's."""

    __slots__ = ("backend_ptr", "n", "pools", "__weakref__")

    def __init__(self, backend_ptr):
        self.backend_ptr = backend_ptr
        self.n = None
        self.pools: dict = {}
        with _lock:
            _live.add(self)

    def use(self, n: int) -> None:
        pool = self.pools.get(n)
        if pool is None:
            params = ffi.new("struct ggml_threadpool_params *", lib.ggml_threadpool_params_default(n))
            params.poll = poll_level()
            pool = lib.ggml_threadpool_new(params)
            if pool == ffi.NULL:
                raise DeviceError(f"ggml could not start a pool of {n} CPU threads")
            self.pools[n] = pool
        lib.ggml_backend_cpu_set_threadpool(self.backend_ptr, pool)
        self.n = n

    def _renew_in_child(self) -> None:
        self.pools = {}
        if self.n is not None:
            self.use(self.n)

    @uninterruptible
    def free(self) -> None:
        """Stop and free every pool (the backend computes no more: it is being freed). The set is
        then dead: a forked child must not renew it, as that would set a pool on a freed backend."""
        with _lock:
            _live.discard(self)
        pools, self.pools, self.n = self.pools, {}, None
        for pool in pools.values():
            try:
                lib.ggml_threadpool_free(pool)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __del__(self):
        self.free()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # a thread of the parent may have held it
    for pools in list(_live):
        pools._renew_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
