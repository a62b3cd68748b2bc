"""Behaviour of the low-level API: lifetimes, memory, errors instead of ggml aborts, backends."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import GGMLError

F32, F16, I32 = g.GGML_TYPE_F32, g.GGML_TYPE_F16, g.GGML_TYPE_I32
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def test_module_info_cli():
    proc = subprocess.run([sys.executable, "-m", "ggmlpy", "info"], capture_output=True, text=True, timeout=120,
                          cwd=_ROOT)
    assert proc.returncode == 0 and "0.25.3" in proc.stdout


def test_importing_the_cli_module_runs_nothing():
    """Documentation tools import every module, ggmlpy.__main__ included: only `python -m` runs it."""
    proc = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['x', 'info']; import ggmlpy.__main__"],
                          capture_output=True, text=True, timeout=120, cwd=_ROOT)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_ggml_and_its_openmp_runtime_stay_out_of_the_global_symbol_scope():
    """libggml is loaded RTLD_LOCAL: a library loaded after it (PyTorch, with its own OpenMP
    runtime) must not bind to ggml's libgomp (free() aborted so on an H200 machine)."""
    probe = "import ctypes, ggmlpy; s = ctypes.CDLL(None); print(hasattr(s, 'ggml_init'), hasattr(s, 'GOMP_parallel'))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          cwd=_ROOT)
    assert proc.returncode == 0 and proc.stdout.split() == ["False", "False"], proc.stdout + proc.stderr


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
    "n_dims_6": (F32, 6, [1] * 6),  # ggmlR's GGML_MAX_DIMS is 5 (tensor5.py)
    "len_mismatch": (F32, 2, [3]),
    "huge": (F32, 1, [2**41]),
    "unknown_type": (999, 1, [3]),
    "negative_type": (-1, 1, [3]),
    "unknown_type_name": ("f33", 1, [3]),
    "type_as_float": (0.0, 1, [3]),
    "quantized_partial_block": (2, 1, [48]),  # Q4_0 rows are whole blocks of 32 (ggml asserts it)
    "removed_type": (31, 1, [32]),  # ggml dropped Q4_0_4_4 (31): its size is 0
}


@pytest.mark.parametrize("bad", sorted(BAD_NEW))
def test_new_tensor_bad_args(bad):
    type, n_dims, ne = BAD_NEW[bad]
    with g.ggml_init(1 << 20) as ctx, pytest.raises(GGMLError):
        g.ggml_new_tensor(ctx, type, n_dims, ne)


@pytest.mark.parametrize("name, type", [("f32", F32), ("GGML_TYPE_F16", g.GGML_TYPE_F16), ("q4_K", g.GGML_TYPE_Q4_K)])
def test_new_tensor_takes_a_type_by_name(name, type):
    with g.ggml_init(1 << 20) as ctx:
        assert g.ggml_new_tensor_2d(ctx, name, 256, 2).type == type


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
        with pytest.raises(GGMLError, match="empty"):  # ggml's graph allocator aborted on these
            g.ggml_build_forward_expand(ctx, g.ggml_neg(ctx, t))


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
def F(ctx, *shape):
    """A random f32 tensor of numpy shape `shape` (ggml ne reversed)."""
    return g.ggml_new_from_numpy(ctx, np.random.default_rng(0).normal(size=shape).astype(np.float32))


def T(ctx, x):
    return g.ggml_transpose(ctx, x)


def I(ctx, values):
    return g.ggml_new_from_numpy(ctx, np.array(values, np.int32))


def _pos(ctx):
    return I(ctx, [0, 1, 2])


