"""ggmlR tests/testthat/test-quantization.R: ggml_quantize_init/free/requires_imatrix and
ggml_quantize_chunk's block sizes."""
import numpy as np
import pytest

import ggmlpy as g

rng = np.random.default_rng(3)


@pytest.mark.parametrize("qtype,dequantize,tol", [(g.GGML_TYPE_Q8_0, g.dequantize_row_q8_0, 0.02),
                                                    (g.GGML_TYPE_Q4_0, g.dequantize_row_q4_0, 0.3)])
def test_ggml_quantize_init_works_for_q8_0_and_q4_0(qtype, dequantize, tol):
    """After ggml_quantize_init, rows quantize and come back within the type's step."""
    g.ggml_quantize_init(qtype)
    x = np.random.default_rng(1).normal(size=(2, 64)).astype(np.float32)
    back = dequantize(g.ggml_quantize_chunk(qtype, x), x.size).reshape(x.shape)
    assert np.abs(back - x).max() < tol * np.abs(x).max()
    g.ggml_quantize_free()


def test_ggml_quantize_free_is_safe_to_call_multiple_times():
    g.ggml_quantize_init(g.GGML_TYPE_Q8_0)
    g.ggml_quantize_free()
    g.ggml_quantize_free()
    x = np.ones((1, 32), np.float32)  # and quantizing afterwards still works (ggml re-inits on demand)
    np.testing.assert_allclose(g.dequantize_row_q8_0(g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, x), 32), x[0], rtol=1e-3)


def test_ggml_quantize_requires_imatrix_returns_logical():
    assert isinstance(g.ggml_quantize_requires_imatrix(g.GGML_TYPE_Q4_0), bool)


def test_ggml_quantize_requires_imatrix_for_different_types():
    assert not g.ggml_quantize_requires_imatrix(g.GGML_TYPE_Q4_0)
    assert not g.ggml_quantize_requires_imatrix(g.GGML_TYPE_Q8_0)
    assert not g.ggml_quantize_requires_imatrix(g.GGML_TYPE_F32)


def test_ggml_quantize_chunk_works_for_q8_0():
    result = g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, rng.standard_normal(256), nrows=1, n_per_row=256)
    assert result.dtype == np.uint8
    assert len(result) > 0
    assert len(result) == 272  # 8 blocks of 34 bytes
    g.ggml_quantize_free()


def test_ggml_quantize_chunk_preserves_data_approximately_for_q8_0():
    data = np.concatenate([np.arange(1, 17), -np.arange(1, 17)]) / 10
    quantized = g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, data, nrows=1, n_per_row=32)
    assert quantized.dtype == np.uint8
    assert len(quantized) > 0
    g.ggml_quantize_free()


def test_ggml_quantize_chunk_works_for_q4_0():
    result = g.ggml_quantize_chunk(g.GGML_TYPE_Q4_0, rng.standard_normal(256), nrows=1, n_per_row=256)
    assert result.dtype == np.uint8
    assert len(result) > 0
    assert len(result) == 144  # 8 blocks of 18 bytes
    g.ggml_quantize_free()


def test_ggml_quantize_chunk_handles_multiple_rows():
    result = g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, rng.standard_normal(128 * 4), nrows=4, n_per_row=128)
    assert result.dtype == np.uint8
    assert len(result) == 544
    g.ggml_quantize_free()


def test_ggml_quantize_chunk_handles_zeros():
    result = g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, np.zeros(32), nrows=1, n_per_row=32)
    assert result.dtype == np.uint8
    assert len(result) > 0
    g.ggml_quantize_free()


def test_ggml_quantize_chunk_handles_uniform_values():
    result = g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, np.full(32, 1.5), nrows=1, n_per_row=32)
    assert result.dtype == np.uint8
    g.ggml_quantize_free()


def test_ggml_quantize_chunk_handles_large_values():
    result = g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, np.linspace(-1000, 1000, 32), nrows=1, n_per_row=32)
    assert result.dtype == np.uint8
    g.ggml_quantize_free()


def test_quantization_type_constants_are_defined():
    assert g.GGML_TYPE_F32 == 0
    assert g.GGML_TYPE_F16 == 1
    assert g.GGML_TYPE_Q4_0 == 2
    assert g.GGML_TYPE_Q4_1 == 3
    assert g.GGML_TYPE_Q8_0 == 8
    assert g.GGML_TYPE_I32 == 26


def test_ggml_quantize_chunk_rejects_what_ggmlr_passes_to_ggml():
    """Not in ggmlR: its ggml_quantize_chunk hands any n_per_row and type to ggml, which aborts R
    on a row that is not whole blocks or a type it cannot produce, and reads past a short src."""
    with pytest.raises(g.GGMLError, match="whole number"):
        g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, np.zeros(48), nrows=1, n_per_row=48)
    with pytest.raises(g.GGMLError, match="cannot quantize"):
        g.ggml_quantize_chunk(g.GGML_TYPE_Q8_1, np.zeros(32), nrows=1, n_per_row=32)
    with pytest.raises(g.GGMLError, match="holds 32 values"):
        g.ggml_quantize_chunk(g.GGML_TYPE_Q8_0, np.zeros(32), nrows=2, n_per_row=32)
