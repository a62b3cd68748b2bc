"""Port of ggmlR's tests/testthat/test-5d-ops.R (ggmlR 0.8.2), and the five-dim blocks of
test-vulkan-push-constants.R ("5D add", "5D concat axis=4"; the Vulkan ones run where a Vulkan device is).

ggmlR bundles a ggml fork with GGML_MAX_DIMS = 5; ggmlpy is pinned to ggml 0.25.3, whose tensors have
four dims, and holds a five-dim tensor with ne3 and ne4 merged (ggmlpy/core/tensor5.py). ggmlR's
blocks check that the results cover ne4 (not only its first slice); ggmlpy checks the values against
numpy too.
"""
import numpy as np
import pytest

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError

from ._backends import vulkan_available
from .rlike import *  # noqa: F401,F403

NE = [3, 2, 2, 2, 3]  # ne0=3, ne1=2, ne2=2, ne3=2, ne4=3 (72 elements, ne4=3 is key)
N = 72
set_seed(42)
A_DAT = runif(N, 0.1, 1.0)
B_DAT = runif(N, 0.1, 1.0)


def run_5d(build_fn, set_fn, n_out, backend_init=ggml_backend_cpu_init):
    ctx = ggml_init(mem_size=32 * 1024 * 1024, no_alloc=True)
    out = build_fn(ctx)
    backend = backend_init()
    if backend_init is ggml_backend_cpu_init:
        ggml_backend_cpu_set_n_threads(backend, 2)
    buf = ggml_backend_alloc_ctx_tensors(ctx, backend)
    set_fn()
    graph = ggml_build_forward_expand(ctx, out)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_backend_tensor_get_data(out, n_elements=n_out)
    ggml_backend_buffer_free(buf)
    ggml_backend_free(backend)
    ggml_free(ctx)
    return result


def _np5(x, ne=NE):  # a flat vector in ggml order as numpy's [ne4, ne3, ne2, ne1, ne0], in float32 as stored
    return np.asarray(x, dtype=np.float32).reshape(ne[::-1])


UNARY = {"relu": lambda x: np.maximum(x, 0), "silu": lambda x: x / (1 + np.exp(-x)), "gelu": None,
         "abs": np.abs, "neg": np.negative, "sqrt": np.sqrt}


@pytest.mark.parametrize("op", list(UNARY))
def test_5d_unary_covers_ne4(op):
    """5D unary <op> covers ne[4]"""
    env = {}

    def build(ctx):
        env["a"] = a = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, NE)
        return globals()[f"ggml_{op}"](ctx, a)
    res = run_5d(build, lambda: ggml_backend_tensor_set_data(env["a"], A_DAT), N)
    assert length(res) == N
    assert np.all(np.isfinite(res)), f"{op} produced NaN/Inf"
    assert not np.array_equal(res[:24], res[48:72]), f"{op} ne[4] slice3 == slice1: dim4 likely not traversed"
    if UNARY[op] is not None:  # ggmlpy: the values (gelu is ggml's approximation)
        expect_equal(res, UNARY[op](np.asarray(A_DAT)), tolerance=1e-6)


@pytest.mark.parametrize("op", ["add", "mul", "sub", "div"])
def test_5d_binary_covers_ne4(op):
    """5D binary <op> covers ne[4]"""
    env = {}

    def build(ctx):
        env["a"] = a = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, NE)
        env["b"] = b = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, NE)
        return globals()[f"ggml_{op}"](ctx, a, b)

    def fill():
        ggml_backend_tensor_set_data(env["a"], A_DAT)
        ggml_backend_tensor_set_data(env["b"], B_DAT)
    res = run_5d(build, fill, N)
    assert length(res) == N
    assert np.all(np.isfinite(res)), f"{op} produced NaN/Inf"
    assert not np.array_equal(res[:24], res[48:72])
    ref = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "div": np.divide}[op](np.asarray(A_DAT),
                                                                                      np.asarray(B_DAT))
    expect_equal(res, ref, tolerance=1e-6)


@pytest.mark.parametrize("ax", range(5))
def test_5d_concat_axis_covers_ne4(ax):
    """5D concat axis <ax> covers ne[4]"""
    ne_out = list(NE)
    ne_out[ax] *= 2
    n_out = int(np.prod(ne_out))
    env = {}

    def build(ctx):
        env["a"] = a = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, NE)
        env["b"] = b = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, NE)
        return ggml_concat(ctx, a, b, dim=ax)

    def fill():
        ggml_backend_tensor_set_data(env["a"], A_DAT)
        ggml_backend_tensor_set_data(env["b"], B_DAT)
    res = run_5d(build, fill, n_out)
    assert length(res) == n_out
    assert np.all(np.isfinite(res)), f"concat axis {ax} produced NaN/Inf"
    want = np.concatenate([_np5(A_DAT), _np5(B_DAT)], axis=4 - ax)  # ggml dim ax is numpy axis 4 - ax
    np.testing.assert_array_equal(res, want.ravel())


