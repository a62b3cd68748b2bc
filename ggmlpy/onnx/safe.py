"""`lib` for the builders, with ggml's shape assertions checked first.

ggml aborts the process on a failed GGML_ASSERT. The builders compute every
shape themselves, so a failed check here is a builder bug; it must still be a
Python exception naming the ggml call, never an abort.
"""
from __future__ import annotations

from ..bindings import ffi as _ffi
from ..bindings import lib as _lib
from .graph import OnnxError


def _ne(t):
    return [int(t.ne[i]) for i in range(4)]


def _nel(t):
    n = 1
    for d in _ne(t):
        n *= d
    return n


def _fail(fn, msg, *ts):
    return OnnxError(f"internal error in {fn}: {msg} (ne {[ _ne(t) for t in ts ]})")


def _can_repeat(b, a):  # b repeats to a's shape
    return all(y % x == 0 for x, y in zip(_ne(b), _ne(a))) and all(x > 0 for x in _ne(b))


def _binary(name):
    fn = getattr(_lib, name)

    def checked(ctx, a, b):
        if not _can_repeat(b, a):
            raise _fail(name, "second operand does not broadcast to the first", a, b)
        return fn(ctx, a, b)
    return checked


def _mul_mat(ctx, a, b):
    na, nb = _ne(a), _ne(b)
    if na[0] != nb[0] or nb[2] % na[2] or nb[3] % na[3]:
        raise _fail("ggml_mul_mat", "shapes do not multiply", a, b)
    return _lib.ggml_mul_mat(ctx, a, b)


def _concat(ctx, a, b, dim):
    na, nb = _ne(a), _ne(b)
    if any(x != y for i, (x, y) in enumerate(zip(na, nb)) if i != dim) or a.type != b.type:
        raise _fail("ggml_concat", f"shapes or types differ outside dim {dim}", a, b)
    return _lib.ggml_concat(ctx, a, b, dim)


def _reshape(name, n):
    fn = getattr(_lib, name)

    def checked(ctx, a, *ne):
        total = 1
        for d in ne[:n]:
            total *= int(d)
        if total != _nel(a) or not _lib.ggml_is_contiguous(a):
            raise _fail(name, f"cannot reshape to {list(ne)}", a)
        return fn(ctx, a, *ne)
    return checked


def _repeat(ctx, a, b):
    if not _can_repeat(a, b):
        raise _fail("ggml_repeat", "does not tile", a, b)
    return _lib.ggml_repeat(ctx, a, b)


def _repeat_4d(ctx, a, *ne):
    if any(int(y) % x for x, y in zip(_ne(a), ne)):
        raise _fail("ggml_repeat_4d", f"does not tile to {list(ne)}", a)
    return _lib.ggml_repeat_4d(ctx, a, *ne)


def _get_rows(ctx, a, b):
    na, nb = _ne(a), _ne(b)
    if b.type != _lib.GGML_TYPE_I32 or na[2] != nb[1] or nb[3] != 1 or na[3] != nb[2]:
        raise _fail("ggml_get_rows", "index tensor does not fit", a, b)
    return _lib.ggml_get_rows(ctx, a, b)


_CONTEXT, _TENSOR = _ffi.typeof("struct ggml_context *"), _ffi.typeof("struct ggml_tensor *")
_ROOM = 8 * int(_lib.ggml_tensor_overhead())  # more than any single ggml call makes in its context


def _with_room(name, fn):
    """fn(ctx, ...) after checking that ctx has room for the tensors it makes: ggml aborts the
    process when a context runs out (a builder that made far more tensors than its node's budget)."""
    def checked(ctx, *args):
        if _lib.ggml_get_mem_size(ctx) - _lib.ggml_used_mem(ctx) < _ROOM:
            raise OnnxError(f"{name}: the graph outgrew its context (a builder made far more ggml tensors "
                            "than its node's budget)")
        return fn(ctx, *args)
    return checked


def _makes_a_tensor(name, fn) -> bool:
    """Whether fn(ctx, ...) makes a tensor in ctx (an op, a view, a new tensor): not a look-up
    (ggml_get_*), nor what reads or frees a context (ggml_free, ggml_backend_alloc_ctx_tensors)."""
    try:
        t = _ffi.typeof(fn)
        args, result = t.args, t.result
    except (TypeError, AttributeError):  # a constant, not a function
        return False
    return bool(args) and args[0] is _CONTEXT and result is _TENSOR and not name.startswith("ggml_get_")


class _SafeLib:
    def __init__(self):
        checked = {n: _binary(n) for n in ("ggml_add", "ggml_sub", "ggml_mul", "ggml_div")}
        checked.update(ggml_mul_mat=_mul_mat, ggml_concat=_concat, ggml_repeat=_repeat, ggml_repeat_4d=_repeat_4d,
                       ggml_get_rows=_get_rows)
        for n, k in (("ggml_reshape_1d", 1), ("ggml_reshape_2d", 2), ("ggml_reshape_3d", 3), ("ggml_reshape_4d", 4)):
            checked[n] = _reshape(n, k)
        for n, fn in checked.items():
            setattr(self, n, _with_room(n, fn))

    def __getattr__(self, name):
        fn = getattr(_lib, name)
        if _makes_a_tensor(name, fn):
            fn = _with_room(name, fn)
        setattr(self, name, fn)  # looked up once
        return fn


lib = _SafeLib()
