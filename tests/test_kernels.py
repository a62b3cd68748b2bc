"""ggmlpy.kernels: the fused GELU kernels (C, ggml custom ops) against float64 references, and
their use by eager, compiled and ONNX graphs on the CPU; without them (GGMLPY_KERNELS=0) ggml's
own ops run and give the same numbers."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import kernels
from ggmlpy.kernels import loader as kernel_loader
from ggmlpy.autograd.transforms import hvp
from ggmlpy.bindings import lib

K = kernels.get()
needs_kernels = pytest.mark.skipif(K is None, reason="no C compiler: ggmlpy.kernels is not loaded")

SQRT2 = math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def cdf64(x):
    """Phi(x) in float64: erfc for the lower tail (no cancellation)."""
    return np.array([0.5 * math.erfc(-v / SQRT2) for v in np.asarray(x, np.float64).ravel()]).reshape(np.shape(x))


def gelu64(x):
    return np.asarray(x, np.float64) * cdf64(x)


def gelu_grad64(x):
    x = np.asarray(x, np.float64)
    return cdf64(x) + x * np.exp(-x * x / 2) * INV_SQRT_2PI


def sweep():
    """A dense sweep of float32 x: uniform over [-20, 20], geometric down to 1e-38 both sides."""
    geo = np.geomspace(1e-38, 40, 40_000)
    return np.concatenate([np.linspace(-20, 20, 200_001), geo, -geo, [0.0, -0.0]]).astype(np.float32)


def custom_op_nodes(graph_nodes):
    return sum(1 for p in graph_nodes if p.op in (lib.GGML_OP_MAP_CUSTOM1, lib.GGML_OP_MAP_CUSTOM2))


def eager_graph_nodes():
    """Every node of the graphs the CPU device's executor has cached."""
    ex = g.ag_tensor(np.zeros((1, 1))).device_context.executor
    return [p for c in ex.cache.values() for p in c.nodes]


def gelu_eager(x):
    """gelu(x) and its gradient (seed 1) through ag_gelu, eagerly."""
    t = g.ag_param(np.asarray(x, np.float64).reshape(-1, 1))
    with g.with_grad_tape():
        y = g.ag_gelu(t)
        loss = g.ag_sum(y)
    return y.numpy().ravel(), g.backward(loss)[t].numpy().ravel()


# -- the kernels themselves -----------------------------------------------------------------------------
@needs_kernels
def test_forward_within_8_ulp_of_float64_over_a_dense_sweep():
    x = sweep()
    y, _ = gelu_eager(x)
    want = gelu64(x)
    assert custom_op_nodes(eager_graph_nodes()) > 0  # the kernel ran, not ggml's gelu_erf
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    ulp = np.spacing(np.abs(want[normal]).astype(np.float32)).astype(np.float64)
    err = np.abs(y[normal] - want[normal]) / ulp
    # measured: AVX-512's vgelu 4.8 ulp at x = -2.50; the scalar path 7.1 ulp at x = -1.41 (1/2 + x C(x^2)
    # cancels to 0.08 there), 2-3 elsewhere
    assert err.max() <= 8, f"max error {err.max():.1f} ulp at x = {x[normal][np.argmax(err)]}"
    # below float32's normal range: the right subnormal or zero, never a sign error
    assert np.all(np.abs(y[~normal] - want[~normal]) <= 2 * np.finfo(np.float32).smallest_subnormal)
    assert np.all(np.signbit(y[~normal & (x < 0)]))


@needs_kernels
def test_backward_within_float32_rounding_of_float64_over_a_dense_sweep():
    x = sweep()
    _, d = gelu_eager(x)
    want = gelu_grad64(x)
    # Phi(x) + x phi(x) crosses zero near x = -0.75: the error is measured against the size of
    # its terms, |Phi| + |x phi| (float32 rounding of either is about 6e-8 of it)
    scale = cdf64(x) + np.abs(x) * np.exp(-x.astype(np.float64) ** 2 / 2) * INV_SQRT_2PI
    ok = scale > 1e-30
    rel = np.abs(d[ok] - want[ok]) / scale[ok]
    assert rel.max() < 5e-7, f"max error {rel.max():.2e} at x = {x[ok][np.argmax(rel)]}"
    assert np.all(d[x == 0] == 0.5)  # exact at 0 (ggml's graph divided y by x there)
    big = np.abs(x) >= 10
    np.testing.assert_array_equal(d[big & (x > 0)], 1.0)
    assert np.all(np.abs(d[big & (x < 0)]) < 1e-20)


@needs_kernels
def test_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 40, -40, 1e-38, -1e-38, 0.0, -0.0], np.float32)
    y, d = gelu_eager(x)
    assert np.isnan(y[0]) and np.isnan(d[0])
    assert y[1] == np.inf and d[1] == 1.0
    assert y[2] == 0 and np.signbit(y[2]) and d[2] == 0  # -inf -> -0, not NaN
    assert y[3] == 40 and d[3] == 1.0
    assert y[4] == 0 and np.signbit(y[4]) and d[4] == 0
    np.testing.assert_allclose(y[5:7], [5e-39, -5e-39], rtol=1e-6)
    assert y[7] == 0 and y[8] == 0 and np.all(d[5:] == 0.5)


@needs_kernels
def test_gradients_by_finite_differences_and_second_derivatives():
    x = np.random.default_rng(3).standard_normal((4, 3)) * 2
    t, w = g.ag_param(x), g.ag_tensor(np.cos(x))
    assert g.ag_gradcheck(lambda: g.ag_sum(g.ag_mul(g.ag_gelu(t), w)), [t], eps=1e-3, atol=2e-3)
    # hvp differentiates the backward again: the rule table's differentiable forms run there
    xs = np.array([[-3.0], [-1.0], [-0.2], [0.0], [0.7], [2.5]])
    _, hv = hvp(lambda t: g.ag_sum(g.ag_gelu(t)), g.ag_tensor(xs), g.ag_tensor(np.ones_like(xs)))
    phi = np.exp(-xs ** 2 / 2) * INV_SQRT_2PI
    np.testing.assert_allclose(hv.numpy(), phi * (2 - xs ** 2), atol=1e-6)