# Each built a graph that ggml aborted on (at construction or in the kernel), or, where marked,
# one whose kernel read or wrote out of bounds; now a GGMLError.
ABORTS = {
    "diag_mask_inf_negative_n_past": lambda c: g.ggml_diag_mask_inf(c, F(c, 3, 4), -1),
    "diag_mask_inf_transposed": lambda c: g.ggml_diag_mask_inf(c, T(c, F(c, 3, 4)), 0),
    "repeat_back_f16": lambda c: g.ggml_repeat_back(c, g.ggml_new_tensor_2d(c, F16, 2, 4), F(c, 2)),
    "sum_rows_f16": lambda c: g.ggml_sum_rows(c, g.ggml_new_tensor_2d(c, F16, 8, 2)),
    "view_contiguous_size_past_end": lambda c: g.ggml_view_2d(c, F(c, 4, 2), 2, 4, 6, 2),
    "mul_mat_empty_batch": lambda c: g.ggml_mul_mat(c, g.ggml_new_tensor_3d(c, F32, 2, 2, 0), F(c, 2, 2)),
    "unary_transposed": lambda c: g.ggml_sqr(c, T(c, F(c, 2, 3))),
    "unary_transposed_vector": lambda c: g.ggml_abs(c, T(c, F(c, 1, 3))),  # ne0 == 1, nb0 != 4
    "binary_transposed_a": lambda c: g.ggml_div(c, T(c, F(c, 2, 2)), F(c, 2, 2)),
    "clamp_transposed": lambda c: g.ggml_clamp(c, T(c, F(c, 2, 3)), 0, 1),
    "mul_mat_transposed_b": lambda c: g.ggml_mul_mat(c, F(c, 3, 3), T(c, F(c, 3, 3))),
    "rope_permuted": lambda c: g.ggml_rope_ext(c, g.ggml_permute(c, F(c, 3, 4, 4), 1, 0, 2, 3), _pos(c), None, 4),
    "repeat_transposed": lambda c: g.ggml_repeat(c, T(c, F(c, 2, 3)), F(c, 2, 3, 2)),
    "soft_max_back_transposed": lambda c: g.ggml_soft_max_ext_back(c, T(c, F(c, 3, 3)), F(c, 3, 3)),
    "rms_norm_back_transposed": lambda c: g.ggml_rms_norm_back(c, F(c, 3, 3), T(c, F(c, 3, 3))),
    "scale_not_packed": lambda c: g.ggml_scale(c, T(c, F(c, 2, 4, 1)), 2.0),  # contiguous, not padded_1d
    "conv_2d_empty_kernel": lambda c: g.ggml_conv_2d(c, g.ggml_new_tensor_4d(c, F32, 4, 0, 3, 1), F(c, 3, 4, 4)),
    "acc_empty_b_at_end": lambda c: g.ggml_acc(c, F(c, 2, 2), g.ggml_new_tensor_1d(c, F32, 0), 8, 16, 16, 16),
    "acc_offset_past_int32": lambda c: g.ggml_acc(c, F(c, 4), F(c, 1), 4, 4, 4, 2**32),
    "get_rows_back_out_of_range": lambda c: g.ggml_get_rows_back(c, F(c, 2, 3), I(c, [0, 5]), F(c, 4, 3)),
    "get_rows_computed_out_of_range": lambda c: g.ggml_get_rows(c, F(c, 4, 3), g.ggml_cont(c, I(c, [1, 7]))),
    "get_rows_strided_out_of_range": lambda c: g.ggml_get_rows(  # a transposed (strided) index matrix
        c, F(c, 2, 4, 3), T(c, I(c, [[0, 9], [1, 2]]))),
    "get_rows_argsort_too_wide": lambda c: g.ggml_get_rows(c, F(c, 3, 2), g.ggml_argsort(c, F(c, 5))),
    # out of bounds: pool_2d walks planes to the end of a's bytes, im2col assumes [IH][IW] planes,
    # count_equal mis-indexes 3-d rows
    "pool_2d_permuted": lambda c: g.ggml_pool_2d(c, g.ggml_permute(c, F(c, 3, 4, 5), 0, 2, 1, 3), "max", 1, 1, 1, 1),
    "im2col_permuted": lambda c: g.ggml_im2col(c, F(c, 1, 2, 1, 1), g.ggml_permute(c, F(c, 2, 4, 5), 0, 2, 1, 3),
                                               1, 1, 0, 0, 1, 1),
    "count_equal_3d_strided": lambda c: g.ggml_count_equal(
        c, *[g.ggml_permute(c, I(c, np.zeros((2, 3, 4))), 0, 2, 1, 3)] * 2),
}


@pytest.mark.parametrize("case", sorted(ABORTS))
def test_former_aborts_raise(case):
    with g.ggml_init(1 << 22) as ctx, pytest.raises(GGMLError):
        y = ABORTS[case](ctx)
        g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))


@pytest.mark.parametrize("build", [
    lambda c, x: g.ggml_sqr(c, x), lambda c, x: g.ggml_clamp(c, x, 0, 1), lambda c, x: g.ggml_add(c, x, x),
    lambda c, x: g.ggml_rms_norm(c, x), lambda c, x: g.ggml_sum_rows(c, x), lambda c, x: g.ggml_argsort(c, x)],
    ids=["sqr", "clamp", "add", "rms_norm", "sum_rows", "argsort"])
def test_cont_makes_transposed_inputs_work(build):
    with g.ggml_init(1 << 20) as ctx:
        x = F(ctx, 2, 3)
        y = build(ctx, g.ggml_cont(ctx, T(ctx, x)))
        ref = run(ctx, build(ctx, f32(ctx, g.ggml_get_f32(x).T.copy())))
        assert np.array_equal(run(ctx, y), ref)


def test_computed_row_indices_are_checked_then_used():
    with g.ggml_init(1 << 20) as ctx:
        a = F(ctx, 4, 3)
        idx = g.ggml_cont(ctx, I(ctx, [3, 0, 2]))  # values exist only once the graph has run
        out = run(ctx, g.ggml_get_rows(ctx, a, idx))
        np.testing.assert_array_equal(out, g.ggml_get_f32(a)[[3, 0, 2]])
        top = g.ggml_argsort(ctx, F(ctx, 4))  # indices < 4 rows: known without computing
        assert run(ctx, g.ggml_get_rows(ctx, a, top)).shape == (4, 3)


