"""Quantized tensors in the low-level API: creation, writing floats or blocks, reading back,
ggml_mul_mat / ggml_get_rows with a quantized weight and flash attention with quantized K/V."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.quant import dequantize
from ggmlpy.core.types import type_id

rng = np.random.default_rng(23)
# weight types whose CPU dot product quantizes the activations to q8_0 or to q8_K
Q8_0_DOT = ("q4_0", "q5_0", "q8_0", "iq4_nl")
Q8_K_DOT = ("q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_xs", "iq3_s")
OTHER = ("q4_1", "q5_1", "iq2_xxs", "iq1_m", "tq1_0", "tq2_0", "mxfp4", "nvfp4", "q1_0", "q2_0")


@pytest.fixture
def ctx():
    c = g.ggml_init(64 << 20)
    yield c
    g.ggml_free(c)


def quantized_weight(ctx, name, w):
    a = g.ggml_new_tensor_2d(ctx, type_id(name), w.shape[1], w.shape[0])
    imat = np.ones(w.shape[1]) if g.ggml_quantize_requires_imatrix(name) else None
    blocks = g.ggml_quantize_chunk(name, w, imatrix=imat)
    g.ggml_set_f32(a, blocks)
    return a, blocks


def test_new_tensor_write_and_read_quantized(ctx):
    w = rng.standard_normal((3, 512)).astype(np.float32)
    a = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_Q4_K, 512, 3)
    assert g.ggml_nbytes(a) == 3 * g.ggml_row_size(g.GGML_TYPE_Q4_K, 512) == 3 * 288
    g.ggml_set_f32(a, w)  # floats: quantized row by row
    blocks = g.ggml_quantize_chunk("q4_K", w)
    view = g.ggml_tensor_view(a)
    assert view.dtype == np.uint8 and view.shape == (3, 288)
    assert np.array_equal(view.reshape(-1), blocks)
    assert np.array_equal(g.ggml_get_f32(a), dequantize("q4_K", blocks).reshape(3, 512))
    b = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_Q4_K, 512, 3)
    g.ggml_set_f32(b, blocks.tobytes())  # or its blocks, as bytes or uint8
    assert np.array_equal(g.ggml_tensor_view(b), view)
    with pytest.raises(g.GGMLError, match="whole number of blocks of 256"):
        g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_Q4_K, 128, 3)
    with pytest.raises(g.GGMLError, match="takes 1536 float values or its 864 bytes"):
        g.ggml_set_f32(a, np.zeros(100))
    with pytest.raises(g.GGMLError, match="holds floats"):
        g.ggml_set_i32(a, np.zeros(1536, np.int32))
    with pytest.raises(g.GGMLError, match="importance matrix"):
        g.ggml_set_f32(g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_IQ2_XXS, 256), np.ones(256))


def test_quantized_tensors_on_a_backend_buffer():
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    a = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_Q8_0, 64, 4)
    backend = g.ggml_backend_cpu_init()
    g.ggml_backend_alloc_ctx_tensors(ctx, backend)
    w = rng.standard_normal((4, 64)).astype(np.float32)
    g.ggml_backend_tensor_set(a, w)
    assert np.array_equal(g.ggml_backend_tensor_get(a), dequantize("q8_0", g.ggml_quantize_chunk("q8_0", w)).reshape(4, 64))
    g.ggml_free(ctx)


@pytest.mark.parametrize("name", Q8_0_DOT + Q8_K_DOT + OTHER)
def test_mul_mat_with_a_quantized_weight(ctx, name):
    K, M, N = 512, 6, 5
    w = rng.standard_normal((M, K)).astype(np.float32)
    x = rng.standard_normal((N, K)).astype(np.float32)
    a, blocks = quantized_weight(ctx, name, w)
    y = g.ggml_mul_mat(ctx, a, g.ggml_new_from_numpy(ctx, x))
    g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))
    out = g.ggml_get_f32(y)
    wd = dequantize(name, blocks).reshape(M, K).astype(np.float64)
    if name in Q8_0_DOT or name in Q8_K_DOT:
        # the kernel's own arithmetic: activations quantized to q8_0 / q8_K, then exact dot products
        xq = dequantize("q8_0", g.ggml_quantize_chunk("q8_0", x)) if name in Q8_0_DOT else \
            dequantize("q8_K", g.quantize_row_q8_K_ref(x))
        ref = xq.reshape(N, K) @ wd.T
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    else:
        ref = x @ wd.T
        np.testing.assert_allclose(out, ref, rtol=0, atol=0.02 * np.abs(ref).max())


def test_mul_mat_quantized_broadcasts_batches(ctx):
    K, M, N = 256, 4, 3
    w = rng.standard_normal((2, M, K)).astype(np.float32)  # ggml ne [K, M, 2]
    x = rng.standard_normal((4, N, K)).astype(np.float32)  # ne [K, N, 4]: batches 0,1 -> w0, 2,3 -> w1
    a = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_Q8_0, K, M, 2)
    g.ggml_set_f32(a, w)
    wd = g.ggml_get_f32(a)
    y = g.ggml_mul_mat(ctx, a, g.ggml_new_from_numpy(ctx, x))
    g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))
    xq = dequantize("q8_0", g.ggml_quantize_chunk("q8_0", x.reshape(-1, K))).reshape(x.shape)
    ref = np.stack([xq[i] @ wd[i // 2].T for i in range(4)])
    np.testing.assert_allclose(g.ggml_get_f32(y), ref, rtol=0, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("name", ("q4_0", "q4_K", "q6_K", "iq4_xs", "iq2_xxs", "mxfp4", "q8_0"))
def test_get_rows_of_a_quantized_table(ctx, name):
    w = rng.standard_normal((10, 256)).astype(np.float32)
    a, blocks = quantized_weight(ctx, name, w)
    idx = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_I32, 4)
    g.ggml_set_i32(idx, [9, 0, 3, 3])
    r = g.ggml_get_rows(ctx, a, idx)
    g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, r))
    assert np.array_equal(g.ggml_get_f32(r), dequantize(name, blocks).reshape(10, 256)[[9, 0, 3, 3]])
    g.ggml_set_i32(idx, [0, 10, 1, 2])
    with pytest.raises(g.GGMLError, match="ggml_get_rows"):
        g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, g.ggml_get_rows(ctx, a, idx)))


@pytest.mark.parametrize("name", ("f16", "q8_0", "q4_0", "q4_K", "iq4_nl", "q5_1", "mxfp4"))
def test_flash_attn_ext_with_quantized_k_and_v(ctx, name):
    D, nq, nkv, H = 256, 4, 32, 2
    q = rng.standard_normal((1, H, nq, D)).astype(np.float32)
    kf = rng.standard_normal((1, H, nkv, D)).astype(np.float32)
    vf = rng.standard_normal((1, H, nkv, D)).astype(np.float32)
    k = g.ggml_new_tensor_4d(ctx, type_id(name), D, nkv, H, 1)
    v = g.ggml_new_tensor_4d(ctx, type_id(name), D, nkv, H, 1)
    g.ggml_set_f32(k, kf)
    g.ggml_set_f32(v, vf)
    kd, vd = g.ggml_get_f32(k).reshape(kf.shape), g.ggml_get_f32(v).reshape(vf.shape)
    scale = 1 / np.sqrt(D)
    y = g.ggml_flash_attn_ext(ctx, g.ggml_new_from_numpy(ctx, q), k, v, None, scale)
    g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))
    s = np.einsum("bhqd,bhkd->bhqk", q, kd) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ref = np.einsum("bhqk,bhkd->bhqd", p, vd).transpose(0, 2, 1, 3)
    # Q goes through K's dot type (f16 or q8) and the accumulation is f16 for V: a few 1e-3
    np.testing.assert_allclose(g.ggml_get_f32(y).reshape(ref.shape), ref, rtol=0, atol=1.5e-2)


def test_ops_without_quantized_kernels_refuse_quantized_input(ctx):
    a = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_Q4_0, 64)
    with pytest.raises(g.GGMLError, match="has type q4_0"):
        g.ggml_add(ctx, a, a)
    with pytest.raises(g.GGMLError, match="has type q4_0"):
        g.ggml_mul_mat(ctx, g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 64), a)


# every type a quantize_<t> function produces (ggmlR's quantizer family)
QUANTIZER_TYPES = sorted(n[len("quantize_"):] for n in dir(g)
                         if n.startswith("quantize_") and not n.startswith("quantize_row_"))


def test_every_quantizer_type_is_covered():
    assert set(QUANTIZER_TYPES) == set(Q8_0_DOT + Q8_K_DOT + OTHER) | {"iq2_xs", "iq2_s", "iq3_xxs", "iq1_s"}


@pytest.mark.parametrize("name", QUANTIZER_TYPES)
def test_backend_tensor_set_data_takes_quantized_blocks(name):
    """ggmlR's setter on a quantized weight: quantize_<t>'s blocks go in as they are, and the CPU
    backend's quantized product matches the product with the dequantized weight."""
    K, M, N = 512, 6, 5
    w = rng.standard_normal((M, K)).astype(np.float32)
    x = rng.standard_normal((N, K)).astype(np.float32)
    imat = np.ones(K) if g.ggml_quantize_requires_imatrix(name) else None
    blocks = getattr(g, f"quantize_{name}")(w, imatrix=imat)
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    backend = g.ggml_backend_cpu_init()
    try:
        a = g.ggml_new_tensor_2d(ctx, type_id(name), K, M)
        b = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, K, N)
        y = g.ggml_mul_mat(ctx, a, b)
        g.ggml_backend_alloc_ctx_tensors(ctx, backend)
        assert g.ggml_backend_tensor_set_data(a, blocks) is a
        g.ggml_backend_tensor_set_data(b, x)
        g.ggml_backend_graph_compute(backend, g.ggml_build_forward_expand(ctx, y))
        out = g.ggml_backend_tensor_get(y)
        held = g.ggml_backend_tensor_get(a)  # the weight as the backend holds it, dequantized
    finally:
        g.ggml_free(ctx)
        g.ggml_backend_free(backend)
    wd = dequantize(name, blocks).reshape(M, K).astype(np.float64)
    assert np.array_equal(held, wd.astype(np.float32))
    if name in Q8_0_DOT or name in Q8_K_DOT:  # the kernel's own arithmetic: activations in q8_0 / q8_K
        xq = dequantize("q8_0", g.ggml_quantize_chunk("q8_0", x)) if name in Q8_0_DOT else \
            dequantize("q8_K", g.quantize_row_q8_K_ref(x))
        ref = xq.reshape(N, K) @ wd.T
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    else:  # activations quantized by the kernel (to 8 bits): a fraction of a percent
        ref = x @ wd.T
        np.testing.assert_allclose(out, ref, rtol=0, atol=0.02 * np.abs(ref).max())


