"""Port of ggmlR's tests/testthat/test-helpers.R (ggmlR 0.8.2).

ggmlR's ggml_with_temp_ctx(mem_size, expr) evaluates an R expression with `ctx` bound; Python's
form is a with-block (`with ggml_with_temp_ctx(n) as ctx:`), freed at its end."""
from ggmlpy import *  # noqa: F401,F403

from .rlike import *  # noqa: F401,F403


def test_ggml_init_auto_creates_appropriate_context():
    """ggml_init_auto creates appropriate context"""
    ctx = ggml_init_auto(tensor1=1000)
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000)
    expect_type(a, "externalptr")
    ggml_free(ctx)


def test_ggml_init_auto_handles_multiple_tensors():
    """ggml_init_auto handles multiple tensors"""
    ctx = ggml_init_auto(vec=1000, mat=c(100, 100))
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 100, 100)
    expect_type(a, "externalptr")
    expect_type(b, "externalptr")
    ggml_free(ctx)


def test_ggml_with_temp_ctx_executes_and_cleans_up():
    """ggml_with_temp_ctx executes and cleans up"""
    with ggml_with_temp_ctx(16 * 1024 * 1024) as ctx:
        a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
        ggml_set_f32(a, rng(1, 100))
        result = ggml_get_f32(a).ravel()
    assert not ctx.alive  # cleaned up
    expect_type(result, "double")
    assert length(result) == 100
    expect_equal(result, rng(1, 100))


def test_ggml_with_temp_ctx_allows_operations():
    """ggml_with_temp_ctx allows operations"""
    with ggml_with_temp_ctx(16 * 1024 * 1024) as ctx:
        a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
        b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
        ggml_set_f32(a, c(1, 2, 3, 4, 5))
        ggml_set_f32(b, c(5, 4, 3, 2, 1))
        result = ggml_cpu_add(a, b)
    expect_equal(result, c(6, 6, 6, 6, 6))
