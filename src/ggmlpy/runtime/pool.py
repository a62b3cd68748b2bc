"""Memory pools on a device, with generation counters.

Two kinds, as in ggmlR's gpu path:

* the **pass pool** holds one tape's activations, snapshots and gradients. It
  is a bump allocator over chunks of device memory; `with_grad_tape()` resets
  it and bumps its generation (`ctx_gen`). A chunk whose tensors have all been
  dropped is recycled early, so eager use outside a tape stays flat. Each
  thread has its own (DeviceContext.pass_pool), so one thread's tape never
  resets another's tensors.
* **Held values survive a reset.** The tape is dropped first, so what is still
  alive then is held by the user (a loss kept for logging, predictions, a
  gradient map): those tensors are copied to the persistent pool, in place
  (every handle sees the move), before their memory is reused. Nothing held
  is ever invalidated; only what nothing references is reclaimed.
* the **persistent pool** holds parameters, user tensors and optimizer state.
  Each tensor gets its own buffer, freed with its last handle. Nothing resets
  it: a device or dtype switch only changes where new tensors go.

Every `Storage` records its pool's generation when it was made. Touching one
from an older generation raises StaleTensorError instead of reading memory that
now belongs to someone else (a raw header kept past a reset; checkpoint replays
check the counters themselves).

Threads. A pool's bookkeeping is guarded by its own re-entrant lock: a tensor
made in one thread may be dropped (and its memory released) in another, or by
the garbage collector in the middle of an allocation. The locks are leaves:
nothing that takes another lock runs while one is held.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref

from .._sigint import uninterruptible
from ..bindings import ffi, lib
from ..errors import StaleTensorError
from ..graph import header_context

_NULL = ffi.NULL


_ESIZE = {lib.GGML_TYPE_F32: 4, lib.GGML_TYPE_F16: 2, lib.GGML_TYPE_BF16: 2, lib.GGML_TYPE_I32: 4}


def _nbytes(ggml_type: int, ne) -> int:
    n = 1
    for d in ne:
        n *= d
    esize = _ESIZE.get(ggml_type)
    return n * esize if esize else int(lib.ggml_row_size(ggml_type, n))


def _new_header(meta_ctx, ggml_type: int, ne):
    if len(ne) == 2:
        return lib.ggml_new_tensor_2d(meta_ctx, ggml_type, ne[0], ne[1])
    return lib.ggml_new_tensor(meta_ctx, ggml_type, len(ne), ffi.new("int64_t[]", list(ne)))


def shape_of(t) -> tuple:
    """A ggml tensor's ne, without trailing 1s beyond the first two (the shape in specs)."""
    ne = [int(x) for x in t.ne]
    while len(ne) > 2 and ne[-1] == 1:
        ne.pop()
    return tuple(ne)


class Storage:
    """A tensor's memory in a pool: a ggml tensor header (`.t`) pointing into a backend buffer.

    `spec` = (ggml type, ne), `data` and `buffer` are cached on the Python side:
    the eager hot path reads them without going through the struct. A pass-pool
    tensor gets its header only when something asks for `.t`: most are only ever
    handed from one eager op to the next, which reads `data` and `buffer`."""

    __slots__ = ("_t", "pool", "gen", "chunk", "nbytes", "spec", "data", "buffer", "__weakref__")

    def __init__(self, t, pool, gen, chunk, nbytes, spec, data, buffer):
        self._t, self.pool, self.gen, self.chunk, self.nbytes = t, pool, gen, chunk, nbytes
        self.spec, self.data, self.buffer = spec, data, buffer

    @property
    def t(self):
        if self._t is None:
            self._t = self.chunk.header(self)
        return self._t

    @property
    def type(self) -> int:
        """The ggml type, read without making a header."""
        return self.spec[0]

    def check(self) -> None:
        if self.gen != self.pool.gen:
            raise StaleTensorError(
                f"stale tensor: it was made in {self.pool.kind} pool generation {self.gen}, "
                f"and that pool has been reset since (now generation {self.pool.gen}"
                f"{'; with_grad_tape() resets the pass pool' if self.pool.kind == 'pass' else ''}). "
                "Its memory has been reused.")

    @property
    def ptr(self):
        """The ggml tensor, after the generation check."""
        if self.gen != self.pool.gen:
            self.check()
        return self.t

    @property
    def alive(self) -> bool:
        return self.gen == self.pool.gen

    @uninterruptible
    def alias(self) -> "Storage":
        """A second Storage on the same memory: a reset then moves each on its own (a leaf's
        `.grad` and backward()'s result start on the same memory, and must part later)."""
        chunk = self.chunk  # a pass-pool chunk: persistent tensors are never aliased (_Owned.adopt)
        chunk.adopt(self.gen)
        s = Storage(self._t, self.pool, self.gen, chunk, self.nbytes, self.spec, self.data, self.buffer)
        chunk.refs.append(weakref.ref(s))
        return s

    @uninterruptible
    def reshaped(self, shape) -> "Storage | None":
        """A Storage on the same memory with another shape (a zero-copy reshape of a pass-pool
        tensor), or None where the chunk has no room left for one more header."""
        chunk = self.chunk
        with self.pool.lock:
            if self.gen != chunk.gen or chunk.count >= chunk.capacity:
                return None
            chunk.count += 1  # the new header's room in chunk.meta
            chunk.live += 1
        s = Storage(None, self.pool, self.gen, chunk, self.nbytes, (self.spec[0], tuple(shape)), self.data, self.buffer)
        chunk.refs.append(weakref.ref(s))
        return s

    @uninterruptible
    def _become(self, other: "Storage") -> None:
        """Take over `other`'s memory (other is then forgotten without releasing it)."""
        self._t, self.pool, self.gen, self.chunk = other._t, other.pool, other.gen, other.chunk
        self.data, self.buffer = other.data, other.buffer
        other.chunk = None

    @uninterruptible
    def __del__(self, _finalizing=sys.is_finalizing):
        chunk = self.chunk
        # at interpreter exit the process returns the memory, and the module's globals (which the
        # release reads) may already be gone
        if chunk is not None and not _finalizing():
            chunk.release(self.gen)


