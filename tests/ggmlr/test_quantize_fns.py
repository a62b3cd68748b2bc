"""ggmlR tests/testthat/test-quantize-fns.R (itself from ggml's tests/test-quantize-fns.cpp):
round-trip error of every type on ggml's synthetic data, against ggml's own thresholds."""
import numpy as np
import pytest

import ggmlpy as g

MAX_QUANTIZATION_TOTAL_ERROR = 0.002
MAX_QUANTIZATION_TOTAL_ERROR_BINARY = 0.025
MAX_QUANTIZATION_TOTAL_ERROR_TERNARY = 0.01
MAX_QUANTIZATION_TOTAL_ERROR_2BITS = 0.0075
MAX_QUANTIZATION_TOTAL_ERROR_3BITS = 0.0040
MAX_QUANTIZATION_TOTAL_ERROR_3BITS_XXS = 0.0050
MAX_QUANTIZATION_TOTAL_ERROR_FP4 = 0.0030


def generate_data(offset, n):
    return 0.1 + 2 * np.cos(np.arange(n) + offset)


def array_rmse(a, b):
    return np.sqrt(np.sum((np.asarray(a, np.float64) - b) ** 2)) / len(a)  # /n, as upstream


test_size = 32 * 128
test_data = generate_data(0.0, test_size)


def qfn(f):
    return lambda x, n: f(x, 1, n, None)


def qref(f):
    return lambda x, n: f(x, n)


CASES = [
    ("q4_0", qref(g.quantize_row_q4_0_ref), g.dequantize_row_q4_0, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("q4_1", qref(g.quantize_row_q4_1_ref), g.dequantize_row_q4_1, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("q5_0", qref(g.quantize_row_q5_0_ref), g.dequantize_row_q5_0, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("q5_1", qref(g.quantize_row_q5_1_ref), g.dequantize_row_q5_1, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("q8_0", qref(g.quantize_row_q8_0_ref), g.dequantize_row_q8_0, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("q2_K", qfn(g.quantize_q2_K), g.dequantize_row_q2_K, MAX_QUANTIZATION_TOTAL_ERROR_2BITS, None),
    ("q3_K", qfn(g.quantize_q3_K), g.dequantize_row_q3_K, MAX_QUANTIZATION_TOTAL_ERROR_3BITS, None),
    ("q4_K", qfn(g.quantize_q4_K), g.dequantize_row_q4_K, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("q5_K", qfn(g.quantize_q5_K), g.dequantize_row_q5_K, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("q6_K", qfn(g.quantize_q6_K), g.dequantize_row_q6_K, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("iq3_xxs", qfn(g.quantize_iq3_xxs), g.dequantize_row_iq3_xxs, MAX_QUANTIZATION_TOTAL_ERROR_3BITS_XXS,
     g.GGML_TYPE_IQ3_XXS),
    ("iq3_s", qfn(g.quantize_iq3_s), g.dequantize_row_iq3_s, MAX_QUANTIZATION_TOTAL_ERROR_3BITS, g.GGML_TYPE_IQ3_S),
    ("iq2_s", qfn(g.quantize_iq2_s), g.dequantize_row_iq2_s, MAX_QUANTIZATION_TOTAL_ERROR_2BITS, g.GGML_TYPE_IQ2_S),
    ("iq4_nl", qfn(g.quantize_iq4_nl), g.dequantize_row_iq4_nl, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("iq4_xs", qfn(g.quantize_iq4_xs), g.dequantize_row_iq4_xs, MAX_QUANTIZATION_TOTAL_ERROR, None),
    ("tq1_0", qfn(g.quantize_tq1_0), g.dequantize_row_tq1_0, MAX_QUANTIZATION_TOTAL_ERROR_TERNARY, None),
    ("tq2_0", qfn(g.quantize_tq2_0), g.dequantize_row_tq2_0, MAX_QUANTIZATION_TOTAL_ERROR_TERNARY, None),
    ("mxfp4", qfn(g.quantize_mxfp4), g.dequantize_row_mxfp4, MAX_QUANTIZATION_TOTAL_ERROR_FP4, None),
    ("nvfp4", qfn(g.quantize_nvfp4), g.dequantize_row_nvfp4, MAX_QUANTIZATION_TOTAL_ERROR_FP4, None),
    ("q1_0", qfn(g.quantize_q1_0), g.dequantize_row_q1_0, MAX_QUANTIZATION_TOTAL_ERROR_BINARY, None),
]


@pytest.mark.parametrize("label,quant,dequant,thresh,init_type", CASES, ids=[c[0] for c in CASES])
def test_round_trip_rmse_is_below_upstream_threshold(label, quant, dequant, thresh, init_type):
    if init_type is not None:
        g.ggml_quantize_init(init_type)
    try:
        raw = quant(test_data, test_size)
        assert raw.dtype == np.uint8
        out = dequant(raw, test_size)
        assert len(out) == test_size
        err = array_rmse(test_data, out)
        assert np.isfinite(err)
        assert err < thresh
    finally:
        if init_type is not None:
            g.ggml_quantize_free()
