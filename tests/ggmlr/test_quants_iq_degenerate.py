"""ggmlR tests/testthat/test-quants-iq-degenerate.R: all-zero and constant blocks through the IQ
quantizers must give finite blocks, not a ggml abort (ggml 0.25.3 has these guards itself)."""
import numpy as np

import ggmlpy as g


def _check(t, name, x, imatrix=None, check_inf=True):
    n = 256
    g.ggml_quantize_init(t)
    q = getattr(g, f"quantize_{name}")(x, 1, n, imatrix)
    assert q.dtype == np.uint8
    d = getattr(g, f"dequantize_row_{name}")(q, n)
    assert len(d) == n
    assert not np.any(np.isnan(d))
    if check_inf:
        assert not np.any(np.isinf(d))
    g.ggml_quantize_free()


def test_iq1_s_handles_all_zero_block_without_aborting():
    _check(19, "iq1_s", np.zeros(256), np.ones(256))


def test_iq1_s_handles_uniform_magnitude_block():
    _check(19, "iq1_s", np.full(256, 0.25), np.ones(256), check_inf=False)


def test_iq1_m_handles_all_zero_block():
    _check(29, "iq1_m", np.zeros(256), np.ones(256))


def test_iq1_m_handles_uniform_magnitude_block():
    _check(29, "iq1_m", np.full(256, -0.5), np.ones(256), check_inf=False)


def test_iq4_nl_handles_all_zero_input():
    _check(20, "iq4_nl", np.zeros(256))


def test_iq4_xs_handles_all_zero_input():
    _check(23, "iq4_xs", np.zeros(256))


def test_iq3_s_handles_all_zero_input():
    _check(21, "iq3_s", np.zeros(256))


def test_iq3_xxs_handles_all_zero_input():
    _check(18, "iq3_xxs", np.zeros(256))


def test_iq2_s_handles_all_zero_input():
    _check(22, "iq2_s", np.zeros(256))


def test_iq2_xs_handles_all_zero_input():
    _check(17, "iq2_xs", np.zeros(256), np.ones(256))
