"""Port of ggmlR's tests/testthat/test-cpu-features.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_cpu_feature_detection_functions_work():
    """CPU feature detection functions work"""
    expect_type(ggml_cpu_has_sse3(), "logical")
    expect_type(ggml_cpu_has_ssse3(), "logical")
    expect_type(ggml_cpu_has_avx(), "logical")
    expect_type(ggml_cpu_has_avx_vnni(), "logical")
    expect_type(ggml_cpu_has_avx2(), "logical")
    expect_type(ggml_cpu_has_bmi2(), "logical")
    expect_type(ggml_cpu_has_f16c(), "logical")
    expect_type(ggml_cpu_has_fma(), "logical")
    expect_type(ggml_cpu_has_avx512(), "logical")
    expect_type(ggml_cpu_has_avx512_vbmi(), "logical")
    expect_type(ggml_cpu_has_avx512_vnni(), "logical")
    expect_type(ggml_cpu_has_avx512_bf16(), "logical")
    expect_type(ggml_cpu_has_amx_int8(), "logical")


def test_arm_feature_detection_functions_work():
    """ARM feature detection functions work"""
    expect_type(ggml_cpu_has_neon(), "logical")
    expect_type(ggml_cpu_has_arm_fma(), "logical")
    expect_type(ggml_cpu_has_fp16_va(), "logical")
    expect_type(ggml_cpu_has_dotprod(), "logical")
    expect_type(ggml_cpu_has_matmul_int8(), "logical")
    expect_type(ggml_cpu_has_sve(), "logical")
    expect_type(ggml_cpu_get_sve_cnt(), "integer")
    expect_type(ggml_cpu_has_sme(), "logical")


def test_other_architecture_feature_detection_works():
    """Other architecture feature detection works"""
    expect_type(ggml_cpu_has_riscv_v(), "logical")
    expect_type(ggml_cpu_get_rvv_vlen(), "integer")
    expect_type(ggml_cpu_has_vsx(), "logical")
    expect_type(ggml_cpu_has_vxe(), "logical")
    expect_type(ggml_cpu_has_wasm_simd(), "logical")
    expect_type(ggml_cpu_has_llamafile(), "logical")


def test_ggml_cpu_features_returns_all_features():
    """ggml_cpu_features returns all features"""
    features = ggml_cpu_features()
    expect_type(features, "list")
    assert "sse3"  in  names(features)
    assert "avx2"  in  names(features)
    assert "neon"  in  names(features)
    assert "riscv_v"  in  names(features)
    assert "llamafile"  in  names(features)
    assert length(features) >= 25


def test_tensor_contiguity_functions_work():
    """Tensor contiguity functions work"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 8)
    ggml_set_f32(a, rnorm(32))

    assert ggml_is_contiguous_0(a)
    assert ggml_is_contiguous_1(a)
    assert ggml_is_contiguous_2(a)
    assert ggml_is_contiguously_allocated(a)
    assert ggml_is_contiguous_rows(a)

    b = ggml_transpose(ctx, a)
    assert not (ggml_is_contiguous_0(b))

    ggml_free(ctx)


def test_tensor_stride_comparison_works():
    """Tensor stride comparison works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 8)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 8)
    c = ggml_transpose(ctx, a)

    assert ggml_are_same_stride(a, b)

    assert not (ggml_are_same_stride(a, c))

    ggml_free(ctx)


def test_ggml_can_repeat_works():
    """ggml_can_repeat works"""
    ctx = ggml_init(1024 * 1024)

    small = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    large = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 8)

    assert ggml_can_repeat(small, large)

    wrong = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    assert not (ggml_can_repeat(wrong, large))

    ggml_free(ctx)


def test_ggml_count_equal_creates_graph_operation():
    """ggml_count_equal creates graph operation"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 10)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 10)

    result = ggml_count_equal(ctx, a, b)
    assert not ((result is None))

    ggml_free(ctx)