class _Chunk:
    """One backend buffer with its own metadata context, bump-allocated."""

    __slots__ = ("pool", "buffer", "base", "size", "offset", "meta", "capacity", "count", "live",
                 "gen", "dedicated", "headers", "refs")

    @uninterruptible
    def __init__(self, pool, size: int, capacity: int, dedicated: bool):
        self.pool, self.size, self.capacity, self.dedicated = pool, size, capacity, dedicated
        self.buffer = lib.ggml_backend_buft_alloc_buffer(pool.backend.buft, size)
        if self.buffer == _NULL:
            pool.backend.check()  # a lost RPC server allocates nothing: say so, not "out of memory"
            raise MemoryError(f"could not allocate {size} bytes on {pool.backend.device_name}")
        self.base = ffi.cast("char *", lib.ggml_backend_buffer_get_base(self.buffer))
        self.meta = header_context(capacity)
        self.offset = self.count = self.live = self.headers = 0
        self.gen = pool.gen
        self.refs: list = []  # weak references to the chunk's Storages: a reset moves the live ones

    def fits(self, nbytes: int) -> bool:
        return self.offset + nbytes <= self.size and self.count < self.capacity

    @uninterruptible
    def take(self, ggml_type: int, ne, nbytes: int, padded: int, gen: int) -> Storage:
        addr = self.base + self.offset
        self.offset += padded
        self.count += 1  # a header's room in `meta` is kept for it
        self.live += 1
        s = Storage(None, self.pool, gen, self, nbytes, (ggml_type, tuple(ne)), addr, self.buffer)
        self.refs.append(weakref.ref(s))
        return s

    @uninterruptible
    def adopt(self, gen: int) -> None:
        """One more Storage on memory already taken (Storage.alias)."""
        with self.pool.lock:
            if gen == self.gen:
                self.live += 1

    @uninterruptible
    def header(self, s: Storage):
        """The ggml tensor header of `s`, made on first use (Storage.t)."""
        if s.gen != self.gen:
            s.check()  # raises StaleTensorError: `meta` has been reset since
        t = _new_header(self.meta, *s.spec)
        self.headers += 1
        if self.pool.host:  # host buffers have nothing to initialise: set the fields directly
            t.buffer = self.buffer
            t.data = s.data
        else:
            lib.ggml_backend_tensor_alloc(self.buffer, t, s.data)
        return t

    @uninterruptible
    def rewind(self) -> None:
        if self.headers and self.buffer is not None:  # most chunks never made one (Storage.t)
            lib.ggml_reset(self.meta)
        self.offset = self.count = self.live = self.headers = 0
        self.gen = self.pool.gen
        self.refs = []

    def live_storages(self) -> list:
        return [s for s in (r() for r in self.refs) if s is not None and s.chunk is self and s.gen == self.gen]

    @uninterruptible
    def release(self, gen: int) -> None:
        with self.pool.lock:
            if gen != self.gen or self.buffer is None:
                return  # rewound by a reset since, or freed (at interpreter exit, in any order)
            self.live -= 1
            if self.live == 0:
                self.pool._chunk_empty(self)

    @uninterruptible
    def free(self) -> None:
        if self.buffer is not None:
            lib.ggml_backend_buffer_free(self.buffer)
            lib.ggml_free(self.meta)
            self.buffer = self.meta = None

    # A thread's pool goes with its thread, and chunks its tensors kept go with them. The pool
    # and its chunks form reference cycles, which the collector may finalize in any order: a
    # freed chunk ignores later releases and rewinds (see release, rewind).
    __del__ = free