def test_noncontiguous_and_batched_inputs():
    x = np.random.default_rng(4).standard_normal((6, 5, 3))
    t = g.ag_param(x)
    with g.with_grad_tape():
        y = g.ag_gelu(g.ag_permute(t, 1, 0, 2))  # [5, 6, 3]
        loss = g.ag_sum(g.ag_mul(y, g.ag_tensor(np.ones((5, 6, 3)) * 2)))
    np.testing.assert_allclose(y.numpy(), gelu64(x.transpose(1, 0, 2)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g.backward(loss)[t].numpy(), 2 * gelu_grad64(x), rtol=1e-6, atol=1e-7)


# -- where they are used ------------------------------------------------------------------------------------
def _mlp_step_losses(compiled: bool):
    """Five AdamW steps of a small GELU MLP (eager or ag_compile): the losses and final weights."""
    rng = np.random.default_rng(0)
    w1, w2 = g.ag_param(rng.standard_normal((64, 16)) * 0.3), g.ag_param(rng.standard_normal((1, 64)) * 0.3)
    xs, ys = rng.standard_normal((16, 256)), rng.standard_normal((1, 256))
    opt = g.optimizer_adam([w1, w2], lr=1e-2)

    def loss_fn(x, y):
        return g.ag_mse_loss(g.ag_matmul(w2, g.ag_gelu(g.ag_matmul(w1, x))), y)
    losses = []
    if compiled:
        step = g.ag_compile(loss_fn, [xs, ys], optimizer=opt)
        for _ in range(5):
            losses.append(float(np.asarray(step(xs, ys)).ravel()[0]))
    else:
        for _ in range(5):
            with g.with_grad_tape():
                loss = loss_fn(g.ag_tensor(xs), g.ag_tensor(ys))
            opt.step(g.backward(loss))
            opt.zero_grad()
            losses.append(float(loss.numpy().ravel()[0]))
    return np.array(losses), w1.numpy().copy()


@needs_kernels
@pytest.mark.parametrize("compiled", [False, True])
def test_eager_and_compiled_steps_match_ggml_ops_within_float32_rounding(compiled):
    with_k = _mlp_step_losses(compiled)
    prev = kernels.set_enabled(False)  # graphs built from here on use ggml's ops
    try:
        without = _mlp_step_losses(compiled)
    finally:
        kernels.set_enabled(prev)
    np.testing.assert_allclose(with_k[0], without[0], rtol=2e-6)
    np.testing.assert_allclose(with_k[1], without[1], rtol=1e-5, atol=1e-6)


@needs_kernels
def test_compiled_graph_uses_the_kernels_on_the_cpu():
    w = g.ag_param(np.random.default_rng(1).standard_normal((8, 4)))
    x = np.random.default_rng(2).standard_normal((4, 32))
    step = g.ag_compile(lambda x: g.ag_sum(g.ag_gelu(g.ag_matmul(w, x))), [x], optimizer=g.optimizer_sgd([w], lr=0.1))
    step(x)
    plan = next(iter(step.plans.values()))
    gr = plan.builder.graph
    nodes = [lib.ggml_graph_node(gr, i) for i in range(lib.ggml_graph_n_nodes(gr))]
    ops = [p.op for p in nodes]
    assert ops.count(lib.GGML_OP_MAP_CUSTOM1) == 1 and ops.count(lib.GGML_OP_MAP_CUSTOM2) == 1


@needs_kernels
def test_onnx_gelu_fusion_runs_the_kernel_on_the_cpu():
    onnx = pytest.importorskip("onnx")
    import ggmlpy.onnx as go
    from onnx import TensorProto as T
    from onnx import helper
    c = onnx.numpy_helper.from_array
    inits = [c(np.array(SQRT2, np.float32), "s2"), c(np.array(1, np.float32), "one"),
             c(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("Div", ["x", "s2"], ["a"]), helper.make_node("Erf", ["a"], ["b"]),
             helper.make_node("Add", ["b", "one"], ["c"]), helper.make_node("Mul", ["x", "c"], ["d"]),
             helper.make_node("Mul", ["d", "half"], ["y"])]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", T.FLOAT, [64, 96])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [64, 96])], inits)
    model = go.onnx_load(helper.make_model(graph), device="cpu")
    x = np.random.default_rng(5).standard_normal((64, 96)).astype(np.float32) * 4
    np.testing.assert_allclose(go.onnx_run(model, {"x": x})["y"], gelu64(x), rtol=1e-6, atol=1e-30)
    plan = next(iter(model._plans.values()))
    ops = [lib.ggml_graph_node(plan.graph, i).op for i in range(plan.n_nodes)]
    assert ops.count(lib.GGML_OP_MAP_CUSTOM1) == 1 and lib.GGML_OP_UNARY not in ops


def test_disabled_by_environment_uses_ggml_ops_with_the_same_numbers(tmp_path):
    code = (
        "import numpy as np, ggmlpy as g\n"
        "from ggmlpy import kernels\n"
        "assert kernels.get() is None\n"
        "x = np.linspace(-6, 6, 1001).reshape(-1, 1)\n"
        "t = g.ag_param(x)\n"
        "with g.with_grad_tape():\n"
        "    y = g.ag_gelu(t); loss = g.ag_sum(y)\n"
        "d = g.backward(loss)[t].numpy()\n"
        "ex = t.device_context.executor\n"
        "from ggmlpy.bindings import lib\n"
        "assert not any(p.op == lib.GGML_OP_MAP_CUSTOM1 or p.op == lib.GGML_OP_MAP_CUSTOM2 "
        "for c in ex.cache.values() for p in c.nodes)\n"
        f"np.save({str(tmp_path / 'out.npy')!r}, np.concatenate([y.numpy().ravel(), d.ravel()]))\n")
    env = dict(os.environ, GGMLPY_KERNELS="0")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    got = np.load(tmp_path / "out.npy")
    x = np.linspace(-6, 6, 1001).astype(np.float32)
    np.testing.assert_allclose(got[:1001], gelu64(x), rtol=2e-6, atol=1e-6)  # ggml's erff-based op
    np.testing.assert_allclose(got[1001:], gelu_grad64(x), rtol=2e-5, atol=1e-6)
    if K is not None:  # and the kernels agree with it
        y, d = gelu_eager(x)
        np.testing.assert_allclose(y, got[:1001], rtol=2e-6, atol=1e-6)
        np.testing.assert_allclose(d, got[1001:], rtol=2e-5, atol=1e-6)


@pytest.fixture
def no_prebuilt(monkeypatch, tmp_path):
    """The kernels as a source checkout has them: nothing prebuilt (an installed wheel has every level's),
    so they come from the compiler."""
    monkeypatch.setattr(kernel_loader, "PREBUILT", tmp_path / "no-prebuilt-kernels")


def test_without_a_compiler_get_returns_none_and_logs_why(monkeypatch, caplog, no_prebuilt):
    monkeypatch.setattr(kernel_loader, "_state", {"declared": kernel_loader._state.get("declared", False)})
    monkeypatch.setattr(kernel_loader, "_enabled", [True])  # as by default, whatever GGMLPY_KERNELS says
    monkeypatch.setenv("CC", "")
    monkeypatch.setattr(kernel_loader.shutil, "which", lambda name: None)
    with caplog.at_level("INFO", logger="ggmlpy.kernels"):
        assert kernels.get() is None
        assert kernels.get() is None
    assert sum("no C compiler" in r.getMessage() for r in caplog.records) == 1  # said once


def test_a_failing_compiler_is_reported_and_leaves_nothing_behind(monkeypatch, caplog, tmp_path, no_prebuilt):
    monkeypatch.setattr(kernel_loader, "_state", {"declared": kernel_loader._state.get("declared", False)})
    monkeypatch.setattr(kernel_loader, "_enabled", [True])
    monkeypatch.setenv("GGMLPY_CACHE_DIR", str(tmp_path))
    fake = tmp_path / "badcc"
    fake.write_text("#!/bin/sh\necho 'cc: error: nope' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    with caplog.at_level("WARNING", logger="ggmlpy.kernels"):
        assert kernels.get() is None
    assert any("nope" in r.getMessage() for r in caplog.records)
    assert list((tmp_path / "kernels").iterdir()) == []  # the temporary file was removed


@needs_kernels
def test_the_library_is_cached_by_source_compiler_and_flags():
    if kernels.origin().startswith("prebuilt"):  # an installed wheel's, named by the digest of the same inputs
        assert K.path.parent == kernel_loader.PREBUILT / kernels.isa_level() and K.path.name.startswith("kernels-")
        return
    assert K.path.parent.name == "kernels" and K.path.name.startswith("kernels-")
    # no half-written copy of this library left (other processes may be compiling other sources)
    assert K.path.exists() and not list(K.path.parent.glob(f"tmp-{K.path.stem}-*"))


# -- products in any orientation (gemm.c over OpenBLAS) ------------------------------------------------
needs_gemm = pytest.mark.skipif(K is None or K.gemm is None, reason="no OpenMP/sequential OpenBLAS for gemm.c")


def on_cpu(build, arrays, threads, view_rows=None):
    """build(ctx, *tensors) on numpy arrays shaped [d3, d2, ne1, ne0] (ggml's order reversed),
    computed by ggml's CPU with `threads`; view_rows: read the first array through a view of its
    first view_rows rows (a leading dimension past ne0)."""
    from ggmlpy.bindings import ffi
    params = ffi.new("struct ggml_init_params *", {"mem_size": 1 << 24, "mem_buffer": ffi.NULL, "no_alloc": False})
    ctx = lib.ggml_init(params[0])
    ne = lambda x: (*x.shape[::-1], *(1,) * (4 - x.ndim))  # noqa: E731
    try:
        ts = []
        for x in arrays:
            t = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, *ne(x))
            ffi.memmove(t.data, np.ascontiguousarray(x, np.float32).tobytes(), x.size * 4)
            ts.append(t)
        if view_rows is not None:
            a = ts[0]
            ts[0] = lib.ggml_view_4d(ctx, a, view_rows, a.ne[1], a.ne[2], a.ne[3], a.nb[1], a.nb[2], a.nb[3], 0)
        c = build(ctx, *ts)
        n = int(lib.ggml_nbytes(c))
        ffi.buffer(c.data, n)[:] = b"\xff" * n  # NaN: every output element must be written
        graph = lib.ggml_new_graph(ctx)
        lib.ggml_build_forward_expand(graph, c)
        assert lib.ggml_graph_compute_with_ctx(ctx, graph, threads) == lib.GGML_STATUS_SUCCESS
        shape = [int(c.ne[i]) for i in range(4)][::-1]
        out = np.frombuffer(ffi.buffer(c.data, 4 * int(np.prod(shape))), np.float32).reshape(shape).copy()
        return out.reshape(out.shape[4 - max(x.ndim for x in arrays):])
    finally:
        lib.ggml_free(ctx)


def gemm_on_cpu(A, B, ta, tb, threads, view_rows=None):
    def build(ctx, a, b):
        c = K.gemm(ctx, a, b, ta, tb)
        assert c.op == lib.GGML_OP_CUSTOM
        return c
    return on_cpu(build, [A, B], threads, view_rows)


def colmajor(x):
    """The column-major matrices a [.., ne1, ne0] array holds, as numpy matrices."""
    return np.swapaxes(x, -1, -2)


@needs_gemm
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("m,n,k,batch_a,batch_b", [
    (5, 7, 3, (1, 1), (1, 1)), (64, 64, 32, (2, 4), (2, 4)), (33, 100, 17, (1, 1), (2, 3)),
    (40, 9, 70, (1, 2), (1, 2)), (100, 3, 5, (1, 1), (1, 1)), (8, 8, 8, (1, 3), (2, 3))])
def test_gemm_every_orientation_batch_broadcast_and_thread_count(ta, tb, m, n, k, batch_a, batch_b):
    rng = np.random.default_rng(m * n + k)
    A = rng.standard_normal((*batch_a, *((m, k) if ta else (k, m)))).astype(np.float32)
    B = rng.standard_normal((*batch_b, *((k, n) if tb else (n, k)))).astype(np.float32)
    opa = colmajor(A).swapaxes(-1, -2) if ta else colmajor(A)
    opb = colmajor(B).swapaxes(-1, -2) if tb else colmajor(B)
    ref = colmajor(opa.astype(np.float64) @ opb.astype(np.float64))
    for threads in (1, 2, 3):
        out = gemm_on_cpu(A, B, ta, tb, threads)
        assert out.shape == ref.shape
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@needs_gemm
def test_gemm_reads_a_view_through_its_leading_dimension():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((2, 6, 10)).astype(np.float32)  # 2 batches of 10 x 6, viewed as 7 x 6
    B = rng.standard_normal((2, 5, 6)).astype(np.float32)
    ref = colmajor(colmajor(A[..., :7]) @ colmajor(B))
    np.testing.assert_allclose(gemm_on_cpu(A, B, 0, 0, 2, view_rows=7), ref, rtol=1e-5, atol=1e-5)


@needs_gemm
@pytest.mark.parametrize("threads", [1, 3])
def test_adopt_turns_ggml_products_into_gemm_nodes_with_the_same_values(threads):
    """MUL_MAT and OUT_PROD nodes (also of a transposed view, as ggml's backward makes them)
    become gemm nodes computing the same product; an operand BLAS cannot read stays ggml's."""
    from ggmlpy.bindings import ffi
    rng = np.random.default_rng(5)
    A = rng.standard_normal((3, 7, 9)).astype(np.float32)   # ne [9, 7, 3]
    B = rng.standard_normal((3, 5, 9)).astype(np.float32)   # ne [9, 5, 3]
    C = rng.standard_normal((3, 5, 7)).astype(np.float32)   # ne [7, 5, 3]
    kinds = {}

    def build(ctx, a, b, c):
        t = lib.ggml_transpose
        out = [lib.ggml_mul_mat(ctx, a, b),                          # t(A) B: [7, 5, 3]
               lib.ggml_out_prod(ctx, a, t(ctx, c)),                 # A C: [9, 5, 3]
               lib.ggml_out_prod(ctx, lib.ggml_cont(ctx, t(ctx, c)), a),  # t(C) t(A): [5, 9, 3]
               lib.ggml_mul_mat(ctx, lib.ggml_cont(ctx, t(ctx, b)), t(ctx, c)),   # B t(C): [9, 7, 3]
               # A C again, through a permuted view: no transposed source to read, so it stays ggml's
               lib.ggml_out_prod(ctx, a, lib.ggml_permute(ctx, c, 1, 0, 2, 3))]
        assert kernels.adopt(K, ctx) == 4
        kinds.update(ops=[x.op for x in out])
        flat = [lib.ggml_reshape_1d(ctx, x, int(lib.ggml_nelements(x))) for x in out]
        cat = flat[0]
        for x in flat[1:]:
            cat = lib.ggml_concat(ctx, cat, x, 0)
        return cat

    got = on_cpu(build, [A, B, C], threads).ravel()
    assert kinds["ops"] == [lib.GGML_OP_CUSTOM] * 4 + [lib.GGML_OP_OUT_PROD]
    a, b, c = (colmajor(x).astype(np.float64) for x in (A, B, C))
    tr = lambda x: x.swapaxes(-1, -2)  # noqa: E731
    refs = [tr(a) @ b, a @ c, tr(c) @ tr(a), b @ tr(c), a @ c]
    ref = np.concatenate([colmajor(r).ravel() for r in refs])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


needs_conv = pytest.mark.skipif(K is None or K.conv2d is None, reason="no conv.c (no OpenMP/sequential OpenBLAS)")


@needs_conv
@pytest.mark.parametrize("image,kernel,stride,pad,dilation", [
    ((7, 6, 3, 2), (3, 3), (1, 1), (1, 1), (1, 1)), ((8, 5, 2, 3), (2, 4), (2, 3), (0, 1), (1, 1)),
    ((9, 9, 1, 1), (3, 2), (2, 2), (2, 0), (2, 1)), ((4, 4, 16, 32), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((5, 1, 4, 3), (2, 1), (1, 1), (0, 0), (1, 1))])
def test_adopted_im2col_back_is_ggml_s_to_the_bit(image, kernel, stride, pad, dilation):
    """conv.c's IM2COL_BACK (a convolution's input gradient) sums in ggml's order: the same bits,
    for strides, paddings and dilations, on 1 and 3 threads."""
    from ggmlpy.bindings import ffi
    W, H, C, N = image
    (kw, kh), (s0, s1), (p0, p1), (d0, d1) = kernel, stride, pad, dilation
    OW, OH = (W + 2 * p0 - d0 * (kw - 1) - 1) // s0 + 1, (H + 2 * p1 - d1 * (kh - 1) - 1) // s1 + 1
    rng = np.random.default_rng(W * H + C)
    grad = rng.standard_normal((N, OH, OW, C * kh * kw)).astype(np.float32)
    kern = np.zeros((1, C, kh, kw), np.float32)  # read for its shape only

    def build(adopted):
        def b(ctx, gr, k):
            out = lib.ggml_im2col_back(ctx, gr, k, ffi.new("int64_t[4]", [W, H, C, N]), s0, s1, p0, p1, d0, d1, True)
            assert not adopted or (kernels.adopt(K, ctx) == 1 and out.op == lib.GGML_OP_CUSTOM)
            return out
        return b
    for threads in (1, 3):
        want = on_cpu(build(False), [grad, kern], threads)
        np.testing.assert_array_equal(on_cpu(build(True), [grad, kern], threads), want)
    # and it is the gradient of im2col: <im2col(x), g> = <x, im2col_back(g)>
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    col = on_cpu(lambda ctx, k, xt: lib.ggml_im2col(ctx, k, xt, s0, s1, p0, p1, d0, d1, True, lib.GGML_TYPE_F32),
                 [kern, x], 1)
    np.testing.assert_allclose(np.vdot(col.astype(np.float64), grad), np.vdot(x.astype(np.float64), want), rtol=1e-5)


def test_gemm_is_off_with_a_pthreads_openblas(monkeypatch, caplog):
    """A pthreads OpenBLAS would start its own threads inside each of ggml's: no products then."""
    class FakeLib:
        def ggmlpy_blas_parallel(self):
            return 1
    class FakeFFI:
        def dlopen(self, path):
            return FakeLib()
    monkeypatch.setattr(kernel_loader, "ffi", FakeFFI())
    monkeypatch.setattr(kernel_loader, "_build", lambda *a, **k: "x.so")
    with caplog.at_level("INFO", logger="ggmlpy.kernels"):
        assert kernel_loader._load_optional("cc", "gemm") is None
    assert any("pthreads" in r.getMessage() for r in caplog.records)


# -- layer norm's backward -----------------------------------------------------------------------
def layer_norm_grad64(gr, x, eps):
    """r (g - mean g - y mean(g y)) per column (axis 0) in float64."""
    x, gr = np.asarray(x, np.float64), np.asarray(gr, np.float64)
    c = x - x.mean(0)
    r = 1.0 / np.sqrt((c * c).mean(0) + eps)
    y = c * r
    return r * (gr - gr.mean(0) - y * (gr * y).mean(0))


@needs_kernels
@pytest.mark.parametrize("d,cols,eps", [(128, 64, 1e-5), (37, 5, 1e-5), (16, 1, 1e-3), (3, 300, 0.1), (1000, 7, 1e-5)])
def test_layer_norm_back_kernel_against_float64(d, cols, eps):
    rng = np.random.default_rng(d + cols)
    x = (rng.standard_normal((d, cols)) * 3 + 5).astype(np.float32)  # offset: the mean must not cancel
    gr = rng.standard_normal((d, cols)).astype(np.float32)
    ref = layer_norm_grad64(gr, x, eps)
    for threads in (1, 2, 3):
        got = on_cpu(lambda ctx, a, b: K.layer_norm_back(ctx, a, b, eps), [gr.T, x.T], threads).T
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-6 * np.abs(ref).max())
    t = g.ag_param(x)  # and through ag_layer_norm's backward
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_mul(g.ag_layer_norm(t, eps=eps), g.ag_tensor(gr)))
    np.testing.assert_allclose(g.backward(loss)[t].numpy(), ref, rtol=2e-5, atol=2e-6 * np.abs(ref).max())


@needs_kernels
def test_layer_norm_backward_runs_the_kernel_eagerly_and_compiled():
    rng = np.random.default_rng(3)
    x, w = g.ag_tensor(rng.standard_normal((32, 8, 2))), g.ag_param(rng.standard_normal((32, 32)))
    g.ag_tensor(np.zeros((1, 1))).device_context.executor.clear()
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_mul(g.ag_layer_norm(g.ag_matmul(w, x)), x))
    eager = g.backward(loss)[w].numpy()
    assert any(p.op == lib.GGML_OP_MAP_CUSTOM2 and p.src[0].ne[0] == 32 and p.src[1].ne[1] == 8
               for p in eager_graph_nodes())
    w0 = w.numpy()
    step = g.ag_compile(lambda a: g.ag_sum(g.ag_mul(g.ag_layer_norm(g.ag_matmul(w, a)), a)), [x],
                        optimizer=g.optimizer_sgd([w], lr=1.0))
    step(x)
    np.testing.assert_allclose(w0 - w.numpy(), eager, rtol=1e-5, atol=1e-6)


