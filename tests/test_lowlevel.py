"""Behaviour of the low-level API: lifetimes, memory, errors instead of ggml aborts, backends."""
import gc

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import GGMLError

F32, F16, I32 = g.GGML_TYPE_F32, g.GGML_TYPE_F16, g.GGML_TYPE_I32


def f32(ctx, arr):
    return g.ggml_new_from_numpy(ctx, np.asarray(arr, np.float32))


def run(ctx, y, **kw):
    gf = g.ggml_build_forward_expand(ctx, y)
    g.ggml_graph_compute(ctx, gf, **kw)
    return g.ggml_get_f32(y)


# -- versions and info ---------------------------------------------------------------------------------
def test_version():
    assert g.ggml_version() == "0.25.3"


def test_info_prints_version(capsys):
    data = g.info()
    assert "0.25.3" in capsys.readouterr().out
    assert data["ggml_version"] == "0.25.3" and "CPU" in data["backends"]


@pytest.mark.skip(reason="`python -m ggmlpy info` is not implemented yet")
def test_module_info_cli():
    pass


# -- contexts and their lifetime --------------------------------------------------------------------------
def test_context_manager_frees():
    with g.ggml_init(1 << 20) as ctx:
        a = f32(ctx, [1, 2, 3])
        assert run(ctx, g.ggml_neg(ctx, a)).tolist() == [-1, -2, -3]
    assert not ctx.alive
    with pytest.raises(GGMLError):
        g.ggml_get_f32(a)
    assert "freed" in repr(ctx) and "freed" in repr(a)


FREED_USES = {
    "get_f32": lambda ctx, a, gf: g.ggml_get_f32(a),
    "set_f32": lambda ctx, a, gf: g.ggml_set_f32(a, [0, 0, 0, 0]),
    "get_i32": lambda ctx, a, gf: g.ggml_get_i32(a),
    "tensor_view": lambda ctx, a, gf: g.ggml_tensor_view(a),
    "nelements": lambda ctx, a, gf: g.ggml_nelements(a),
    "ne": lambda ctx, a, gf: a.ne,
    "set_name": lambda ctx, a, gf: g.ggml_set_name(a, "x"),
    "op": lambda ctx, a, gf: g.ggml_add(ctx, a, a),
    "op_new_ctx": lambda ctx, a, gf: g.ggml_add(g.ggml_init(1 << 16), a, a),
    "new_tensor": lambda ctx, a, gf: g.ggml_new_tensor_1d(ctx, F32, 4),
    "used_mem": lambda ctx, a, gf: g.ggml_used_mem(ctx),
    "new_graph": lambda ctx, a, gf: g.ggml_new_graph(ctx),
    "expand": lambda ctx, a, gf: g.ggml_build_forward_expand(ctx, a),
    "expand_graph": lambda ctx, a, gf: g.ggml_build_forward_expand(gf, a),
    "compute": lambda ctx, a, gf: g.ggml_graph_compute(ctx, gf),
    "backend_compute": lambda ctx, a, gf: g.ggml_backend_graph_compute(g.ggml_backend_cpu_init(), gf),
}


@pytest.mark.parametrize("use", sorted(FREED_USES))
def test_freed_context_raises(use):
    ctx = g.ggml_init(1 << 20)
    a = f32(ctx, [1, 2, 3, 4])
    gf = g.ggml_build_forward_expand(ctx, g.ggml_sqr(ctx, a))
    g.ggml_free(ctx)
    g.ggml_free(ctx)  # freeing twice is harmless
    with pytest.raises(GGMLError):
        FREED_USES[use](ctx, a, gf)


def test_graph_over_freed_input_context_raises():
    """A graph in one context over tensors of another: freeing the other retires the graph."""
    wctx, gctx = g.ggml_init(1 << 20), g.ggml_init(1 << 20)
    w = f32(wctx, [1, 2, 3])
    gf = g.ggml_build_forward_expand(gctx, g.ggml_exp(gctx, w))
    wctx.free()
    with pytest.raises(GGMLError):
        g.ggml_graph_compute(gctx, gf)


