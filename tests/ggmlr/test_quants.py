"""ggmlR tests/testthat/test-quants.R: the low-level quantize_* / dequantize_row_* families.

R's runif() draws differ from numpy's, so the data differ; every threshold is R's. Blocks that
ggmlR skips unless GGMLR_SLOW_TESTS=1 (they build the IQ grids) run here: they take seconds."""
import numpy as np

import ggmlpy as g

rng = np.random.default_rng(2024)


def runif(n, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, n)


def cor(a, b):
    return np.corrcoef(a, b)[0, 1]


def test_basic_quants_roundtrip_works():
    n = 64
    original = runif(n)
    for name, floor in (("q4_0", 0.9), ("q4_1", 0.9), ("q5_0", 0.9), ("q5_1", 0.9), ("q8_0", 0.99)):
        q = getattr(g, f"quantize_row_{name}_ref")(original, n)
        assert q.dtype == np.uint8  # expect_type(q, "raw")
        d = getattr(g, f"dequantize_row_{name}")(q, n)
        assert len(d) == n
        assert cor(original, d) > floor
    q = g.quantize_row_q8_1_ref(original, n)
    assert q.dtype == np.uint8


def test_quantize_with_imatrix_works():
    n = 64
    original = runif(n)
    imatrix = np.full(n, 1.0)
    q = g.quantize_q4_0(original, 1, n, imatrix)
    assert q.dtype == np.uint8
    d = g.dequantize_row_q4_0(q, n)
    assert len(d) == n
    q = g.quantize_q4_0(original, 1, n, None)
    assert q.dtype == np.uint8
    q = g.quantize_q4_0(np.tile(original, 2), 2, n, None)
    assert q.dtype == np.uint8


def test_ggml_quant_block_info_works():
    info = g.ggml_quant_block_info(g.GGML_TYPE_Q4_0)
    assert info["type_name"] == "q4_0"
    assert info["is_quantized"]
    assert info["block_size"] == 32
    info = g.ggml_quant_block_info(g.GGML_TYPE_F32)
    assert info["type_name"] == "f32"
    assert not info["is_quantized"]


def test_k_quants_roundtrip_works():
    n = 256
    original = runif(n)
    for name, floor in (("q2_K", 0.7), ("q3_K", 0.8), ("q4_K", 0.9), ("q5_K", 0.95), ("q6_K", 0.98)):
        q = getattr(g, f"quantize_{name}")(original, 1, n, None)
        assert q.dtype == np.uint8
        d = getattr(g, f"dequantize_row_{name}")(q, n)
        assert len(d) == n
        assert cor(original, d) > floor, name


def test_k_quants_row_ref_works():
    n = 256
    original = runif(n)
    for name in ("q2_K", "q3_K", "q4_K", "q5_K", "q6_K"):
        assert getattr(g, f"quantize_row_{name}_ref")(original, n).dtype == np.uint8
    q = g.quantize_row_q8_K_ref(original, n)
    d = g.dequantize_row_q8_K(q, n)
    assert len(d) == n
    assert cor(original, d) > 0.99


def test_ternary_quants_work():
    n = 256
    original = runif(n)
    for t, name in ((34, "tq1_0"), (35, "tq2_0")):
        g.ggml_quantize_init(t)
        q = getattr(g, f"quantize_row_{name}_ref")(original, n)
        assert q.dtype == np.uint8
        d = getattr(g, f"dequantize_row_{name}")(q, n)
        assert len(d) == n
        g.ggml_quantize_free()


def test_iq3_iq4_quants_work():
    n = 256
    original = runif(n)
    for t, name in ((18, "iq3_xxs"), (21, "iq3_s"), (20, "iq4_nl"), (23, "iq4_xs"), (22, "iq2_s")):
        g.ggml_quantize_init(t)
        q = getattr(g, f"quantize_row_{name}_ref")(original, n)
        assert q.dtype == np.uint8
        d = getattr(g, f"dequantize_row_{name}")(q, n)
        assert len(d) == n
        g.ggml_quantize_free()


def _iq_with_imatrix(t, name):
    n = 256
    original = runif(n)
    imatrix = np.full(n, 1.0)
    g.iq2xs_init_impl(t)
    g.ggml_quantize_init(t)
    q = getattr(g, f"quantize_{name}")(original, 1, n, imatrix)
    assert q.dtype == np.uint8
    d = getattr(g, f"dequantize_row_{name}")(q, n)
    assert len(d) == n
    g.ggml_quantize_free()
    g.iq2xs_free_impl(t)


def test_iq2_xxs_quant_with_imatrix_works():
    _iq_with_imatrix(16, "iq2_xxs")


def test_iq2_xs_quant_with_imatrix_works():
    _iq_with_imatrix(17, "iq2_xs")


def test_iq1_s_quant_with_imatrix_works():
    _iq_with_imatrix(19, "iq1_s")


def test_iq1_m_quant_with_imatrix_works():
    _iq_with_imatrix(29, "iq1_m")


def test_mxfp4_quantize_dequantize_works():
    n = 64
    original = runif(n)
    q = g.quantize_row_mxfp4_ref(original, n)
    assert q.dtype == np.uint8
    d = g.dequantize_row_mxfp4(q, n)
    assert len(d) == n


def test_quantize_functions_with_imatrix_work():
    n = 64
    original = runif(n)
    for name in ("q4_1", "q5_0", "q5_1", "q8_0"):
        assert getattr(g, f"quantize_{name}")(original, 1, n, None).dtype == np.uint8


def test_different_quant_sizes_comparison():
    n = 256
    original = runif(n)
    q4 = g.quantize_q4_0(original, 1, n, None)
    q8 = g.quantize_q8_0(original, 1, n, None)
    assert len(q8) > len(q4)