@needs_gemm
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_of_an_empty_inner_dimension_is_zero(ta, tb):
    A = np.zeros((5, 0) if ta else (0, 5), np.float32)  # op(a): 5 x 0
    B = np.zeros((0, 3) if tb else (3, 0), np.float32)  # op(b): 0 x 3
    out = gemm_on_cpu(A, B, ta, tb, 2)
    assert out.shape == (3, 5) and not out.any()


@needs_gemm
def test_a_compiled_gpt_step_multiplies_without_transposed_copies():
    """Every product of a small GPT's forward and backward is gemm.c's (no MUL_MAT, no OUT_PROD),
    and the only copies left are the heads' permutes and the inputs' casts."""
    rng = np.random.default_rng(0)
    model = g.ag_gpt(vocab_size=11, d_model=16, n_heads=2, n_layers=1, context=8)
    idx = g.ag_tensor(rng.integers(0, 11, size=(8, 3)), dtype="i32")
    tgt = g.ag_tensor(rng.integers(0, 11, size=(8, 3)), dtype="i32")
    step = g.ag_compile(lambda x, y: model.loss(x, y), [idx, tgt],
                        optimizer=g.optimizer_adamw(model.parameters(), lr=1e-3))
    step(idx, tgt)
    gr = next(iter(step.plans.values())).builder.graph
    nodes = [lib.ggml_graph_node(gr, i) for i in range(lib.ggml_graph_n_nodes(gr))]
    ops = [p.op for p in nodes]
    assert lib.GGML_OP_MUL_MAT not in ops and lib.GGML_OP_OUT_PROD not in ops
    assert ops.count(lib.GGML_OP_CUSTOM) >= 12  # 6 forward products, two gradients each
    transposes = [p for p in nodes if p.op == lib.GGML_OP_CONT and p.src[0].op == lib.GGML_OP_TRANSPOSE]
    assert not transposes


# -- convolution (conv.c over OpenBLAS) -----------------------------------------------------------------
needs_conv = pytest.mark.skipif(K is None or K.conv2d is None, reason="no OpenMP/sequential OpenBLAS for conv.c")


def conv_ref(x, W, stride, pads_b, pads_e, dil, groups):
    """NCHW convolution in float64, tap by tap over the zero-padded input."""
    N, C, H, Wd = x.shape
    M, Cg, KH, KW = W.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads_b[0], pads_e[0]), (pads_b[1], pads_e[1])))
    OH = (xp.shape[2] - dil[0] * (KH - 1) - 1) // stride[0] + 1
    OW = (xp.shape[3] - dil[1] * (KW - 1) - 1) // stride[1] + 1
    out = np.zeros((N, M, OH, OW))
    Mg = M // groups
    for g_ in range(groups):
        for kh in range(KH):
            for kw in range(KW):
                h0, w0 = kh * dil[0], kw * dil[1]
                patch = xp[:, g_ * Cg:(g_ + 1) * Cg, h0:h0 + stride[0] * (OH - 1) + 1:stride[0],
                           w0:w0 + stride[1] * (OW - 1) + 1:stride[1]]
                out[:, g_ * Mg:(g_ + 1) * Mg] += np.einsum("nchw,mc->nmhw", patch, W[g_ * Mg:(g_ + 1) * Mg, :, kh, kw])
    return out


def conv_out_hw(in_hw, k_hw, stride, pads_b, pads_e, dil) -> tuple:
    """A convolution's output planes (OH, OW)."""
    return tuple((n + p + q - d * (k - 1) - 1) // s + 1
                 for n, k, s, p, q, d in zip(in_hw, k_hw, stride, pads_b, pads_e, dil))


def f32_tensor(ctx, arr, *ne):
    """A new f32 tensor of ggml shape `ne` in ctx (an allocating context) holding numpy array arr."""
    from ggmlpy.bindings import ffi
    t = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, *ne)
    ffi.memmove(t.data, np.ascontiguousarray(arr, np.float32).tobytes(), arr.nbytes)
    return t


def conv_on_cpu(x, W, stride, pads_b, pads_e, dil, groups, threads, bias=None, residual=None, relu=False, block=0,
                packed=False, pixels=0, weights_at=None):
    """K.conv2d (or, packed, K.conv2d_packed; with pixels = 1, 2 or 3, K.conv2d_pixels with that many
    vectors of pixels a block) of numpy arrays on ggml's CPU backend (one graph). weights_at (packed):
    the packed weights' address modulo 64 bytes (a view into a larger tensor)."""
    from ggmlpy.bindings import ffi
    N, C, H, Wd = x.shape
    M, Cg, KH, KW = W.shape
    OH, OW = conv_out_hw((H, Wd), (KH, KW), stride, pads_b, pads_e, dil)
    params = ffi.new("struct ggml_init_params *", {"mem_size": 1 << 26, "mem_buffer": ffi.NULL, "no_alloc": False})
    ctx = lib.ggml_init(params[0])

    def tensor(arr, *ne):
        return f32_tensor(ctx, arr, *ne)
    try:
        xt = tensor(x, Wd, H, C, N)
        bt = None if bias is None else lib.ggml_reshape_1d(ctx, tensor(bias, M, 1, 1, 1), M)
        rt = None if residual is None else tensor(residual, OW, OH, M, N)
        if pixels:
            wp = K.pack_conv_pixels(W, groups, pixels)
            y = K.conv2d_pixels(ctx, xt, tensor(wp, *wp.shape[::-1], 1), M, (KH, KW), stride, pads_b, dil, (OH, OW),
                                groups, bt, rt, relu, pixels)
        elif packed:
            wp = K.pack_conv(W, groups)
            wt = tensor(wp, *wp.shape[::-1], 1)
            if weights_at is not None:
                big = lib.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_F32, wp.size + 16)
                skip = (weights_at - int(ffi.cast("uintptr_t", big.data))) % 64
                wt = lib.ggml_view_4d(ctx, big, *wp.shape[::-1], 1, wt.nb[1], wt.nb[2], wt.nb[3], skip)
                ffi.memmove(wt.data, wp.tobytes(), wp.nbytes)
                assert int(ffi.cast("uintptr_t", wt.data)) % 64 == weights_at
            y = K.conv2d_packed(ctx, xt, wt, M, (KH, KW), stride, pads_b, dil, (OH, OW), groups, bt, rt, relu)
        else:
            wt = lib.ggml_reshape_2d(ctx, tensor(W, KW, KH, Cg, M), KW * KH * Cg, M)
            y = K.conv2d(ctx, xt, wt, (KH, KW), stride, pads_b, dil, (OH, OW), groups, bt, rt, relu, block)
        assert y.op == lib.GGML_OP_CUSTOM and [int(y.ne[i]) for i in range(4)] == [OW, OH, M, N]
        graph = lib.ggml_new_graph(ctx)
        lib.ggml_build_forward_expand(graph, y)
        assert lib.ggml_graph_compute_with_ctx(ctx, graph, threads) == lib.GGML_STATUS_SUCCESS
        return np.frombuffer(ffi.buffer(y.data, 4 * N * M * OH * OW), np.float32).reshape(N, M, OH, OW).copy()
    finally:
        lib.ggml_free(ctx)