# -- test-vulkan-push-constants.R: "5D ops require 256-byte push constants" ------------------------------
def run_5d_add(device, a_vals, b_vals):
    ne = [4, 3, 2, 5, 2]
    env = {}

    def build(ctx):
        env["a"] = a = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, ne)
        env["b"] = b = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, ne)
        return ggml_add(ctx, a, b)

    def fill():
        ggml_backend_tensor_set_data(env["a"], a_vals)
        ggml_backend_tensor_set_data(env["b"], b_vals)
    init = ggml_backend_cpu_init if device == "cpu" else (lambda: ggml_vulkan_init(0))
    return run_5d(build, fill, int(np.prod(ne)), init)


def run_5d_concat(device, a_vals, b_vals):
    ne = [4, 3, 2, 5, 2]
    env = {}

    def build(ctx):
        env["a"] = a = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, ne)
        env["b"] = b = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, ne)
        return ggml_concat(ctx, a, b, dim=4)

    def fill():
        ggml_backend_tensor_set_data(env["a"], a_vals)
        ggml_backend_tensor_set_data(env["b"], b_vals)
    init = ggml_backend_cpu_init if device == "cpu" else (lambda: ggml_vulkan_init(0))
    return run_5d(build, fill, 4 * 3 * 2 * 5 * 4, init)


def test_5d_add_cpu_matches_r_reference():
    """5D add CPU matches R reference"""
    n = 4 * 3 * 2 * 5 * 2
    set_seed(1)
    a, b = runif(n), runif(n)
    r = run_5d_add("cpu", a, b)
    assert length(r) == n
    assert np.all(np.isfinite(r))
    assert np.max(np.abs(r - (np.asarray(a) + np.asarray(b)))) < 1e-4


def test_5d_add_vulkan_matches_r_reference():
    """5D add Vulkan matches R reference"""
    if not vulkan_available():
        pytest.skip("no Vulkan device")
    n = 4 * 3 * 2 * 5 * 2
    set_seed(1)
    a, b = runif(n), runif(n)
    gpu = run_5d_add("vulkan", a, b)
    assert length(gpu) == n and np.all(np.isfinite(gpu))
    assert np.max(np.abs(gpu - (np.asarray(a) + np.asarray(b)))) < 1e-4


def test_5d_concat_axis_4_cpu_produces_finite_output():
    """5D concat axis=4 CPU produces finite output"""
    n = 4 * 3 * 2 * 5 * 2
    set_seed(2)
    a, b = runif(n), runif(n)
    r = run_5d_concat("cpu", a, b)
    assert length(r) == 4 * 3 * 2 * 5 * 4
    assert np.all(np.isfinite(r))
    np.testing.assert_array_equal(r, np.concatenate([a, b]).astype(np.float32))  # ggmlpy: dim 4 is the outermost


def test_5d_concat_axis_4_vulkan_matches_cpu():
    """5D concat axis=4 Vulkan matches CPU"""
    if not vulkan_available():
        pytest.skip("no Vulkan device")
    n = 4 * 3 * 2 * 5 * 2
    set_seed(2)
    a, b = runif(n), runif(n)
    cpu, gpu = run_5d_concat("cpu", a, b), run_5d_concat("vulkan", a, b)
    assert length(gpu) == 4 * 3 * 2 * 5 * 4 and np.all(np.isfinite(gpu))
    assert np.max(np.abs(cpu - gpu)) < 1e-4


def test_ops_that_do_not_treat_ne3_and_ne4_alike_refuse_five_dim_tensors():
    """ggmlpy: ggml 0.25.3 has four dims; an op that would mix the merged ne3 and ne4 raises, naming it."""
    ctx = ggml_init(32 * 1024 * 1024, no_alloc=True)
    a = ggml_new_tensor(ctx, GGML_TYPE_F32, 5, NE)
    assert GGML_MAX_DIMS == 5
    with pytest.raises(GGMLError, match=r"ggml_pool_2d: a has five dims \[3, 2, 2, 2, 3\]"):
        ggml_pool_2d(ctx, a, GGML_OP_POOL_AVG, 2, 2, 2, 2, 0, 0)
    with pytest.raises(GGMLError, match="n_dims must be 1..5"):
        ggml_new_tensor(ctx, GGML_TYPE_F32, 6, NE + [2])
    ggml_free(ctx)
