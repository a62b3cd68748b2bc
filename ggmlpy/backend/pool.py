"""Memory pools on a device, with generation counters.

Two kinds, as in ggmlR's gpu path:

* the **pass pool** holds one tape's activations, snapshots and gradients. It
  is a bump allocator over chunks of device memory; `with_grad_tape()` resets
  it in O(1) and bumps its generation (`ctx_gen`). A chunk whose tensors have
  all been dropped is recycled early, so eager use outside a tape stays flat.
* the **persistent pool** holds parameters, user tensors and optimizer state.
  Each tensor gets its own buffer, freed with its last handle. A device or
  dtype change resets it and bumps `p_ctx_gen`.

Every `Storage` records its pool's generation when it was made. Touching one
from an older generation raises StaleTensorError instead of reading memory that
now belongs to someone else.
"""
from __future__ import annotations

from ..bindings import ffi, lib
from ..errors import StaleTensorError

_NULL = ffi.NULL
_OVERHEAD = int(lib.ggml_tensor_overhead())


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


def _meta_context(n_tensors: int):
    params = ffi.new("struct ggml_init_params *", {"mem_size": n_tensors * _OVERHEAD + 256,
                                                   "mem_buffer": _NULL, "no_alloc": True})
    ctx = lib.ggml_init(params[0])
    if ctx == _NULL:
        raise MemoryError("ggml_init failed for tensor metadata")
    return ctx


class Storage:
    """A tensor's memory in a pool: a ggml tensor header (`.t`) pointing into a backend buffer.

    `spec` = (ggml type, ne), `data` and `buffer` are cached on the Python side:
    the eager hot path reads them without going through the struct."""

    __slots__ = ("t", "pool", "gen", "chunk", "nbytes", "spec", "data", "buffer", "__weakref__")

    def __init__(self, t, pool, gen, chunk, nbytes, spec, data, buffer):
        self.t, self.pool, self.gen, self.chunk, self.nbytes = t, pool, gen, chunk, nbytes
        self.spec, self.data, self.buffer = spec, data, buffer

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

    def __del__(self):
        chunk = self.chunk
        if chunk is not None:
            chunk.release(self.gen)


class _Chunk:
    """One backend buffer with its own metadata context, bump-allocated."""

    __slots__ = ("pool", "buffer", "base", "size", "offset", "meta", "capacity", "count", "live",
                 "gen", "dedicated")

    def __init__(self, pool, size: int, capacity: int, dedicated: bool):
        self.pool, self.size, self.capacity, self.dedicated = pool, size, capacity, dedicated
        self.buffer = lib.ggml_backend_buft_alloc_buffer(pool.backend.buft, size)
        if self.buffer == _NULL:
            raise MemoryError(f"could not allocate {size} bytes on {pool.backend.device_name}")
        self.base = ffi.cast("char *", lib.ggml_backend_buffer_get_base(self.buffer))
        self.meta = _meta_context(capacity)
        self.offset = self.count = self.live = 0
        self.gen = pool.gen

    def fits(self, nbytes: int) -> bool:
        return self.offset + nbytes <= self.size and self.count < self.capacity

    def take(self, ggml_type: int, ne, nbytes: int, padded: int, gen: int) -> Storage:
        t = _new_header(self.meta, ggml_type, ne)
        addr = self.base + self.offset
        if self.pool.host:  # host buffers have nothing to initialise: set the fields directly
            t.buffer = self.buffer
            t.data = addr
        else:
            lib.ggml_backend_tensor_alloc(self.buffer, t, addr)
        self.offset += padded
        self.count += 1
        self.live += 1
        return Storage(t, self.pool, gen, self, nbytes, (ggml_type, tuple(ne)), t.data, self.buffer)

    def rewind(self) -> None:
        lib.ggml_reset(self.meta)
        self.offset = self.count = self.live = 0
        self.gen = self.pool.gen

    def release(self, gen: int) -> None:
        if gen != self.gen:
            return  # the chunk was already rewound by a reset
        self.live -= 1
        if self.live == 0:
            self.pool._chunk_empty(self)

    def free(self) -> None:
        if self.buffer is not None:
            lib.ggml_backend_buffer_free(self.buffer)
            lib.ggml_free(self.meta)
            self.buffer = None