CONV_CASES = [  # x shape, W shape, stride, pads begin, pads end, dilation, groups
    ((1, 3, 9, 7), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 11, 10), (6, 4, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),
    ((1, 3, 12, 13), (4, 3, 7, 7), (2, 2), (3, 3), (3, 3), (1, 1), 1),   # ResNet's stem
    ((3, 5, 8, 9), (7, 5, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1),     # 1x1: the input is the patch matrix
    ((2, 5, 9, 8), (7, 5, 1, 1), (2, 2), (0, 0), (0, 0), (1, 1), 1),     # 1x1 stride 2: copied
    ((1, 2, 10, 9), (3, 2, 3, 2), (3, 2), (2, 0), (0, 1), (1, 1), 1),    # asymmetric pads and strides
    ((2, 3, 9, 11), (4, 3, 3, 3), (1, 1), (2, 2), (2, 2), (2, 3), 1),    # dilations
    ((1, 2, 3, 3), (2, 2, 5, 5), (1, 1), (4, 4), (4, 4), (1, 1), 1),     # taps wholly in the padding
    ((2, 6, 7, 8), (4, 3, 3, 3), (1, 2), (1, 1), (1, 1), (1, 1), 2),     # groups
    ((1, 4, 6, 7), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 4),     # depthwise
    ((2, 3, 1, 17), (4, 3, 1, 5), (1, 2), (0, 2), (0, 2), (1, 1), 1),    # 1-D (H = 1)
    ((1, 3, 299, 299), (4, 3, 3, 3), (2, 2), (0, 0), (0, 0), (1, 1), 1),  # Inception v3's stem: blocks of 65 rows
    ((1, 2, 300, 5), (3, 2, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),   # narrow planes: blocks of hundreds of rows
]


@needs_conv
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x{}w{}s{}p{}{}d{}g{}".format(*c))
@pytest.mark.parametrize("block", [0, 16])  # 16 pixels: blocks that start and end inside output rows
def test_conv_every_geometry_block_and_thread_count(case, block):
    xs, ws, stride, pb, pe, dil, groups = case
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = rng.standard_normal(xs).astype(np.float32)
    W = rng.standard_normal(ws).astype(np.float32)
    ref = conv_ref(x, W, stride, pb, pe, dil, groups)
    for threads in (1, 2, 3):
        out = conv_on_cpu(x, W, stride, pb, pe, dil, groups, threads, block=block)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@needs_conv
@pytest.mark.parametrize("bias,residual,relu", [(1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_conv_bias_residual_and_relu(bias, residual, relu, threads):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 9, 10)).astype(np.float32)
    W = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    ref = conv_ref(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1)
    b = rng.standard_normal(6).astype(np.float32) if bias else None
    r = rng.standard_normal(ref.shape).astype(np.float32) if residual else None
    want = ref + (b.reshape(1, -1, 1, 1) if bias else 0) + (r if residual else 0)
    want = np.maximum(want, 0) if relu else want
    out = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, threads, b, r, bool(relu), block=32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    if relu:
        assert out.min() == 0.0


@needs_conv
def test_conv_splits_output_channels_when_there_are_fewer_blocks_than_threads():
    """One image, one block (a deep layer): each thread builds the patches and computes its channels."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 5, 5)).astype(np.float32)
    W = rng.standard_normal((37, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(37).astype(np.float32)
    ref = conv_ref(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1) + b.reshape(1, -1, 1, 1)
    for threads in (2, 3, 4, 40):  # 40 threads: some compute no channel at all
        out = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, threads, bias=b, relu=False)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def maxpool_ref(x, kernel, stride, pad, out_hw):
    """Max over each window's cells inside the input (-FLT_MAX for a window with none)."""
    N, C, H, W = x.shape
    out = np.full((N, C) + tuple(out_hw), -np.finfo(np.float32).max, np.float32)
    for oh in range(out_hw[0]):
        for ow in range(out_hw[1]):
            h0, w0 = oh * stride[0] - pad[0], ow * stride[1] - pad[1]
            cells = x[:, :, max(h0, 0):max(h0 + kernel[0], 0), max(w0, 0):max(w0 + kernel[1], 0)]
            if cells.size:
                out[:, :, oh, ow] = cells.max(axis=(2, 3))
    return out


@needs_conv
@pytest.mark.parametrize("xs,kernel,stride,pad,out_hw", [
    ((1, 3, 112, 112), (3, 3), (2, 2), (1, 1), (56, 56)),   # ResNet's
    ((2, 5, 9, 8), (2, 3), (1, 2), (0, 1), (8, 4)),
    ((1, 2, 7, 7), (3, 3), (3, 3), (2, 2), (3, 3)),         # windows cut by the padding
    ((1, 2, 5, 5), (2, 2), (2, 2), (0, 0), (4, 4)),         # a window wholly past the input's end
    ((1, 1, 5, 6), (5, 6), (1, 1), (0, 0), (1, 1)),          # global
    ((3, 2, 1, 11), (1, 3), (1, 2), (0, 1), (1, 6)),         # 1-D
    ((1, 2, 4, 4), (2, 2), (2, 2), (2, 2), (3, 3)),          # a window wholly in the leading padding
])
def test_maxpool_every_geometry_and_thread_count(xs, kernel, stride, pad, out_hw):
    from ggmlpy.bindings import ffi
    x = np.random.default_rng(sum(xs)).standard_normal(xs).astype(np.float32)
    want = maxpool_ref(x, kernel, stride, pad, out_hw)
    for threads in (1, 2, 3):
        params = ffi.new("struct ggml_init_params *", {"mem_size": 1 << 24, "mem_buffer": ffi.NULL, "no_alloc": False})
        ctx = lib.ggml_init(params[0])
        try:
            t = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, xs[3], xs[2], xs[1], xs[0])
            ffi.memmove(t.data, x.tobytes(), x.nbytes)
            y = K.maxpool2d(ctx, t, kernel, stride, pad, out_hw)
            graph = lib.ggml_new_graph(ctx)
            lib.ggml_build_forward_expand(graph, y)
            assert lib.ggml_graph_compute_with_ctx(ctx, graph, threads) == lib.GGML_STATUS_SUCCESS
            got = np.frombuffer(ffi.buffer(y.data, want.nbytes), np.float32).reshape(want.shape)
            np.testing.assert_array_equal(got, want)
        finally:
            lib.ggml_free(ctx)


def maxpool_select_ref(x, kernel, stride, pad, out_hw):
    """maxpool_ref by conv.c's rule: each window's column maxima over its rows, then the maximum over
    its columns, each as `m = v if v > m else m` from the first cell (rows) or -FLT_MAX (columns), in
    order, so that of +0 and -0 the first is kept; NaN where any of the window's cells is NaN."""
    N, C, H, W = x.shape
    out = np.full((N, C) + tuple(out_hw), -np.finfo(np.float32).max, np.float32)
    for oh in range(out_hw[0]):
        rows = range(max(oh * stride[0] - pad[0], 0), min(oh * stride[0] - pad[0] + kernel[0], H))
        if not rows:
            continue
        col = x[:, :, rows[0]].copy()
        for h in rows[1:]:
            col = np.where(x[:, :, h] > col, x[:, :, h], col)
        col[np.isnan(x[:, :, rows]).any(axis=2)] = np.nan
        for ow in range(out_hw[1]):
            m = out[:, :, oh, ow]
            cols = range(max(ow * stride[1] - pad[1], 0), min(ow * stride[1] - pad[1] + kernel[1], W))
            for w in cols:
                m = np.where(col[:, :, w] > m, col[:, :, w], m)
            if cols:
                m[np.isnan(col[:, :, cols]).any(axis=2)] = np.nan
            out[:, :, oh, ow] = m
    return out


@needs_conv
@pytest.mark.parametrize("kernel,stride,pad", [((3, 3), (2, 2), (1, 1)), ((3, 3), (1, 1), (1, 1)), ((2, 2), (2, 2), (0, 0)),
                                               ((3, 2), (3, 1), (1, 0))])
def test_maxpool_wide_rows_with_nan_inf_and_signed_zeros(kernel, stride, pad):
    """Rows of 37 cells (two vectors of 16 and a tail) through the vector passes, batch 3, with NaN,
    +-inf and +-0 cells: the scalar rule's values bit for bit (maxpool_select_ref; NaN where a window
    holds one, wherever it is), on 1 to 3 threads."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 2, 11, 37)).astype(np.float32)
    x[0, 0, 0, :] = np.nan                                   # first rows: NaN columns
    x[0, 1, 5, 3::4] = np.nan                                # NaN cells inside windows
    x[1, 0, 2, 10:20] = np.inf
    x[1, 1, :, 30:] = -np.inf
    x[2, 0, 4:6, :] = 0.0
    x[2, 0, 4, ::2] = -0.0                                   # +0 and -0 in one window
    x[2, 1] = -np.abs(x[2, 1])
    x[2, 1, 3, 17] = -0.0
    out_hw = tuple((n + 2 * p - k) // s + 1 for n, k, s, p in zip((11, 37), kernel, stride, pad))
    want = maxpool_select_ref(x, kernel, stride, pad, out_hw)
    assert np.isnan(want).any() and np.isinf(want).any() and np.signbit(want[want == 0]).any()
    for threads in (1, 2, 3):
        got = on_cpu(lambda ctx, t: K.maxpool2d(ctx, t, kernel, stride, pad, out_hw), [x], threads)
        assert (np.isnan(got) == np.isnan(want)).all()
        np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])


# -- row kernels (rows.c) -----------------------------------------------------------------------------------
needs_rows = pytest.mark.skipif(K is None or K.layernorm is None, reason="no C compiler: rows.c is not loaded")


@needs_rows
@pytest.mark.parametrize("R,rows", [(256, 128), (7, 5), (33, 3), (1, 4), (1000, 2)])
@pytest.mark.parametrize("affine", ["none", "gamma", "beta", "both"])
def test_layernorm_against_float64(R, rows, affine):
    from ggmlpy.bindings import ffi
    rng = np.random.default_rng(R + rows)
    x = (rng.standard_normal((rows, R)) * 3 + 5).astype(np.float32)  # an offset: centring must be exact
    gamma = rng.standard_normal(R).astype(np.float32) if affine in ("gamma", "both") else None
    beta = rng.standard_normal(R).astype(np.float32) if affine in ("beta", "both") else None
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-3)
    want = want * (1 if gamma is None else gamma) + (0 if beta is None else beta)
    for threads in (1, 2, 3):
        params = ffi.new("struct ggml_init_params *", {"mem_size": 1 << 24, "mem_buffer": ffi.NULL, "no_alloc": False})
        ctx = lib.ggml_init(params[0])
        try:
            def tensor(a):
                t = lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F32, a.shape[-1], a.size // a.shape[-1])
                ffi.memmove(t.data, a.tobytes(), a.nbytes)
                return t if a.ndim == 2 else lib.ggml_reshape_1d(ctx, t, a.size)
            y = K.layernorm(ctx, tensor(x), None if gamma is None else tensor(gamma),
                            None if beta is None else tensor(beta), 1e-3)
            graph = lib.ggml_new_graph(ctx)
            lib.ggml_build_forward_expand(graph, y)
            assert lib.ggml_graph_compute_with_ctx(ctx, graph, threads) == lib.GGML_STATUS_SUCCESS
            got = np.frombuffer(ffi.buffer(y.data, x.nbytes), np.float32).reshape(x.shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        finally:
            lib.ggml_free(ctx)


@needs_conv
@pytest.mark.parametrize("n_out,k,t", [(100, 7, 3), (5, 33, 70), (64, 64, 64), (1, 9, 1)])  # rows or columns split
def test_linear_product_plus_bias(n_out, k, t):
    rng = np.random.default_rng(n_out + k + t)
    W = rng.standard_normal((k, n_out)).astype(np.float32)  # ONNX's (K, N): ggml [N, K]
    X = rng.standard_normal((t, k)).astype(np.float32)      # ggml [K, T]
    bias = rng.standard_normal(n_out).astype(np.float32)
    want = X.astype(np.float64) @ W + bias
    for threads in (1, 2, 3, 5):
        got = on_cpu(lambda ctx, w, x, b: K.linear(ctx, w, x, b), [W, X, bias], threads)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


needs_packed = pytest.mark.skipif(K is None or K.linear_packed is None,
                                  reason="no AVX2 or AVX-512 (or no conv.c): linear layers use OpenBLAS")


@needs_packed
@pytest.mark.parametrize("n_out,k,t", [
    (768, 256, 128),   # a transformer's projection
    (45, 1100, 250),   # row and column tails, K past one 512 block, columns past one 240 block
    (1, 3, 1), (33, 7, 13), (100, 64, 2)])  # fewer column panels than threads: the weight panels split
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_with_packed_weights(n_out, k, t, with_bias):
    rng = np.random.default_rng(n_out * k + t)
    W = rng.standard_normal((k, n_out)).astype(np.float32)
    X = rng.standard_normal((t, k)).astype(np.float32)
    bias = rng.standard_normal(n_out).astype(np.float32)
    want = X.astype(np.float64) @ W + (bias if with_bias else 0)
    wp = K.pack_linear(W)
    assert wp.shape == (-(-n_out // K.packed_rows), k, K.packed_rows)
    arrays = [wp, X] + ([bias] if with_bias else [])
    for threads in (1, 2, 3):
        got = on_cpu(lambda ctx, w, x, *b: K.linear_packed(ctx, w, x, n_out, *b), arrays, threads).reshape(t, n_out)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * np.abs(want).max())


@needs_packed
@pytest.mark.parametrize("t", range(1, 14))
def test_linear_with_packed_weights_every_partial_panel_of_columns_keeps_nan(t):
    """A last panel of 1..11 columns (a batch of fewer than 12 rows: ResNet's classifier at batch 1
    and 8) computes only those, one kernel a width, through K past one block of 512 rows and a
    partial panel of 32 weight rows; a NaN in one input row makes that output row NaN, no other."""
    rng = np.random.default_rng(t)
    W = rng.standard_normal((600, 40)).astype(np.float32)
    X = rng.standard_normal((t, 600)).astype(np.float32)
    X[t - 1, 550] = np.nan
    bias = rng.standard_normal(40).astype(np.float32)
    want = X.astype(np.float64) @ W + bias
    for threads in (1, 2, 3):
        got = on_cpu(lambda ctx, w, x, b: K.linear_packed(ctx, w, x, 40, b), [K.pack_linear(W), X, bias],
                     threads).reshape(t, 40)
        assert np.isnan(got[t - 1]).all() and np.isfinite(got[:t - 1]).all()
        np.testing.assert_allclose(got[:t - 1], want[:t - 1], rtol=1e-5, atol=2e-5 * np.abs(want[:t - 1]).max(initial=1))


@needs_packed
@pytest.mark.parametrize("n_out,k,t", [
    (1024, 256, 128),  # a transformer's first feed-forward layer
    (45, 1100, 25),    # row and column tails, K past one 512 block: the GELU after the last block only
    (1, 3, 1), (33, 7, 13), (100, 64, 2)])
def test_linear_with_packed_weights_and_gelu(n_out, k, t):
    """The GELU applied in the product's node: every element of every block (tails, 1-3 threads),
    the tails of GELU's range (large |x|), NaN and +-inf through the product."""
    rng = np.random.default_rng(n_out + k + t)
    W = rng.standard_normal((k, n_out)).astype(np.float32)
    X = rng.standard_normal((t, k)).astype(np.float32)
    bias = (rng.standard_normal(n_out) * 8).astype(np.float32)  # outputs far out in both tails
    if t > 2:
        X[1, 0] = np.nan
        X[2, 0] = np.inf
    with np.errstate(invalid="ignore"):
        lin = X.astype(np.float64) @ W + bias
    fin = np.isfinite(lin)
    want = gelu64(np.where(fin, lin, 0))
    wp = K.pack_linear(W)
    for threads in (1, 2, 3):
        got = on_cpu(lambda ctx, w, x, b: K.linear_packed(ctx, w, x, n_out, b, gelu=True), [wp, X, bias],
                     threads).reshape(t, n_out)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=2e-5 * np.abs(lin[fin]).max())
        np.testing.assert_array_equal(np.isnan(got), np.isnan(lin))  # NaN stays NaN
        assert np.all(got[lin == np.inf] == np.inf)
        far = lin < -20  # -inf too: -0, never NaN (-inf * 0)
        assert np.all(got[far] == 0) and np.all(np.signbit(got[far]))


@needs_packed
@pytest.mark.parametrize("n_out,k,t", [
    (256, 1024, 128),  # a transformer's second feed-forward layer: four blocks of K before the residual
    (45, 1100, 25), (1, 3, 1), (33, 7, 13), (100, 64, 2)])
@pytest.mark.parametrize("with_bias,gelu", [(True, False), (False, False), (True, True)])
def test_linear_with_packed_weights_and_a_residual(n_out, k, t, with_bias, gelu):
    """X @ W (+ bias) + R in the product's node, R added once to each finished block (tails, 1-3
    threads), then GELU when asked."""
    rng = np.random.default_rng(n_out + 2 * k + t)
    W = rng.standard_normal((k, n_out)).astype(np.float32)
    X = rng.standard_normal((t, k)).astype(np.float32)
    bias = rng.standard_normal(n_out).astype(np.float32)
    R = (rng.standard_normal((t, n_out)) * 10).astype(np.float32)
    want = X.astype(np.float64) @ W + (bias if with_bias else 0) + R
    if gelu:
        want = gelu64(want)
    arrays = [K.pack_linear(W), X] + ([bias] if with_bias else []) + [R]

    def build(ctx, w, x, *rest):
        return K.linear_packed(ctx, w, x, n_out, rest[0] if with_bias else None, gelu=gelu, residual=rest[-1])
    for threads in (1, 2, 3):
        got = on_cpu(build, arrays, threads).reshape(t, n_out)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * np.abs(want).max())