class PassPool:
    """Bump allocation over recycled chunks; reset() bumps the generation (ctx_gen)."""

    kind = "pass"

    # Small chunks, and a chunk of its own for any tensor of 1/8 chunk or more: memory comes
    # back as soon as its tensors die (a checkpoint's replayed activations, say), not only
    # at the next reset. Every bookkeeping step is O(1): this runs on every eager op.
    def __init__(self, backend, chunk_bytes: int = 2 << 20, chunk_tensors: int = 512, keep=None):
        self.backend = backend
        self.lock = threading.RLock()
        # keep(storage): moves a tensor still held at a reset out of this pool (DeviceContext
        # copies it to the persistent pool); None: a reset makes held tensors stale
        self.keep = keep
        self.host = backend.is_host
        self.align = max(64, backend.alignment)
        self.chunk_bytes, self.chunk_tensors = chunk_bytes, chunk_tensors
        self.gen = 1
        self.current: _Chunk | None = None
        self.full: set = set()
        self.spare_shared: list = []
        self.spare_dedicated: dict = {}  # exact size -> chunks
        self.in_use = self.spare_bytes = self.peak_bytes = 0

    @uninterruptible
    def alloc(self, ggml_type: int, ne) -> Storage:
        nbytes = _nbytes(ggml_type, ne)
        padded = max(self.align, -(-nbytes // self.align) * self.align)
        with self.lock:
            c = self.current
            if padded >= self.chunk_bytes // 8:
                c = self._dedicated(padded)
            elif c is None or not c.fits(padded):
                c = self._next_shared()
            self.in_use += padded
            if self.in_use > self.peak_bytes:
                self.peak_bytes = self.in_use
            return c.take(ggml_type, ne, nbytes, padded, self.gen)

    @uninterruptible
    def _dedicated(self, padded: int) -> _Chunk:
        pool = self.spare_dedicated.get(padded)
        if pool:
            c = pool.pop()
            self.spare_bytes -= c.size
            c.gen = self.gen
        else:
            c = _Chunk(self, padded, 4, dedicated=True)  # one tensor, and room for headers of reshapes of it
        self.full.add(c)
        return c

    @uninterruptible
    def _next_shared(self) -> _Chunk:
        if self.current is not None:
            self.full.add(self.current)
        if self.spare_shared:
            c = self.spare_shared.pop()
            self.spare_bytes -= c.size
            c.gen = self.gen
        else:
            c = _Chunk(self, self.chunk_bytes, self.chunk_tensors, dedicated=False)
        self.current = c
        return c

    @uninterruptible
    def _chunk_empty(self, c: _Chunk) -> None:
        """Every tensor of `c` has been dropped: its memory can be reused now."""
        self.in_use -= c.offset
        c.rewind()
        if c is self.current:
            return
        self.full.discard(c)
        self._to_spare(c)
        if self.spare_bytes > self.peak_bytes:
            self._trim()

    @uninterruptible
    def _to_spare(self, c: _Chunk) -> None:
        if c.dedicated:
            self.spare_dedicated.setdefault(c.size, []).append(c)
        else:
            self.spare_shared.append(c)
        self.spare_bytes += c.size

    @uninterruptible
    def _trim(self) -> None:
        """Keep spare memory up to the most ever in use at once; free the rest, biggest first."""
        chunks = self.spare_shared + [c for cs in self.spare_dedicated.values() for c in cs]
        for c in sorted(chunks, key=lambda c: -c.size):
            if self.spare_bytes <= self.peak_bytes:
                break
            (self.spare_dedicated[c.size] if c.dedicated else self.spare_shared).remove(c)
            self.spare_bytes -= c.size
            c.free()

    def held(self) -> list:
        """The Storages of this generation that something still references."""
        with self.lock:
            chunks = list(self.full) + ([self.current] if self.current is not None else [])
            return [s for c in chunks if c.live for s in c.live_storages()]

    @uninterruptible
    def reset(self) -> None:
        """Move the tensors still held out (`keep`), then forget this generation's memory and
        bump the generation counter. Drop the tape before: its snapshots are not "held"."""
        if self.keep is not None:
            for s in self.held():
                self.keep(s)
        with self.lock:
            self.gen += 1
            chunks = list(self.full) + ([self.current] if self.current is not None else [])
            self.full, self.current = set(), None
            for c in chunks:
                c.rewind()
                self._to_spare(c)
            self.in_use = 0
            if self.spare_bytes > self.peak_bytes:
                self._trim()

    def bytes_in_use(self) -> int:
        return self.in_use

    def reset_peak(self) -> int:
        """Start a new peak measurement; returns the previous peak."""
        prev, self.peak_bytes = self.peak_bytes, self.in_use
        return prev

    def bytes_reserved(self) -> int:
        return self.in_use + self.spare_bytes  # approximately: shared chunks' unused tails not counted

    @uninterruptible
    def free_spare(self) -> None:
        """Free the chunks no tensor uses (those in use go with their last tensor)."""
        with self.lock:
            for c in self.spare_shared + [c for cs in self.spare_dedicated.values() for c in cs]:
                c.free()
            self.spare_shared, self.spare_dedicated, self.spare_bytes = [], {}, 0


class _Owned:
    """The buffer, metadata context and tensor header behind one persistent tensor."""

    __slots__ = ("buffer", "meta", "t", "pool")

    def __init__(self, pool, buffer, meta, t):
        self.pool, self.buffer, self.meta, self.t = pool, buffer, meta, t

    @uninterruptible
    def release(self, gen: int) -> None:
        if self.buffer is not None:
            self.pool._recycle(self)
            self.buffer = None

    @uninterruptible
    def adopt(self, gen: int) -> None:
        raise AssertionError("persistent tensors are never aliased")

    @uninterruptible
    def free(self) -> None:
        lib.ggml_backend_buffer_free(self.buffer)
        lib.ggml_free(self.meta)


class PersistentPool:
    """One buffer per tensor, freed (or kept as a spare) with its last handle.

    A buffer whose last handle is gone is kept for the next tensor of the same type and
    shape (up to SPARE_BYTES in all): a training loop that drops its `.grad` tensors every
    step (zero_grad) would otherwise allocate and page in fresh buffers every step."""

    kind = "persistent"
    SPARE_BYTES = int(os.environ.get("GGMLPY_SPARE_BYTES", 64 << 20))  # ggmlpy.set_cache_limits

    def __init__(self, backend):
        self.backend = backend
        self.lock = threading.RLock()
        self.gen = 1
        self.live_bytes = 0
        self.spare: dict = {}  # spec -> [_Owned]
        self.spare_bytes = 0

    @uninterruptible
    def alloc(self, ggml_type: int, ne) -> Storage:
        nbytes = _nbytes(ggml_type, ne)
        spec = (ggml_type, tuple(ne))
        with self.lock:
            spares = self.spare.get(spec)
            if spares:
                owned = spares.pop()
                self.spare_bytes -= nbytes
                t = owned.t
                return Storage(t, self, self.gen, owned, nbytes, spec, t.data, owned.buffer)
        meta = header_context(1)
        t = _new_header(meta, ggml_type, ne)
        buffer = lib.ggml_backend_buft_alloc_buffer(self.backend.buft, max(nbytes, 1))
        if buffer == _NULL:
            lib.ggml_free(meta)
            self.backend.check()  # a lost RPC server allocates nothing: say so, not "out of memory"
            raise MemoryError(f"could not allocate {nbytes} bytes on {self.backend.device_name}")
        base = lib.ggml_backend_buffer_get_base(buffer)
        lib.ggml_backend_tensor_alloc(buffer, t, base)
        return Storage(t, self, self.gen, _Owned(self, buffer, meta, t), nbytes, spec, t.data, buffer)

    @uninterruptible
    def _recycle(self, owned: _Owned) -> None:
        t = owned.t
        spec = (int(t.type), shape_of(t))
        nbytes = _nbytes(*spec)
        with self.lock:
            if self.spare_bytes + nbytes > self.SPARE_BYTES:  # (nothing resets this pool: no stale buffers)
                owned.free()
                return
            kept = _Owned(self, owned.buffer, owned.meta, t)  # the old one is marked released
            self.spare.setdefault(spec, []).append(kept)
            self.spare_bytes += nbytes

    @uninterruptible
    def free_spare(self) -> None:
        with self.lock:
            for owned in (o for lst in self.spare.values() for o in lst):
                owned.free()
            self.spare, self.spare_bytes = {}, 0