def test_strided_row_indices():
    with g.ggml_init(1 << 20) as ctx:
        a, m = F(ctx, 2, 4, 3), np.array([[0, 3], [1, 2]])
        out = run(ctx, g.ggml_get_rows(ctx, a, T(ctx, I(ctx, m))))  # batch k picks rows m[:, k]
        np.testing.assert_array_equal(out, np.stack([g.ggml_get_f32(a)[k][m[:, k]] for k in range(2)]))


def test_view_made_before_source_had_memory():
    backend = g.ggml_backend_cpu_init()
    wctx, ctx = g.ggml_init(1 << 20, no_alloc=True), g.ggml_init(1 << 20)
    w = g.ggml_new_tensor_1d(wctx, F32, 2)
    y = g.ggml_cpy(ctx, f32(ctx, [1, 2]), w)  # a view of w, taken while w has no data
    g.ggml_backend_alloc_ctx_tensors(wctx, backend)
    with pytest.raises(GGMLError, match="view made before"):
        g.ggml_backend_graph_compute(backend, g.ggml_build_forward_expand(ctx, y))


def test_element_count_overflow_in_no_alloc_context():
    with g.ggml_init(1 << 20, no_alloc=True) as ctx:
        with pytest.raises(GGMLError, match="too many elements"):
            g.ggml_new_tensor_4d(ctx, F32, 2**39, 2**39, 1, 1)
        x = g.ggml_new_tensor_2d(ctx, F32, 2**20, 2**20)
        with pytest.raises(GGMLError, match="too many elements"):
            g.ggml_upscale(ctx, x, 2**31 - 1)
        with pytest.raises(GGMLError, match="too many elements"):  # ggml multiplies up to the 0, and overflows
            g.ggml_view_4d(ctx, x, 2**40, 2**31 - 1, 0, 1, 192, 128, 64, 0)


def test_backend_alloc_rejects_view_of_arena_tensor():
    ctx, nctx = g.ggml_init(1 << 20), g.ggml_init(1 << 20, no_alloc=True)
    g.ggml_transpose(nctx, f32(ctx, np.zeros((2, 3))))  # a view in nctx of a tensor outside any buffer
    with pytest.raises(GGMLError, match="view"):
        g.ggml_backend_alloc_ctx_tensors(nctx, g.ggml_backend_cpu_init())


@pytest.mark.parametrize("fn", [g.ggml_nelements, g.ggml_nbytes, g.ggml_n_dims, g.ggml_nrows, g.ggml_is_contiguous,
                                g.ggml_get_name, lambda t: g.ggml_set_name(t, "x"), g.ggml_free, g.ggml_used_mem,
                                g.ggml_graph_n_nodes])
@pytest.mark.parametrize("bad", [None, np.zeros(3), 3], ids=["None", "ndarray", "int"])
def test_accessors_reject_non_tensors(fn, bad):
    with pytest.raises(GGMLError):
        fn(bad)


_GALLOC_EARLY_FREE = """
import numpy as np, ggmlpy as g
backend = g.ggml_backend_cpu_init()
ctx = g.ggml_init(1 << 20, no_alloc=True)
x = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 4)
gf = g.ggml_build_forward_expand(ctx, g.ggml_exp(ctx, x))
galloc = g.GraphAllocator(backend)
galloc.alloc(gf)
galloc.free()  # x's memory was in the allocator's buffer
try:
    g.ggml_set_f32(x, np.zeros(4))
except g.GGMLError:
    print("raised")
"""


def test_graph_allocator_freed_before_its_tensors():
    proc = subprocess.run([sys.executable, "-c", _GALLOC_EARLY_FREE], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, GGML_NO_BACKTRACE="1"), cwd=_ROOT)
    assert proc.returncode == 0 and "raised" in proc.stdout


def test_contiguous_permutation_with_unit_dims():
    """ggml_is_contiguous() ignores size-1 dims, so this view counts as contiguous; nb0 is 12 though."""
    with g.ggml_init(1 << 20) as ctx:
        x = g.ggml_permute(ctx, F(ctx, 3), 2, 3, 0, 1)  # ne [3] -> [1, 1, 3]
        assert g.ggml_is_contiguous(x)
        for op in (lambda: g.ggml_diag_mask_inf(ctx, x, 0), lambda: g.ggml_rms_norm_back(ctx, x, x)):
            with pytest.raises(GGMLError):
                op()


def test_graph_allocator_lives_as_long_as_the_tensors_it_placed():
    import gc
    backend = g.ggml_backend_cpu_init()
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    x = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 4)
    y = g.ggml_exp(ctx, x)
    gf = g.ggml_build_forward_expand(ctx, y)
    galloc = g.GraphAllocator(backend)
    galloc.alloc(gf)
    del galloc
    gc.collect()  # the context keeps the allocator, and so x's memory, alive
    g.ggml_set_f32(x, np.zeros(4))
    g.ggml_backend_graph_compute(backend, gf)
    np.testing.assert_allclose(g.ggml_get_f32(y), np.ones(4))