@needs_packed
@pytest.mark.parametrize("parts,d,k,t", [(3, 256, 256, 128), (3, 192, 192, 197), (3, 64, 300, 13), (2, 32, 5, 1),
                                         (5, 96, 40, 25)])
def test_linear_with_packed_weights_split_into_parts(parts, d, k, t):
    """The result's rows written as `parts` matrices [d, t] one after another (an attention's stacked
    q, k, v projection): every element, tails of t and K, 1-3 threads."""
    rng = np.random.default_rng(parts * d + k + t)
    W = rng.standard_normal((k, parts * d)).astype(np.float32)
    X = rng.standard_normal((t, k)).astype(np.float32)
    bias = rng.standard_normal(parts * d).astype(np.float32)
    want = (X.astype(np.float64) @ W + bias).reshape(t, parts, d).transpose(1, 0, 2)
    for threads in (1, 2, 3):
        got = on_cpu(lambda ctx, w, x, b: K.linear_packed(ctx, w, x, parts * d, b, split=d), [K.pack_linear(W), X, bias],
                     threads)
        assert got.shape == (parts, t, d)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * np.abs(want).max())


needs_packed_conv = pytest.mark.skipif(K is None or K.conv2d_packed is None,
                                       reason="no AVX2 or AVX-512 (or no conv.c): convolutions use OpenBLAS")
needs_pixel_conv = pytest.mark.skipif(K is None or K.conv2d_pixels is None,
                                      reason="no AVX2 or AVX-512 (or no conv.c): no pixel-major convolutions")


