"""ggmlR tests/testthat/test-flash-attn-quants.R: flash attention with q4_0, q4_1, q5_0, q5_1,
q8_0 and iq4_nl K/V on Vulkan against the CPU (skipped without a Vulkan device; lavapipe counts)."""
import numpy as np
import pytest

import ggmlpy as g
from ._backends import run_graph, skip_without_vulkan

CASES = [("Q4_0", g.GGML_TYPE_Q4_0, g.quantize_q4_0, 11), ("Q4_1", g.GGML_TYPE_Q4_1, g.quantize_q4_1, 13),
         ("Q5_0", 6, g.quantize_q5_0, 17), ("Q5_1", 7, g.quantize_q5_1, 19),
         ("Q8_0", g.GGML_TYPE_Q8_0, g.quantize_q8_0, 23), ("IQ4_NL", 20, g.quantize_iq4_nl, 29)]


def run_fa_quant(use_gpu, ggml_type, quantize_fn, head_dim, n_heads, seq_len, q_raw, k_raw, v_raw, scale):
    k_q = quantize_fn(k_raw, n_rows=n_heads * seq_len, n_per_row=head_dim)
    v_q = quantize_fn(v_raw, n_rows=n_heads * seq_len, n_per_row=head_dim)

    def make(ctx):
        q = g.ggml_new_tensor_4d(ctx, g.GGML_TYPE_F32, head_dim, n_heads, seq_len, 1)
        k = g.ggml_new_tensor_4d(ctx, ggml_type, head_dim, n_heads, seq_len, 1)
        v = g.ggml_new_tensor_4d(ctx, ggml_type, head_dim, n_heads, seq_len, 1)
        return g.ggml_flash_attn_ext(ctx, q, k, v, None, scale, 0.0, 0.0), {"q": q, "k": k, "v": v}
    return run_graph(use_gpu, make, {"q": q_raw, "k": k_q, "v": v_q})


@skip_without_vulkan
@pytest.mark.parametrize("name,ggml_type,fn,seed", CASES, ids=[c[0] for c in CASES])
def test_flash_attention_gpu_matches_cpu(name, ggml_type, fn, seed):
    head_dim, n_heads, seq_len = 256, 4, 32
    scale = 1.0 / np.sqrt(head_dim)
    rng = np.random.default_rng(seed)
    raws = [rng.standard_normal(head_dim * n_heads * seq_len) for _ in range(3)]
    cpu_out = run_fa_quant(False, ggml_type, fn, head_dim, n_heads, seq_len, *raws, scale)
    gpu_out = run_fa_quant(True, ggml_type, fn, head_dim, n_heads, seq_len, *raws, scale)
    assert not np.any(np.isnan(gpu_out))
    assert not np.any(np.isinf(gpu_out))
    assert np.corrcoef(cpu_out, gpu_out)[0, 1] > 0.999
    assert np.max(np.abs(cpu_out - gpu_out)) < 0.1