def test_backend_tensor_set_data_checks_quantized_blocks():
    """Blocks from a byte offset (whole blocks only), floats for the whole tensor, and clear errors
    for byte counts that do not fit."""
    w = rng.standard_normal((4, 64)).astype(np.float32)
    blocks = g.quantize_q8_0(w)  # 4 rows of 2 blocks of 34 bytes: 272
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    backend = g.ggml_backend_cpu_init()
    try:
        a = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_Q8_0, 64, 4)
        g.ggml_backend_alloc_ctx_tensors(ctx, backend)
        g.ggml_backend_tensor_set_data(a, np.zeros(a.nbytes(), np.uint8))
        g.ggml_backend_tensor_set_data(a, blocks[68:136].tobytes(), offset=68)  # row 1, as bytes
        expect = np.zeros((4, 64), np.float32)
        expect[1] = dequantize("q8_0", blocks).reshape(4, 64)[1]
        assert np.array_equal(g.ggml_backend_tensor_get(a), expect)
        g.ggml_backend_tensor_set_data(a, w)  # floats: quantized, as ggml_backend_tensor_set does
        assert np.array_equal(g.ggml_backend_tensor_get(a), dequantize("q8_0", blocks).reshape(4, 64))
        with pytest.raises(g.GGMLError, match="100 bytes is not a whole number of 34-byte q8_0 blocks"):
            g.ggml_backend_tensor_set_data(a, blocks[:100])
        with pytest.raises(g.GGMLError, match="go past the tensor's 272 bytes"):
            g.ggml_backend_tensor_set_data(a, np.concatenate([blocks, blocks[:34]]))
        with pytest.raises(g.GGMLError, match="go past the tensor's 272 bytes"):
            g.ggml_backend_tensor_set_data(a, blocks, offset=34)
        with pytest.raises(g.GGMLError, match="a multiple of the 34-byte q8_0 block, got 10"):
            g.ggml_backend_tensor_set_data(a, blocks[:34], offset=10)
        with pytest.raises(g.GGMLError, match="float values only as a whole"):
            g.ggml_backend_tensor_set_data(a, w[1], offset=68)
        with pytest.raises(g.GGMLError, match="takes 256 float values or its 272 bytes"):
            g.ggml_backend_tensor_set_data(a, w[:2])
        with pytest.raises(g.GGMLError, match="cannot move q8_0 data as numbers"):
            g.ggml_backend_tensor_get_data(a)
    finally:
        g.ggml_free(ctx)
        g.ggml_backend_free(backend)