def test_op_keeps_input_context_alive():
    """An op's result reads its inputs' memory: their context must not be collected under it."""
    gctx = g.ggml_init(1 << 20)
    y = g.ggml_neg(gctx, f32(g.ggml_init(8 << 20), np.ones(4)))  # the input's context is unreferenced
    gc.collect()
    g.ggml_new_from_numpy(g.ggml_init(8 << 20), np.full(4, 42.0, np.float32))  # would reuse freed memory
    assert run(gctx, y).tolist() == [-1] * 4


def test_op_over_freed_input_context_raises():
    wctx, gctx = g.ggml_init(1 << 20), g.ggml_init(1 << 20)
    y = g.ggml_neg(gctx, f32(wctx, [1, 2]))
    wctx.free()
    with pytest.raises(GGMLError, match="freed"):
        g.ggml_build_forward_expand(gctx, y)  # walking y's sources would read freed memory


def test_tensor_keeps_context_alive():
    a = f32(g.ggml_init(1 << 20), [1.5, 2.5])  # no other reference to the context
    gc.collect()
    assert g.ggml_get_f32(a).tolist() == [1.5, 2.5]


# -- zero-copy views ----------------------------------------------------------------------------------------
def test_tensor_view_is_zero_copy():
    ctx = g.ggml_init(1 << 20)
    a = g.ggml_new_tensor_2d(ctx, F32, 3, 2)
    g.ggml_set_f32(a, np.zeros((2, 3)))
    v = g.ggml_tensor_view(a)
    assert v.shape == (2, 3) and v.dtype == np.float32
    v[1, 2] = 7.0  # numpy writes land in ggml's memory ...
    assert g.ggml_get_f32(a)[1, 2] == 7.0
    y = g.ggml_scale(ctx, a, 2.0)
    assert run(ctx, y)[1, 2] == 14.0
    g.ggml_set_f32(a, np.arange(6))  # ... and ggml-side writes show in the view
    assert v.ravel().tolist() == list(range(6))


def test_tensor_view_outlives_free():
    ctx = g.ggml_init(1 << 20)
    a = f32(ctx, np.arange(8))
    v = g.ggml_tensor_view(a)
    ctx.free()
    assert not ctx.alive and ctx._finalizer.alive  # freeing was asked for, memory not yet released
    with pytest.raises(GGMLError):
        g.ggml_get_f32(a)
    v += 1  # still valid memory
    assert v.tolist() == list(range(1, 9))
    del v
    gc.collect()
    assert not ctx._finalizer.alive  # the last view took the arena with it


def test_views_derived_from_view_keep_memory():
    ctx = g.ggml_init(1 << 20)
    v = g.ggml_tensor_view(f32(ctx, np.arange(6).reshape(2, 3)))
    part = v[1]  # a numpy view of the numpy view
    del v
    ctx.free()
    gc.collect()
    assert ctx._finalizer.alive and part.tolist() == [3, 4, 5]
    del part
    gc.collect()
    assert not ctx._finalizer.alive


def test_tensor_view_refuses_noncontiguous_and_bf16():
    ctx = g.ggml_init(1 << 20)
    a = f32(ctx, np.zeros((2, 3)))
    with pytest.raises(GGMLError):
        g.ggml_tensor_view(g.ggml_transpose(ctx, a))
    with pytest.raises(GGMLError):
        g.ggml_tensor_view(g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_BF16, 4))


