"""Port of ggmlR's tests/testthat/test-conv2d-dw-numeric.R (ggmlR 0.8.2): ggml_conv_2d_dw_direct
against upstream ggml's reference depthwise convolution (test-conv2d-dw.cpp), WHCN layout."""
import numpy as np
import pytest

from ggmlpy import *  # noqa: F401,F403

from .rlike import *  # noqa: F401,F403


def conv_2d_dw_reference(src_w, src_h, src, knl_w, knl_h, knl, channels, batch, stride, pad, dilation):
    """Upstream's reference loop, over flat WHCN data (0-based, as in C)."""
    dst_w = (src_w + 2 * pad - dilation * (knl_w - 1) - 1) // stride + 1
    dst_h = (src_h + 2 * pad - dilation * (knl_h - 1) - 1) // stride + 1
    dst = np.zeros(dst_w * dst_h * channels * batch)
    for b in range(batch):
        sb, db = b * src_w * src_h * channels, b * dst_w * dst_h * channels
        for ch in range(channels):
            for y in range(dst_h):
                for x in range(dst_w):
                    s = 0.0
                    for ky in range(knl_h):
                        for kx in range(knl_w):
                            sx = x * stride + kx * dilation - pad
                            sy = y * stride + ky * dilation - pad
                            if 0 <= sx < src_w and 0 <= sy < src_h:
                                s += src[sb + ch * src_w * src_h + sy * src_w + sx] * knl[ch * knl_w * knl_h + ky * knl_w + kx]
                    dst[db + ch * dst_w * dst_h + y * dst_w + x] = s
    return dst


def run_dw(channels, k, stride, pad, dilation):
    batch, src_w, src_h = 2, 8, 6
    ctx = ggml_init(64 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)
    src = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, src_w, src_h, channels, batch)
    knl = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, k, k, 1, channels)
    r = ggml_conv_2d_dw_direct(ctx, knl, src, stride, stride, pad, pad, dilation, dilation)

    be = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(be, 2)
    ggml_backend_alloc_ctx_tensors(ctx, be)

    sv = seq(-1, 1, length_out=src_w * src_h * channels * batch)
    kv = seq(-1, 1, length_out=k * k * channels)
    ggml_backend_tensor_set_data(src, sv)
    ggml_backend_tensor_set_data(knl, kv)

    gf = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(be, gf)
    return {"got": ggml_backend_tensor_get_data(r),
            "exp": conv_2d_dw_reference(src_w, src_h, sv, k, k, kv, channels, batch, stride, pad, dilation)}


# upstream WHCN configurations: (channels, kernel, stride, pad, dilation); one test_that block each in R
CONFIGS = [(3, 1, 1, 0, 1), (42, 3, 2, 1, 1), (8, 5, 1, 2, 2)]


@pytest.mark.parametrize("ch,k,s,p,d", CONFIGS, ids=[f"ch={c[0]} k={c[1]} s={c[2]} p={c[3]} d={c[4]}" for c in CONFIGS])
def test_conv_2d_dw_direct_matches_reference(ch, k, s, p, d):
    """conv_2d_dw_direct matches reference (ch=%d k=%d s=%d p=%d d=%d)"""
    res = run_dw(ch, k, s, p, d)
    assert length(res["got"]) == length(res["exp"])
    expect_equal(res["got"], res["exp"], tolerance=1e-4)