class PassPool:
    """Bump allocation over recycled chunks; reset() is O(1) and bumps the generation (ctx_gen)."""

    kind = "pass"

    def __init__(self, backend, chunk_bytes: int = 32 << 20, chunk_tensors: int = 2048):
        self.backend = backend
        self.host = backend.is_host
        self.align = max(64, backend.alignment)
        self.chunk_bytes, self.chunk_tensors = chunk_bytes, chunk_tensors
        self.gen = 1
        self.current: _Chunk | None = None
        self.full: list[_Chunk] = []
        self.spare: list[_Chunk] = []
        self.peak_bytes = 0

    def alloc(self, ggml_type: int, ne) -> Storage:
        nbytes = _nbytes(ggml_type, ne)
        padded = max(self.align, -(-nbytes // self.align) * self.align)
        c = self.current
        if c is None or not c.fits(padded):
            c = self._new_chunk(padded)
        return c.take(ggml_type, ne, nbytes, padded, self.gen)

    def _new_chunk(self, padded: int) -> _Chunk:
        if padded > self.chunk_bytes // 4:  # big tensors get a chunk of their own
            c = next((s for s in self.spare if s.dedicated and s.size >= padded), None)
            if c is None:
                c = _Chunk(self, padded, 1, dedicated=True)
            else:
                self.spare.remove(c)
            c.gen = self.gen
            self.full.append(c)
            return c
        if self.current is not None:
            self.full.append(self.current)
        shared = [s for s in self.spare if not s.dedicated]
        if shared:
            c = shared[0]
            self.spare.remove(c)
            c.gen = self.gen
        else:
            c = _Chunk(self, self.chunk_bytes, self.chunk_tensors, dedicated=False)
        self.current = c
        return c

    def _chunk_empty(self, c: _Chunk) -> None:
        """Every tensor of `c` has been dropped: its memory can be reused now."""
        c.rewind()
        if c is not self.current:
            if c in self.full:
                self.full.remove(c)
            self.spare.append(c)
            self._trim_spares()

    def _trim_spares(self) -> None:
        dedicated = [s for s in self.spare if s.dedicated]
        for s in dedicated[:-8] if len(dedicated) > 8 else []:  # keep a few big ones for the next pass
            self.spare.remove(s)
            s.free()

    def reset(self) -> None:
        """Forget every tensor of this generation and bump the generation counter."""
        self.peak_bytes = max(self.peak_bytes, self.bytes_in_use())
        self.gen += 1
        chunks = self.full + ([self.current] if self.current is not None else [])
        self.full, self.current = [], None
        for c in chunks:
            c.rewind()
            self.spare.append(c)
        self._trim_spares()

    def bytes_in_use(self) -> int:
        chunks = self.full + ([self.current] if self.current is not None else [])
        return sum(c.offset for c in chunks)

    def bytes_reserved(self) -> int:
        chunks = self.full + self.spare + ([self.current] if self.current is not None else [])
        return sum(c.size for c in chunks)

    def free(self) -> None:
        for c in self.full + self.spare + ([self.current] if self.current is not None else []):
            c.free()
        self.full, self.spare, self.current = [], [], None
        self.gen += 1


class _Owned:
    """The buffer and metadata context behind one persistent tensor."""

    __slots__ = ("buffer", "meta", "pool")

    def __init__(self, pool, buffer, meta):
        self.pool, self.buffer, self.meta = pool, buffer, meta

    def release(self, gen: int) -> None:
        if self.buffer is not None:
            lib.ggml_backend_buffer_free(self.buffer)
            lib.ggml_free(self.meta)
            self.buffer = None


class PersistentPool:
    """One buffer per tensor, freed with its last handle. reset() bumps p_ctx_gen."""

    kind = "persistent"

    def __init__(self, backend):
        self.backend = backend
        self.gen = 1
        self.live_bytes = 0

    def alloc(self, ggml_type: int, ne) -> Storage:
        nbytes = _nbytes(ggml_type, ne)
        meta = _meta_context(1)
        t = _new_header(meta, ggml_type, ne)
        buffer = lib.ggml_backend_buft_alloc_buffer(self.backend.buft, max(nbytes, 1))
        if buffer == _NULL:
            lib.ggml_free(meta)
            raise MemoryError(f"could not allocate {nbytes} bytes on {self.backend.device_name}")
        base = lib.ggml_backend_buffer_get_base(buffer)
        lib.ggml_backend_tensor_alloc(buffer, t, base)
        return Storage(t, self, self.gen, _Owned(self, buffer, meta), nbytes, (ggml_type, tuple(ne)),
                       t.data, buffer)

    def reset(self) -> None:
        self.gen += 1