# -- set / get validation ------------------------------------------------------------------------------------
BAD_SETS = {
    "too_few": lambda t: g.ggml_set_f32(t, np.zeros(5)),
    "too_many": lambda t: g.ggml_set_f32(t, np.zeros(7)),
    "wrong_shape": lambda t: g.ggml_set_f32(t, np.zeros((3, 2))),
    "strings": lambda t: g.ggml_set_f32(t, np.array(list("abcdef"))),
    "objects": lambda t: g.ggml_set_f32(t, [None] * 6),
    "complex": lambda t: g.ggml_set_f32(t, np.zeros(6, complex)),
    "i32_fractions": lambda t: g.ggml_set_i32(t, np.full(6, 0.5)),
    "i32_nan": lambda t: g.ggml_set_i32(t, np.full(6, np.nan)),
    "not_a_tensor": lambda t: g.ggml_set_f32(np.zeros(6), np.zeros(6)),
    "get_not_a_tensor": lambda t: g.ggml_get_f32("x"),
}


@pytest.mark.parametrize("bad", sorted(BAD_SETS))
def test_bad_set_get_raise(bad):
    with g.ggml_init(1 << 20) as ctx:
        t = g.ggml_new_tensor_2d(ctx, F32, 3, 2)
        with pytest.raises(GGMLError):
            BAD_SETS[bad](t)


def test_set_get_accepts_flat_and_leading_ones():
    with g.ggml_init(1 << 20) as ctx:
        t = g.ggml_new_tensor_2d(ctx, F32, 3, 2)
        g.ggml_set_f32(t, range(6))
        assert g.ggml_get_f32(t).shape == (2, 3)
        g.ggml_set_f32(t, np.ones((1, 2, 3)))  # ne = [3, 2, 1] is the same tensor
        assert g.ggml_get_f32(t).sum() == 6
        i = g.ggml_new_from_numpy(ctx, np.arange(4, dtype=np.int64).reshape(1, 1, 4))
        assert i.type == I32 and g.ggml_get_i32(i).tolist() == [0, 1, 2, 3]


def test_get_noncontiguous_and_unallocated_raise():
    with g.ggml_init(1 << 20) as ctx:
        a = f32(ctx, np.zeros((2, 3)))
        with pytest.raises(GGMLError):
            g.ggml_get_f32(g.ggml_permute(ctx, a, 1, 0, 2, 3))
    with g.ggml_init(1 << 20, no_alloc=True) as ctx:
        t = g.ggml_new_tensor_1d(ctx, F32, 4)
        for fn in (g.ggml_get_f32, lambda t: g.ggml_set_f32(t, np.zeros(4)), g.ggml_tensor_view):
            with pytest.raises(GGMLError):
                fn(t)


# -- new_tensor validation -------------------------------------------------------------------------------------
BAD_NEW = {
    "negative": (F32, 2, [3, -1]),
    "n_dims_0": (F32, 0, []),
    "n_dims_5": (F32, 5, [1] * 5),
    "len_mismatch": (F32, 2, [3]),
    "huge": (F32, 1, [2**41]),
    "unknown_type": (999, 1, [3]),
    "negative_type": (-1, 1, [3]),
    "quantized_type": (2, 1, [32]),  # Q4_0: not creatable from numpy
}


@pytest.mark.parametrize("bad", sorted(BAD_NEW))
def test_new_tensor_bad_args(bad):
    type, n_dims, ne = BAD_NEW[bad]
    with g.ggml_init(1 << 20) as ctx, pytest.raises(GGMLError):
        g.ggml_new_tensor(ctx, type, n_dims, ne)


def test_new_tensor_not_a_context():
    with pytest.raises(GGMLError):
        g.ggml_new_tensor_1d(None, F32, 3)
    with pytest.raises((GGMLError, TypeError, ValueError)):
        g.ggml_new_tensor_1d(g.ggml_init(1 << 16), F32, "three")


def test_zero_sized_tensor():
    with g.ggml_init(1 << 20) as ctx:
        t = g.ggml_new_tensor_2d(ctx, F32, 0, 3)
        assert g.ggml_nelements(t) == 0 and g.ggml_get_f32(t).shape == (3, 0)
        g.ggml_set_f32(t, [])


