"""ggmlR tests/testthat/test-quants-missing.R: quantize_* (n_rows / n_per_row) for the types
test-quants.R leaves out, and the Q1_0 and NVFP4 blocks. numpy's draws replace R's runif()."""
import numpy as np

import ggmlpy as g
from .conftest import expect_equal

rng = np.random.default_rng(7)


def runif(n, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, n)


def _roundtrip(t, name):
    n = 256
    original = runif(n)
    g.ggml_quantize_init(t)
    q = getattr(g, f"quantize_{name}")(original, 1, n, None)
    assert q.dtype == np.uint8
    d = getattr(g, f"dequantize_row_{name}")(q, n)
    assert len(d) == n
    g.ggml_quantize_free()


def test_quantize_tq2_0_works():
    _roundtrip(35, "tq2_0")


def test_quantize_iq2_s_works():
    _roundtrip(22, "iq2_s")


def test_quantize_iq3_xxs_works():
    _roundtrip(18, "iq3_xxs")


def test_quantize_iq3_s_works():
    _roundtrip(21, "iq3_s")


def test_quantize_iq4_nl_works():
    _roundtrip(20, "iq4_nl")


def test_quantize_iq4_xs_works():
    _roundtrip(23, "iq4_xs")


def test_quantize_q1_0_round_trips_correctly():
    n = 128 * 4
    original = runif(n)
    q = g.quantize_q1_0(original, 1, n, None)
    assert q.dtype == np.uint8
    assert len(q) == 4 * 18  # per block: an f16 scale and 16 bytes of signs
    d = g.dequantize_row_q1_0(q, n)
    assert len(d) == n
    nonzero = np.abs(original) > 1e-6
    assert np.all(np.sign(d[nonzero]) == np.sign(original[nonzero]))
    for b in range(4):
        idx = slice(b * 128, (b + 1) * 128)
        expect_equal(np.abs(d[idx]), np.full(128, np.mean(np.abs(original[idx]))), rtol=1e-2, atol=0)


def test_quantize_q1_0_handles_all_positive_and_all_negative_blocks():
    n = 128
    pos = runif(n, 0.1, 1.0)
    neg = runif(n, -1.0, -0.1)
    dp = g.dequantize_row_q1_0(g.quantize_q1_0(pos, 1, n, None), n)
    dn = g.dequantize_row_q1_0(g.quantize_q1_0(neg, 1, n, None), n)
    assert np.all(dp > 0)
    assert np.all(dn < 0)


def test_quantize_nvfp4_round_trips_with_reasonable_error():
    n = 64 * 4
    original = runif(n)
    q = g.quantize_nvfp4(original, 1, n, None)
    assert q.dtype == np.uint8
    assert len(q) == 4 * 36  # per block: four UE4M3 sub-block scales and 32 bytes of E2M1 pairs
    d = g.dequantize_row_nvfp4(q, n)
    assert len(d) == n
    err = np.abs(d - original)
    assert np.mean(err) < 0.1
    assert np.max(err) < 0.5


def test_quantize_nvfp4_preserves_zero_block():
    n = 64
    zeros = np.zeros(n)
    d = g.dequantize_row_nvfp4(g.quantize_nvfp4(zeros, 1, n, None), n)
    expect_equal(d, zeros, rtol=1e-6, atol=0)


def test_ggml_quantize_chunk_dispatches_q1_0_and_nvfp4():
    out_q1 = g.ggml_quantize_chunk(41, runif(128 * 2), 2, 128)  # GGML_TYPE_Q1_0
    assert out_q1.dtype == np.uint8
    assert len(out_q1) == 2 * 18
    out_nv = g.ggml_quantize_chunk(40, runif(64 * 2), 2, 64)  # GGML_TYPE_NVFP4
    assert out_nv.dtype == np.uint8
    assert len(out_nv) == 2 * 36


def test_q1_0_nvfp4_registered_in_type_traits():
    assert len(g.quantize_q1_0(np.full(128, 0.5), 1, 128, None)) == 18
    assert len(g.quantize_nvfp4(np.full(64, 0.5), 1, 64, None)) == 36
    # ggmlR can only infer this from the lengths; ggmlpy can ask ggml's type table directly
    assert (g.ggml_blck_size(g.GGML_TYPE_Q1_0), g.ggml_type_size(g.GGML_TYPE_Q1_0)) == (128, 18)
    assert (g.ggml_blck_size(g.GGML_TYPE_NVFP4), g.ggml_type_size(g.GGML_TYPE_NVFP4)) == (64, 36)
