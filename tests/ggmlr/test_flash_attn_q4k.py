"""ggmlR tests/testthat/test-flash-attn-q4k.R: flash attention with q4_K K and V, on the CPU and
(where a Vulkan device is listed, lavapipe included) Vulkan against the CPU."""
import numpy as np

import ggmlpy as g
from ._backends import run_graph, skip_without_vulkan


def run_fa(use_gpu, head_dim, n_heads, seq_len, q_raw, k_q, v_q, scale):
    def make(ctx):
        q = g.ggml_new_tensor_4d(ctx, g.GGML_TYPE_F32, head_dim, n_heads, seq_len, 1)
        k = g.ggml_new_tensor_4d(ctx, 12, head_dim, n_heads, seq_len, 1)
        v = g.ggml_new_tensor_4d(ctx, 12, head_dim, n_heads, seq_len, 1)
        return g.ggml_flash_attn_ext(ctx, q, k, v, None, scale, 0.0, 0.0), {"q": q, "k": k, "v": v}
    return run_graph(use_gpu, make, {"q": q_raw, "k": k_q, "v": v_q})


def data(seed, head_dim, n_heads, seq_len):
    rng = np.random.default_rng(seed)  # R's set.seed + rnorm, as numpy draws
    q_raw, k_raw, v_raw = (rng.standard_normal(head_dim * n_heads * seq_len) for _ in range(3))
    k_q = g.quantize_q4_K(k_raw, n_rows=n_heads * seq_len, n_per_row=head_dim)
    v_q = g.quantize_q4_K(v_raw, n_rows=n_heads * seq_len, n_per_row=head_dim)
    return q_raw, k_q, v_q


def test_q4_k_flash_attention_produces_finite_non_zero_output_on_cpu():
    head_dim, n_heads, seq_len = 256, 2, 16
    scale = 1.0 / np.sqrt(head_dim)
    res = run_fa(False, head_dim, n_heads, seq_len, *data(7, head_dim, n_heads, seq_len), scale)
    assert not np.any(np.isnan(res))
    assert not np.any(np.isinf(res))
    assert np.var(res) > 0


@skip_without_vulkan
def test_q4_k_flash_attention_gpu_matches_cpu():
    head_dim, n_heads, seq_len = 256, 4, 32
    scale = 1.0 / np.sqrt(head_dim)
    args = data(42, head_dim, n_heads, seq_len)
    cpu_out = run_fa(False, head_dim, n_heads, seq_len, *args, scale)
    gpu_out = run_fa(True, head_dim, n_heads, seq_len, *args, scale)
    assert not np.any(np.isnan(gpu_out))
    assert not np.any(np.isinf(gpu_out))
    assert np.corrcoef(cpu_out, gpu_out)[0, 1] > 0.999
    assert np.max(np.abs(cpu_out - gpu_out)) < 0.1