# -- memory limits ------------------------------------------------------------------------------------------------
def test_context_out_of_memory():
    with g.ggml_init(4096) as ctx:
        with pytest.raises(GGMLError, match="out of memory"):
            g.ggml_new_tensor_2d(ctx, F32, 1024, 1024)
        small = g.ggml_new_tensor_1d(ctx, F32, 4)  # the context is still usable
        with pytest.raises(GGMLError):
            for _ in range(100):  # op results fill it up: an error, never an abort
                small = g.ggml_add(ctx, small, small)


def test_graph_does_not_fit_context():
    with g.ggml_init(4096) as ctx, pytest.raises(GGMLError):
        g.ggml_new_graph(ctx)


def test_graph_too_small():
    with g.ggml_init(1 << 20) as ctx:
        x = f32(ctx, np.ones(4))
        y = x
        for _ in range(5):
            y = g.ggml_sqr(ctx, y)
        gf = g.ggml_new_graph(ctx, size=2)
        with pytest.raises(GGMLError, match="graph too small"):
            g.ggml_build_forward_expand(gf, y)
        assert g.ggml_graph_n_nodes(gf) == 0  # nothing half-added


@pytest.mark.parametrize("size", [0, -3])
def test_graph_bad_size(size):
    with g.ggml_init(1 << 20) as ctx, pytest.raises(GGMLError):
        g.ggml_new_graph(ctx, size=size)


def test_build_forward_expand_c_style():
    with g.ggml_init(1 << 20) as ctx:
        a, b = f32(ctx, [1, 2]), f32(ctx, [3, 4])
        s, p = g.ggml_add(ctx, a, b), g.ggml_mul(ctx, a, b)
        gf = g.ggml_new_graph(ctx)
        assert g.ggml_build_forward_expand(gf, s) is gf
        g.ggml_build_forward_expand(gf, p)
        g.ggml_build_forward_expand(gf, s)  # already there: no duplicate node
        assert g.ggml_graph_n_nodes(gf) == 2
        g.ggml_graph_compute(ctx, gf)
        assert g.ggml_get_f32(s).tolist() == [4, 6] and g.ggml_get_f32(p).tolist() == [3, 8]
        with pytest.raises(GGMLError):
            g.ggml_build_forward_expand("graph", s)
        with pytest.raises(GGMLError):
            g.ggml_build_forward_expand(gf, np.zeros(2))


def test_recompute_after_set():
    """A graph built once can be recomputed on new inputs (the bench's fast path)."""
    with g.ggml_init(1 << 20) as ctx:
        a = g.ggml_new_tensor_1d(ctx, F32, 3)
        y = g.ggml_mul(ctx, a, a)
        gf = g.ggml_build_forward_expand(ctx, y)
        for k in range(3):
            g.ggml_set_f32(a, [k, k + 1, k + 2])
            g.ggml_graph_compute(ctx, gf, n_threads=1)
            assert g.ggml_get_f32(y).tolist() == [k * k, (k + 1) ** 2, (k + 2) ** 2]


@pytest.mark.parametrize("n_threads", [0, -1])
def test_bad_thread_count(n_threads):
    with g.ggml_init(1 << 20) as ctx:
        y = g.ggml_neg(ctx, f32(ctx, [1]))
        with pytest.raises(GGMLError):
            g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y), n_threads=n_threads)


# -- backends ------------------------------------------------------------------------------------------------------
def test_backend_alloc_and_compute():
    backend = g.ggml_backend_cpu_init()
    g.ggml_backend_cpu_set_n_threads(backend, 2)
    assert "CPU" in g.ggml_backend_name(backend)
    wctx = g.ggml_init(1 << 20, no_alloc=True)
    a, b = g.ggml_new_tensor_2d(wctx, F32, 4, 3), g.ggml_new_tensor_2d(wctx, F32, 4, 2)
    buf = g.ggml_backend_alloc_ctx_tensors(wctx, backend)
    assert buf.size() >= 4 * (12 + 8)
    x, w = np.random.rand(3, 4).astype(np.float32), np.random.rand(2, 4).astype(np.float32)
    g.ggml_backend_tensor_set(a, x)
    g.ggml_backend_tensor_set(b, w)
    # compute graph in its own no_alloc context; the graph allocator places the intermediates
    gctx = g.ggml_init(1 << 20, no_alloc=True)
    y = g.ggml_relu(gctx, g.ggml_mul_mat(gctx, a, b))
    gf = g.ggml_build_forward_expand(gctx, y)
    with g.GraphAllocator(backend) as galloc:
        galloc.alloc(gf)
        assert galloc.buffer_size() > 0
        g.ggml_backend_graph_compute(backend, gf)
        np.testing.assert_allclose(g.ggml_backend_tensor_get(y), np.maximum(w @ x.T, 0), rtol=1e-5)
    buf.free()
    with pytest.raises(GGMLError):  # the buffer's tensors went with it
        g.ggml_get_f32(a)
    g.ggml_backend_free(backend)