@needs_packed_conv
@pytest.mark.parametrize("case", CONV_CASES + [((1, 40, 9, 9), (130, 40, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)],
                         ids=lambda c: "x{}w{}s{}p{}{}d{}g{}".format(*c))
def test_packed_conv_every_geometry_and_thread_count(case):
    """conv.c's AVX-512 convolution: strips of 12 pixels (tails), panels of 32 channels (tails, groups)."""
    xs, ws, stride, pb, pe, dil, groups = case
    rng = np.random.default_rng(sum(xs) + sum(ws) + 1)
    x = rng.standard_normal(xs).astype(np.float32)
    W = rng.standard_normal(ws).astype(np.float32)
    bias = rng.standard_normal(ws[0]).astype(np.float32)
    ref = conv_ref(x, W, stride, pb, pe, dil, groups) + bias.reshape(1, -1, 1, 1)
    r = rng.standard_normal(ref.shape).astype(np.float32)
    for threads in (1, 2, 3):
        out = conv_on_cpu(x, W, stride, pb, pe, dil, groups, threads, bias=bias, packed=True)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        out = conv_on_cpu(x, W, stride, pb, pe, dil, groups, threads, bias=bias, residual=r, relu=True, packed=True)
        want = np.maximum(ref + r, 0)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@needs_packed_conv
@pytest.mark.parametrize("width", list(range(1, 14)) + [97])
def test_packed_conv_partial_strip_of_every_width(width):
    """A plane's last strip of 1..11 pixels computes only those (one kernel a width), through more
    than one block of 256 patch rows (partial sums in the tiles), channel panels with a tail; the
    two images' strips in one run."""
    rng = np.random.default_rng(width)
    x = rng.standard_normal((2, 30, 1, width)).astype(np.float32)  # 270 patch rows
    W = rng.standard_normal((45, 30, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(45).astype(np.float32)
    ref = conv_ref(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1) + bias.reshape(1, -1, 1, 1)
    r = rng.standard_normal(ref.shape).astype(np.float32)
    for threads in (1, 2, 3):
        out = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, threads, bias=bias, residual=r, relu=True,
                          packed=True)
        want = np.maximum(ref + r, 0)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@needs_packed_conv
@pytest.mark.parametrize("weights_at", [0, 32])
def test_packed_conv_weights_aligned_or_not(weights_at):
    """Weights that ggml placed 32 bytes past a cache line (its tensors' alignment) are read from an
    aligned copy, a block of 256 rows at a time: the same numbers as aligned ones."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((2, 40, 5, 7)).astype(np.float32)  # 360 patch rows: two blocks
    W = rng.standard_normal((70, 40, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(70).astype(np.float32)
    ref = conv_ref(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1) + bias.reshape(1, -1, 1, 1)
    for threads in (1, 2):
        out = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, threads, bias=bias, packed=True,
                          weights_at=weights_at)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@needs_packed_conv
def test_packed_conv_images_past_one_run_of_strips():
    """The images' strips one after another are cut into runs (what a pass keeps in L2: 2 panels'
    tiles and 256 patch rows a strip, 34 strips in 512 KB): two images of 2025 pixels are 2 x 169
    strips (the last of 9 pixels), runs that end inside an image and start in one."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 30, 45, 45)).astype(np.float32)
    W = rng.standard_normal((40, 30, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    ref = conv_ref(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1) + bias.reshape(1, -1, 1, 1)
    for threads in (1, 2):
        out = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, threads, bias=bias, relu=True, packed=True)
        want = np.maximum(ref, 0)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


PIXEL_CASES = CONV_CASES + [  # planes past one block of pixels, with tails; channels past one panel, with tails
    ((1, 5, 13, 11), (17, 5, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),   # 143 pixels: 2 blocks of 48 and a tail
    ((2, 7, 17, 19), (9, 7, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),    # stride 2 across vector boundaries
    ((1, 3, 40, 37), (8, 3, 7, 7), (2, 2), (3, 3), (3, 3), (1, 1), 1),    # ResNet's stem, rows wider than a vector
    ((1, 6, 21, 35), (10, 6, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1),   # 1x1 on rows of 35 (two vectors and 3)
    ((1, 6, 21, 35), (10, 6, 1, 1), (2, 2), (0, 0), (0, 0), (1, 1), 1),   # 1x1 stride 2
    ((1, 4, 20, 33), (6, 4, 3, 3), (3, 3), (2, 1), (0, 2), (2, 1), 1),    # stride 3 (one column at a time), dilation
    ((2, 8, 12, 18), (26, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2),   # groups of 13 channels
    # the padded kernel (3 vectors) over several blocks and panels, 2 images: weights larger than
    # the padded input (3 x 216 x 8 floats against 24 x 12 x 15) and smaller (3 x 54 x 8 against 6 x 22 x 23)
    ((2, 24, 10, 13), (20, 24, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    ((2, 6, 20, 21), (20, 6, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
]


@needs_pixel_conv
@pytest.mark.parametrize("vectors", [1, 2, 3])
@pytest.mark.parametrize("case", PIXEL_CASES, ids=lambda c: "x{}w{}s{}p{}{}d{}g{}".format(*c))
def test_pixel_conv_every_geometry_block_and_thread_count(case, vectors):
    """conv.c's pixel-major AVX-512 convolution: blocks of 16, 32 or 48 pixels (plane tails, blocks
    across output rows), panels of 24 / vectors channels (tails, groups), with bias, residual, ReLU."""
    _every_thread_count(case, vectors, seed=2)


def _every_thread_count(case, pixels, seed):
    """conv_on_cpu with `pixels` against numpy for one geometry, plain and with bias, residual and
    ReLU, on 1, 2 and 3 threads."""
    xs, ws, stride, pb, pe, dil, groups = case
    rng = np.random.default_rng(sum(xs) + sum(ws) + seed)
    x = rng.standard_normal(xs).astype(np.float32)
    W = rng.standard_normal(ws).astype(np.float32)
    bias = rng.standard_normal(ws[0]).astype(np.float32)
    ref = conv_ref(x, W, stride, pb, pe, dil, groups)
    r = rng.standard_normal(ref.shape).astype(np.float32)
    want = np.maximum(ref + bias.reshape(1, -1, 1, 1) + r, 0)
    for threads in (1, 2, 3):
        out = conv_on_cpu(x, W, stride, pb, pe, dil, groups, threads, pixels=pixels)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        out = conv_on_cpu(x, W, stride, pb, pe, dil, groups, threads, bias=bias, residual=r, relu=True,
                          pixels=pixels)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _long_sum_keeps_nan(x, W, pixels, inf_at):
    """conv_on_cpu with `pixels` against numpy on 1 and 2 threads, then through a residual holding a
    NaN at the first cell and -inf at `inf_at` and a ReLU: the NaN stays NaN, the -inf becomes 0."""
    ref = conv_ref(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1)
    for threads in (1, 2):
        out = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, threads, pixels=pixels)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    r = np.zeros(ref.shape, np.float32)
    r[0, 0, 0, 0], r[inf_at] = np.nan, -np.inf
    out = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, 1, residual=r, relu=True, pixels=pixels)
    assert np.isnan(out[0, 0, 0, 0]) and out[inf_at] == 0.0
    assert np.isfinite(out).sum() == out.size - 1


@needs_pixel_conv
def test_pixel_conv_sums_past_one_block_of_patch_rows_and_keeps_nan():
    """More than PKC (192) patch rows: partial sums wait in the output between row blocks; a NaN
    input stays NaN through the ReLU, and -inf becomes 0."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 40, 9, 10)).astype(np.float32)  # 40 * 9 = 360 patch rows
    W = rng.standard_normal((12, 40, 3, 3)).astype(np.float32)
    _long_sum_keeps_nan(x, W, 3, (0, 1, 8, 9))


# the channel-major kernel without patches (conv2d_pixels' block 4): equal strides only; output rows in
# tiles of 7 pixels (rows of 9, 11, 15, 35: a partial last tile), blocks of up to 16 tiles that end
# inside a row, panels of 64 channels (5, 13 a group, 70, 130: partial panels), batches of 1 and 3
LANE_CASES = [c for c in PIXEL_CASES if c[2][0] == c[2][1]] + [
    ((3, 5, 9, 7), (70, 5, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    ((1, 20, 14, 14), (130, 20, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),   # 28 tiles: 2 blocks, 3 panels
    ((3, 9, 7, 7), (64, 9, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),        # ResNet's deepest plane, one panel
    ((1, 6, 15, 31), (16, 6, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),      # phase rows of 16 columns and 15
    ((3, 7, 14, 14), (65, 7, 1, 1), (2, 2), (0, 0), (0, 0), (1, 1), 1),      # ResNet's 1x1 downsampling
    ((1, 4, 11, 23), (6, 4, 3, 3), (2, 2), (2, 2), (2, 2), (2, 2), 1),       # stride 2 with dilation 2: one phase
    # no padding: the taps read the input in place, its rows W apart (the last rows and columns unread)
    ((3, 5, 12, 17), (70, 5, 3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1),
    ((2, 6, 13, 16), (9, 6, 3, 3), (2, 2), (0, 0), (0, 0), (2, 1), 1),
    ((1, 8, 15, 20), (12, 4, 1, 1), (3, 3), (0, 0), (0, 0), (1, 1), 2),      # groups, stride 3
]


@needs_pixel_conv
@pytest.mark.parametrize("case", LANE_CASES, ids=lambda c: "x{}w{}s{}p{}{}d{}g{}".format(*c))
def test_lane_conv_every_geometry_and_thread_count(case):
    """conv.c's channel-major convolution on the padded input's phase planes: every geometry with
    equal strides, with and without bias, residual and ReLU, on 1, 2 and 3 threads."""
    _every_thread_count(case, 4, seed=4)


@needs_pixel_conv
def test_lane_conv_sums_past_one_chunk_of_taps_and_keeps_nan():
    """A panel's weights past 4 MB (16384 taps) are taken a chunk of taps at a time (partial sums
    wait in a buffer); a NaN stays NaN through the ReLU and -inf becomes 0; unequal strides, which
    the kernel does not take, give NaN rather than a wrong value."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 1830, 6, 9)).astype(np.float32)  # 16470 taps
    W = rng.standard_normal((70, 1830, 3, 3)).astype(np.float32)
    _long_sum_keeps_nan(x, W, 4, (1, 69, 5, 8))
    out = conv_on_cpu(x[:, :8], W[:, :8], (1, 2), (1, 1), (1, 1), (1, 1), 1, 2, pixels=4)
    assert np.isnan(out).all()


@needs_pixel_conv
@pytest.mark.parametrize("xs,ws", [((2, 9, 14, 14), (70, 9, 3, 3)),   # blocks of 98 pixels: 6 vectors and 2
                                   ((3, 4, 7, 7), (20, 4, 3, 3)),     # 49 pixels a block, one partial panel
                                   ((1, 6, 28, 28), (64, 6, 3, 3))])  # 112 pixels: whole vectors
def test_lane_conv_stores_rows_of_whole_tiles_16_pixels_at_a_time(xs, ws):
    """Rows of whole 7-pixel tiles (widths 7, 14, 28) are stored a block at a time, 16 pixels by 16
    channels (rows_store_block): the values of the pixel kernel (conv2d_pixels, 3 vectors) bit for bit
    with bias, a residual holding NaN and -inf, and ReLU (NaN kept, -inf to 0), on 1 to 3 threads."""
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = rng.standard_normal(xs).astype(np.float32)
    W = rng.standard_normal(ws).astype(np.float32)
    bias = rng.standard_normal(ws[0]).astype(np.float32)
    r = rng.standard_normal((xs[0], ws[0]) + xs[2:]).astype(np.float32)
    r[0, 0, 0, 0], r[-1, -1, -1, -1], r[0, 1, 1, 2] = np.nan, np.nan, -np.inf
    want = np.maximum(conv_ref(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1) + bias.reshape(1, -1, 1, 1) + r, 0)
    for threads in (1, 2, 3):
        lanes = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, threads, bias, r, True, pixels=4)
        pixels = conv_on_cpu(x, W, (1, 1), (1, 1), (1, 1), (1, 1), 1, threads, bias, r, True, pixels=3)
        assert np.isnan(lanes[0, 0, 0, 0]) and np.isnan(lanes[-1, -1, -1, -1]) and lanes[0, 1, 1, 2] == 0
        assert np.isnan(lanes).sum() == 2
        finite = ~np.isnan(want)
        np.testing.assert_allclose(lanes[finite], want[finite], rtol=1e-5, atol=1e-5 * np.abs(want[finite]).max())
        assert_same_bits(lanes, pixels)  # each pixel's taps summed in the same order from the bias


@needs_pixel_conv
def test_pack_conv_pixels_layout_and_bad_vector_count():
    W = np.arange(2 * 10 * 3 * 1 * 1, dtype=np.float32).reshape(20, 3, 1, 1)  # 2 groups of 10 channels
    wp = K.pack_conv_pixels(W, 2, 3)  # panels of 8 channels: 2 a group
    assert wp.shape == (4, 3, 8)
    assert wp[1, 2, 1] == W[9, 2, 0, 0] and wp[1, 2, 2] == 0.0 and wp[2, 0, 0] == W[10, 0, 0, 0]
    assert K.pack_conv_pixels(W, 2, 4).shape == (2, 3, 64)  # 4: channels in the lanes, 64 a panel
    with pytest.raises(ValueError, match="vectors"):
        K.pack_conv_pixels(W, 2, 5)


@needs_packed_conv
def test_packed_conv_kind_is_channels_without_the_pixel_kernels(monkeypatch):
    """Where conv.c has no pixel-major kernels (built for AVX2) every packed layer takes the channel-major
    one, conv2d_packed; depthwise layers (under 8 channels) stay OpenBLAS's."""
    monkeypatch.setattr(K, "conv2d_pixels", None)
    planes = kernels.direct_planes((56, 56), (3, 3), (1, 1), (1, 1), 64)
    assert K.packed_conv_kind((56, 56), 64, *planes, taps=576) == "channels"
    assert K.packed_conv_kind((7, 7), 512, taps=512) == "channels"
    assert K.packed_conv_kind((56, 56), 4, *planes, taps=36) is None


@needs_pixel_conv
def test_packed_conv_kind_follows_the_padding_lanes(monkeypatch):
    monkeypatch.setattr(K, "vector_floats", 16)  # the AVX-512 build's speeds (the AVX2 build's: below)
    def kind(out_hw, channels, kernel=(3, 3), stride=(1, 1), cin=64):
        return K.packed_conv_kind(out_hw, channels, *kernels.direct_planes(out_hw, kernel, stride, (1, 1), cin),
                                  stride=stride[0])
    assert kernels.direct_planes((56, 56), (3, 3), (1, 1), (1, 1), 64) == ((58, 58), 64)
    assert kernels.direct_planes((28, 28), (3, 3), (2, 2), (1, 1), 64) == ((29, 29), 256)  # 57 x 57 in 4 phases
    assert kernels.direct_planes((28, 14), (3, 3), (2, 1), (1, 1), 64) == (None, 0)
    assert kind((56, 56), 64) == "pixels"                                  # ResNet's wide planes
    assert kind((28, 28), 128, stride=(2, 2)) == "pixels"
    assert kind((14, 14), 256, cin=256) == "pixels"                        # 2 of 16 columns a row extra
    assert kind((14, 14), 256, stride=(2, 2), cin=128) == "channels"       # the same, from 4 phase planes
    assert kind((14, 14), 256, (1, 1), (2, 2), cin=128) == "channels"      # ResNet's 1x1 downsampling
    assert kind((28, 28), 128, cin=128) == "pixels"
    assert K.packed_conv_kind((14, 14), 256) == "channels"                 # 196 pixels in patches: 4 blocks and a sliver
    assert kind((7, 7), 512, cin=512) == "channels"                        # 2 of 9 columns a row extra
    assert K.packed_conv_kind((56, 56), 1) is None                         # depthwise: OpenBLAS's conv2d
    big = kernels.DIRECT_MAX_FLOATS // (16 * 16)  # planes past the copy's budget: patches
    assert K.packed_conv_kind((14, 14), 256, (16, 16), big) == "channels"


@needs_pixel_conv
def test_lane_conv_is_chosen_where_its_taps_outweigh_its_transposed_stores(monkeypatch):
    monkeypatch.setattr(K, "vector_floats", 16)  # the AVX-512 build's speeds (the AVX2 build's: below)
    def kind(out_hw, channels, kernel=(3, 3), stride=(1, 1), cin=64):
        return K.packed_conv_kind(out_hw, channels, *kernels.direct_planes(out_hw, kernel, stride, (1, 1), cin),
                                  stride=stride[0], taps=cin * kernel[0] * kernel[1], unpadded=kernel == (1, 1))
    # ResNet-18's layers: every one but the stem (147 taps at stride 2) is the channel-major
    # kernel's; its 1x1 downsampling of 64 channels (64 taps a value) is so only because it reads
    # the unpadded input in place
    assert kind((112, 112), 64, (7, 7), (2, 2), cin=3) == "pixels"
    assert kind((56, 56), 64) == "lanes"
    assert kind((28, 28), 128, stride=(2, 2)) == "lanes"
    assert kind((28, 28), 128, (1, 1), (2, 2)) == "lanes"
    assert K.packed_conv_kind((28, 28), 128, *kernels.direct_planes((28, 28), (1, 1), (2, 2), (1, 1), 64), stride=2,
                              taps=64) == "pixels"                             # the same layer, padded
    for hw, c in (((28, 28), 128), ((14, 14), 256), ((7, 7), 512)):
        assert kind(hw, c, cin=c) == "lanes"
        assert kind(hw, 2 * c, stride=(2, 2), cin=c) == "lanes"
    assert kind((14, 14), 256, (1, 1), (2, 2), cin=128) == "lanes"
    assert kind((7, 7), 512, (1, 1), (2, 2), cin=256) == "lanes"
    assert kind((56, 56), 64, cin=4) == "pixels"                              # 36 taps: the store outweighs them
    assert kind((56, 56), 64, (1, 1), (2, 2), cin=32) != "lanes"              # 32 taps at stride 2
    assert kind((14, 14), 20, cin=256) != "lanes"                             # 20 of a panel's 64 lanes
    assert kind((14, 14), 256, stride=(2, 1), cin=256) != "lanes"             # unequal strides: no phase planes
    assert K.packed_conv_kind((14, 14), 256, *kernels.direct_planes((14, 14), (3, 3), (1, 1), (1, 1), 256)) \
        == "pixels"                                                           # taps unknown: never lanes


@needs_pixel_conv
def test_the_avx2_build_picks_its_own_fastest_kernel_per_layer(monkeypatch):
    """With AVX2 (measured on its layers) the lanes kernel is no faster than the channel one: ResNet-18's
    planes from 56 x 56 to 28 x 28 take the pixel kernel, those of 14 x 14 and 7 x 7 the channel one."""
    monkeypatch.setattr(K, "vector_floats", 8)

    def kind(out_hw, channels, kernel=(3, 3), stride=(1, 1), cin=64):
        return K.packed_conv_kind(out_hw, channels, *kernels.direct_planes(out_hw, kernel, stride, (1, 1), cin),
                                  stride=stride[0], taps=cin * kernel[0] * kernel[1], unpadded=kernel == (1, 1))
    assert kind((112, 112), 64, (7, 7), (2, 2), cin=3) == "pixels"
    assert kind((56, 56), 64) == "pixels"
    assert kind((28, 28), 128, stride=(2, 2)) == kind((28, 28), 128, (1, 1), (2, 2)) == "pixels"
    assert kind((28, 28), 128, cin=128) == "pixels"
    for hw, c in (((14, 14), 256), ((7, 7), 512)):
        assert kind(hw, c, cin=c) == kind(hw, 2 * c, stride=(2, 2), cin=c) == "channels"
        assert kind(hw, 2 * c, (1, 1), (2, 2), cin=c) == "channels"
    assert kind((14, 14), 20, cin=256) == "pixels"  # 20 channels: the channel kernel's panels of 32 mostly padding


@needs_pixel_conv
def test_pixel_conv_reads_a_padded_copy_where_it_fits_and_patches_beyond():
    """Equal strides read the zero-padded input's phase planes without patches (rows of virtual pixels
    whose ends are dropped); an input past the copy's budget takes patches: the same numbers."""
    rng = np.random.default_rng(13)
    W = rng.standard_normal((8, 5, 3, 3)).astype(np.float32)
    for hw, s in (((5, 70), 1), ((11, 70), 2), ((13, 40), 3), ((920, 920), 1)):  # the last past DIRECT_MAX_FLOATS
        x = rng.standard_normal((1, 5) + hw).astype(np.float32)
        ref = conv_ref(x, W, (s, s), (1, 1), (1, 1), (1, 1), 1)
        planes_hw, planes = kernels.direct_planes(ref.shape[2:], (3, 3), (s, s), (1, 1), 5)
        assert (planes * planes_hw[0] * planes_hw[1] + 64 > kernels.DIRECT_MAX_FLOATS) == (hw[0] > 100)
        for threads in (1, 2):
            out = conv_on_cpu(x, W, (s, s), (1, 1), (1, 1), (1, 1), 1, threads, relu=True, pixels=3)
            np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@needs_pixel_conv
@pytest.mark.parametrize("xs,ws,s,p", [
    ((1, 3, 37, 32), (13, 3, 7, 7), 2, 3),    # the stem's geometry, one vector a row, 19 rows, 13 channels
    ((3, 5, 11, 32), (9, 5, 3, 3), 1, 1),     # 3 images, two vectors a row, 9 channels
    ((1, 3, 61, 96), (20, 3, 7, 7), 2, 3),    # three vectors a row: blocks inside rows, 31 rows
    ((3, 4, 5, 16), (8, 4, 3, 3), 1, 1),      # 5 vectors an image: the last block partial
    ((1, 3, 45, 224), (17, 3, 7, 7), 2, 3),   # ResNet's 112-pixel rows (7 vectors), blocks across rows
])
def test_pixel_conv_on_rows_of_whole_vectors(xs, ws, s, p):
    """Output rows a multiple of 16 pixels: the padded kernel's blocks are rows' 16-pixel segments
    (no dropped lanes, whole stores); tails of channels, rows and blocks, 1 to 3 threads."""
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = rng.standard_normal(xs).astype(np.float32)
    W = rng.standard_normal(ws).astype(np.float32)
    bias = rng.standard_normal(ws[0]).astype(np.float32)
    ref = conv_ref(x, W, (s, s), (p, p), (p, p), (1, 1), 1)
    assert ref.shape[3] % 16 == 0
    r = rng.standard_normal(ref.shape).astype(np.float32)
    for threads in (1, 2, 3):
        out = conv_on_cpu(x, W, (s, s), (p, p), (p, p), (1, 1), 1, threads, pixels=3)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        out = conv_on_cpu(x, W, (s, s), (p, p), (p, p), (1, 1), 1, threads, bias=bias, residual=r, relu=True,
                          pixels=3)
        want = np.maximum(ref + bias.reshape(1, -1, 1, 1) + r, 0)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def conv_pool_on_cpu(x, W, stride, pad, dil, groups, threads, bias, relu, pool_kernel, pool_stride, pool_pad,
                     pool_hw, band=0):
    """(fused, unfused): K.conv2d_pool (`band` pooled rows a band), and K.conv2d_pixels (3 vectors) then
    K.maxpool2d, of numpy arrays in one graph on ggml's CPU backend (symmetric conv pads), both outputs
    filled with NaN first."""
    from ggmlpy.bindings import ffi
    N, C, H, Wd = x.shape
    M, Cg, KH, KW = W.shape
    OH, OW = conv_out_hw((H, Wd), (KH, KW), stride, pad, pad, dil)
    params = ffi.new("struct ggml_init_params *", {"mem_size": 1 << 27, "mem_buffer": ffi.NULL, "no_alloc": False})
    ctx = lib.ggml_init(params[0])

    def tensor(arr, *ne):
        return f32_tensor(ctx, arr, *ne)
    try:
        xt = tensor(x, Wd, H, C, N)
        wp = K.pack_conv_pixels(W, groups, 3)
        wt = tensor(wp, *wp.shape[::-1], 1)
        bt = None if bias is None else lib.ggml_reshape_1d(ctx, tensor(bias, M, 1, 1, 1), M)
        fused = K.conv2d_pool(ctx, xt, wt, M, (KH, KW), stride, pad, dil, (OH, OW), groups, bt, relu, pool_kernel,
                              pool_stride, pool_pad, pool_hw, band)
        conv = K.conv2d_pixels(ctx, xt, wt, M, (KH, KW), stride, pad, dil, (OH, OW), groups, bt, None, relu, 3)
        unfused = K.maxpool2d(ctx, conv, pool_kernel, pool_stride, pool_pad, pool_hw)
        graph = lib.ggml_new_graph(ctx)
        for t in (fused, unfused):
            assert [int(t.ne[i]) for i in range(4)] == [pool_hw[1], pool_hw[0], M, N]
            ffi.buffer(t.data, int(lib.ggml_nbytes(t)))[:] = b"\xff" * int(lib.ggml_nbytes(t))
            lib.ggml_build_forward_expand(graph, t)
        assert lib.ggml_graph_compute_with_ctx(ctx, graph, threads) == lib.GGML_STATUS_SUCCESS
        return [np.frombuffer(ffi.buffer(t.data, int(lib.ggml_nbytes(t))), np.float32)
                .reshape(N, M, *pool_hw).copy() for t in (fused, unfused)]
    finally:
        lib.ggml_free(ctx)


def assert_same_bits(got, want):
    """NaN in the same places, every other value the same bits (signed zeros included)."""
    assert (np.isnan(got) == np.isnan(want)).all()
    np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])


CONV_POOL_CASES = [  # x shape, W shape, conv stride, pad, dilation, groups; pool kernel, stride, pad
    ((2, 3, 45, 224), (17, 3, 7, 7), 2, 3, 1, 1, (3, 3), (2, 2), (1, 1)),  # ResNet's stem: rows of 7 vectors
    ((3, 3, 37, 61), (13, 3, 7, 7), 2, 3, 1, 1, (3, 3), (2, 2), (1, 1)),   # odd widths: blocks across rows
    ((1, 5, 30, 33), (8, 5, 3, 3), 1, 1, 1, 1, (2, 2), (2, 2), (0, 0)),    # windows that share no row
    ((2, 4, 23, 19), (9, 4, 3, 3), 1, 1, 1, 1, (3, 2), (1, 2), (1, 0)),    # stride 1 down: bands of many kept rows
    ((1, 4, 26, 21), (6, 4, 3, 3), 1, 1, 2, 1, (2, 3), (3, 1), (0, 1)),    # a pooling stride past its kernel, dilation
    ((2, 6, 17, 32), (10, 3, 3, 3), 1, 1, 1, 2, (5, 5), (2, 2), (2, 2)),   # groups; windows 5 rows tall
    ((1, 8, 300, 40), (64, 8, 3, 3), 2, 1, 1, 1, (3, 3), (2, 2), (1, 1)),  # 150 rows: many bands, 8 panels
    ((2, 4, 12, 17), (8, 4, 3, 3), 1, 1, 1, 1, (2, 2), (2, 2), (2, 2)),    # windows wholly in the padding
]


@needs_pixel_conv
@pytest.mark.parametrize("case", CONV_POOL_CASES, ids=lambda c: "x{}w{}s{}p{}d{}g{}k{}s{}p{}".format(*c))
def test_conv_pool_is_the_conv_then_the_pooling_bit_for_bit(case):
    """The convolution and its max pooling as one node (conv2d_pool: the convolution computed a band of
    rows at a time into a buffer, pooled from there): the same bits as conv2d_pixels then maxpool2d, NaN
    and signed zeros included, with and without bias and ReLU, batches of 1 to 3, odd widths and heights
    whose bands end early, bands of 1, 2, 3 and 5 pooled rows and of conv.c's choice, on 1, 2 and 3
    threads; and numpy's values."""
    xs, ws, s, p, d, groups, pk, ps, pp = case
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = rng.standard_normal(xs).astype(np.float32)
    x[0, 0, 5, 7] = np.nan  # NaN through the taps: the windows of the pixels that read it
    W = rng.standard_normal(ws).astype(np.float32)
    x[-1, :, :12] = -np.abs(x[-1, :, :12])  # the last image's top rows negative:
    W[1], W[2] = 0, 1e-30                     # channel 1 is -0 (its bias) where they alone are read, else +0
    bias = rng.standard_normal(ws[0]).astype(np.float32)
    bias[1], bias[2] = -0.0, -1e30            # channel 2 is ReLU'd to zeros
    ref = conv_ref(np.nan_to_num(x), W, (s, s), (p, p), (p, p), (d, d), groups)
    OH, OW = ref.shape[2:]
    out_hw = ((OH + 2 * pp[0] - pk[0]) // ps[0] + 1, (OW + 2 * pp[1] - pk[1]) // ps[1] + 1)
    for b, relu in ((None, False), (bias, True)):
        want = ref + (0 if b is None else b.reshape(1, -1, 1, 1))
        want = maxpool_ref(np.maximum(want, 0) if relu else want, pk, ps, pp, out_hw)
        for threads, band in ((1, 0), (2, 0), (3, 0), (1, 1), (2, 2), (3, 3), (1, 5)):
            fused, unfused = conv_pool_on_cpu(x, W, (s, s), (p, p), (d, d), groups, threads, b, relu, pk, ps, pp,
                                              out_hw, band)
            assert_same_bits(fused, unfused)
            assert np.isnan(fused[0]).any() and not np.isnan(fused[1:]).any()
            finite = ~np.isnan(fused)
            np.testing.assert_allclose(fused[finite], want[finite], rtol=1e-4, atol=1e-4 * np.abs(want).max())
        if relu:
            zeros = fused[-1, 1:3][~np.isnan(fused[-1, 1:3]) & (fused[-1, 1:3] > -np.finfo(np.float32).max)]
            assert (zeros == 0).all() and np.signbit(zeros).any() and not np.signbit(zeros).all()


@pytest.mark.parametrize("name,what", [("gemm", "products stay"), ("conv", "convolutions stay"),
                                       ("rows", "layer norms stay")])
def test_libraries_that_fail_to_build_are_off_and_logged(name, what, monkeypatch, caplog, no_prebuilt):
    """A gemm.c, conv.c or rows.c that does not compile leaves ggml's own ops in place, said in the log."""
    def fail(*a, **k):
        raise RuntimeError("cc failed: boom")
    monkeypatch.setattr(kernel_loader, "_build", fail)
    with caplog.at_level("INFO", logger="ggmlpy.kernels"):
        assert kernel_loader._load_optional("cc", name) is None
    assert any(what in r.getMessage() and "boom" in r.getMessage() for r in caplog.records)


@needs_conv
def test_conv_and_rows_libraries_are_cached_beside_the_others():
    assert K.conv_lib is not None and K.rows_lib is not None
    names = {p.name.split("-")[0] for p in K.path.parent.glob("*.so")}
    assert {"kernels", "gemm", "conv", "rows"} <= names



def gelu_second64(x):
    x = np.asarray(x, np.float64)
    return np.exp(-x * x / 2) * INV_SQRT_2PI * (2 - x * x)


@pytest.mark.parametrize("fused", [True, False])
def test_gelu_derivatives_as_values_for_forward_ad(fused):
    """jvp of gelu gives gelu' v, hvp of sum(gelu) gives gelu'' v: one kernel each on the CPU
    (with the infinities' limits), ggml ops without the kernels, the same numbers."""
    if fused and kernels.get() is None:
        pytest.skip("no C compiler: the kernels are not built")
    x = np.linspace(-12, 12, 2401)
    if fused:
        x = np.concatenate([x, [np.inf, -np.inf]])
    ones = np.ones((x.size, 1))
    was = kernels.set_enabled(fused)
    try:
        t = g.ag_tensor(x.reshape(-1, 1))
        _, jv = g.jvp(g.ag_gelu, t, g.ag_tensor(ones))
        _, hv = hvp(lambda a: g.ag_sum(g.ag_gelu(a)), t, g.ag_tensor(ones))
    finally:
        kernels.set_enabled(was)
    want1, want2 = gelu_grad64(np.clip(x, -20, 20)), gelu_second64(np.clip(x, -20, 20))
    np.testing.assert_allclose(jv.numpy().ravel(), want1, atol=2e-6)
    np.testing.assert_allclose(hv.numpy().ravel(), want2, atol=2e-6)


@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (8, 5), (64, 130), (1000, 9), (3, 4000)])
def test_column_sums_share_the_columns_among_threads_at_ggmls_values(shape):
    """ag_sum(x, 2) (ggml's sum_rows: accumulated in double) as one kernel whose threads share the
    columns; eight accumulators a column, so values within one float32 rounding of the exact sums
    (NaN and infinities kept); the same with the kernels off."""
    if kernels.get() is None:
        pytest.skip("no C compiler: the kernels are not built")
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e4], size=shape)).astype(np.float32)
    if x.size > 2:
        x.flat[1] = np.nan
        x.flat[-1] = np.inf
    want = x.astype(np.float64).sum(axis=0, keepdims=True)
    got = {}
    for on in (True, False):
        was = kernels.set_enabled(on)
        try:
            got[on] = g.ag_sum(g.ag_tensor(x), 2).numpy()
        finally:
            kernels.set_enabled(was)
    finite = np.isfinite(want)
    for on in (True, False):
        np.testing.assert_array_equal(np.isnan(got[on]), np.isnan(want))
        np.testing.assert_array_equal(got[on][~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
        np.testing.assert_allclose(got[on][finite], want[finite], rtol=1.2e-7, atol=0)
