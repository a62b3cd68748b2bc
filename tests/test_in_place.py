"""Kernel nodes computed over their input (graph.compiled.compute_in_place): only where no other
reader, the caller or another backend could see the input overwritten; the numbers unchanged."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import kernels
from ggmlpy.bindings import ffi, lib
from ggmlpy.graph import CompiledGraph, GraphContext, Weights
from ggmlpy.runtime.state import STATE

K = kernels.get()
pytestmark = pytest.mark.skipif(K is None, reason="ggmlpy's C kernels are not built here (no compiler)")
X = np.array([[-2.0, -0.0, 0.5, np.nan], [np.inf, -np.inf, 3.0, -1e-30]], np.float32)


def _relu(a):
    return np.where(np.isnan(a), a, np.maximum(a, 0)).astype(np.float32)


def _run(build):
    """build(ctx, x) -> (the relu node, {name: tensor to read}); returns (turned?, {name: array})."""
    backend = STATE.context().backend
    w, gctx = Weights(4), GraphContext(16, n_nodes=16)
    x = w.new(lib.GGML_TYPE_F32, X.shape[::-1], X)
    relu, outs = build(gctx.ctx, x)
    for t in outs.values():
        lib.ggml_set_output(t)
    gctx.expand(list(outs.values()))
    w.upload(backend)
    run = CompiledGraph(gctx.graph, backend)
    turned = relu.view_src != ffi.NULL
    run.compute()
    got = {k: CompiledGraph.read(t, X.shape) for k, t in outs.items()}
    run.free(), gctx.free(), w.free()
    return turned, got


def test_an_intermediate_read_by_the_relu_alone_is_overwritten_with_the_same_numbers():
    def build(ctx, x):
        r = K.relu(ctx, lib.ggml_add(ctx, x, x))
        return r, {"r": r}
    turned, got = _run(build)
    assert turned
    np.testing.assert_array_equal(got["r"], _relu(2 * X))  # NaN kept, relu(-inf) = 0


def test_an_input_with_another_reader_is_kept():
    def build(ctx, x):
        s = lib.ggml_add(ctx, x, x)
        r = K.relu(ctx, s)
        return r, {"r": r, "other": lib.ggml_add(ctx, lib.ggml_scale(ctx, s, 1.0), r)}
    turned, got = _run(build)
    assert not turned
    np.testing.assert_array_equal(got["r"], _relu(2 * X))
    np.testing.assert_array_equal(got["other"], 2 * X + _relu(2 * X))


def test_an_input_the_caller_reads_or_a_leaf_is_kept():
    def read_by_caller(ctx, x):
        s = lib.ggml_add(ctx, x, x)
        r = K.relu(ctx, s)
        return r, {"r": r, "s": s}
    turned, got = _run(read_by_caller)
    assert not turned
    np.testing.assert_array_equal(got["s"], 2 * X)

    def over_a_weight(ctx, x):
        r = K.relu(ctx, x)
        return r, {"r": r}
    turned, got = _run(over_a_weight)
    assert not turned
    np.testing.assert_array_equal(got["r"], _relu(X))


def test_compiled_relu_stack_keeps_nan_and_matches_eager():
    rng = np.random.default_rng(0)
    w = g.ag_param(rng.standard_normal((8, 8)).astype(np.float32))
    x = rng.standard_normal((8, 4)).astype(np.float32)
    x[3, 1] = np.nan
    xt = g.ag_tensor(x)

    def loss(a):
        return g.ag_sum(g.ag_relu(g.ag_matmul(w, g.ag_relu(g.ag_matmul(w, a)))))
    step = g.ag_compile(loss, [xt])
    with g.with_grad_tape():
        want = float(loss(xt).numpy().ravel()[0])
    assert np.isnan(want) and np.isnan(step(xt))
    x[3, 1] = 0.5
    xt2 = g.ag_tensor(x)
    with g.with_grad_tape():
        want = float(loss(xt2).numpy().ravel()[0])
    assert step(xt2) == pytest.approx(want, rel=1e-6)