def test_backend_alloc_errors():
    backend = g.ggml_backend_cpu_init()
    with pytest.raises(GGMLError):  # must be no_alloc
        g.ggml_backend_alloc_ctx_tensors(g.ggml_init(1 << 16), backend)
    with pytest.raises(GGMLError):  # no tensors
        g.ggml_backend_alloc_ctx_tensors(g.ggml_init(1 << 16, no_alloc=True), backend)
    with pytest.raises(GGMLError):
        g.ggml_backend_alloc_ctx_tensors(backend, backend)
    with pytest.raises(GGMLError):
        g.ggml_backend_graph_compute("cpu", None)
    with pytest.raises(GGMLError):
        g.ggml_backend_init_by_name("NoSuchDevice0")


@pytest.mark.parametrize("path", ["graph_compute", "backend_compute"])
def test_compute_unallocated_no_alloc_raises(path):
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    a = g.ggml_new_tensor_1d(ctx, F32, 8)
    gf = g.ggml_build_forward_expand(ctx, g.ggml_exp(ctx, a))
    with pytest.raises(GGMLError, match="no memory|not in a backend buffer"):
        if path == "graph_compute":
            g.ggml_graph_compute(ctx, gf)
        else:
            g.ggml_backend_graph_compute(g.ggml_backend_cpu_init(), gf)


def test_new_from_numpy_on_no_alloc_context():
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    t = g.ggml_new_from_numpy(ctx, np.zeros((2, 5)))
    assert t.ne[:2] == (5, 2) and not t.is_allocated


# -- row indices -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("idx", [[0, 6], [-1, 0], [2**31 - 1]])
def test_get_rows_out_of_range_raises_at_compute(idx):
    with g.ggml_init(1 << 20) as ctx:
        a = f32(ctx, np.zeros((6, 4)))
        b = g.ggml_new_from_numpy(ctx, np.array(idx, np.int32))
        y = g.ggml_get_rows(ctx, a, b)  # building is fine: the indices are data
        gf = g.ggml_build_forward_expand(ctx, y)
        with pytest.raises(GGMLError, match="out of range"):
            g.ggml_graph_compute(ctx, gf)
        g.ggml_set_i32(b, [5, 0][: len(idx)])  # fix the data: the same graph now runs
        g.ggml_graph_compute(ctx, gf)


def test_get_rows_out_of_range_on_backend():
    backend = g.ggml_backend_cpu_init()
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    a, b = g.ggml_new_tensor_2d(ctx, F32, 4, 3), g.ggml_new_tensor_1d(ctx, I32, 2)
    g.ggml_backend_alloc_ctx_tensors(ctx, backend)
    g.ggml_backend_tensor_set(b, [1, 3])
    gctx = g.ggml_init(1 << 20, no_alloc=True)
    gf = g.ggml_build_forward_expand(gctx, g.ggml_get_rows(gctx, a, b))
    galloc = g.GraphAllocator(backend)
    galloc.alloc(gf)
    with pytest.raises(GGMLError, match="out of range"):
        g.ggml_backend_graph_compute(backend, gf)


# -- op argument validation (regressions from tests/test_fuzz.py: each of these used to abort) ------------------------
