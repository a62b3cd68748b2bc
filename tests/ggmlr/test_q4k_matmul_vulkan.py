"""ggmlR tests/testthat/test-q4k-matmul-vulkan.R: quantized mul_mat on Vulkan against the CPU, in
the shapes that once broke q4_K (skipped without a Vulkan device; lavapipe counts)."""
import numpy as np

import ggmlpy as g
from ._backends import run_graph, skip_without_vulkan


def run_quant_mm(use_gpu, qtype, qfn, M, K, N):
    rng = np.random.default_rng(42)
    a_raw = rng.normal(0, 0.1, (M, K))          # numpy (M, K) C order: R's as.vector(t(a_raw))
    b_raw = rng.normal(0, 0.1, (N, K))          # ggml ne [K, N]: R's as.vector(b_raw) for [K, N]
    a_q = qfn(a_raw.ravel(), n_rows=M, n_per_row=K)

    def make(ctx):
        a = g.ggml_new_tensor_2d(ctx, qtype, K, M)
        b = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, K, N)
        return g.ggml_mul_mat(ctx, a, b), {"a": a, "b": b}
    return run_graph(use_gpu, make, {"a": a_q, "b": b_raw})


def expect_backends_agree(qname, qtype, qfn, M, K, N):
    cpu = run_quant_mm(False, qtype, qfn, M, K, N)
    gpu = run_quant_mm(True, qtype, qfn, M, K, N)
    cc = np.corrcoef(cpu, gpu)[0, 1]
    md = np.max(np.abs(cpu - gpu))
    info = f"{qname} M={M} K={K} N={N} cor={cc:.5f} max|diff|={md:.4f}"
    assert cc > 0.999, info
    assert md < 0.1, info


@skip_without_vulkan
def test_q4_k_matmul_vulkan_equals_cpu_small_n():
    expect_backends_agree("Q4_K", g.GGML_TYPE_Q4_K, g.quantize_q4_K, M=512, K=512, N=64)


@skip_without_vulkan
def test_q4_k_matmul_vulkan_equals_cpu_large_n():
    expect_backends_agree("Q4_K", g.GGML_TYPE_Q4_K, g.quantize_q4_K, M=1024, K=1024, N=2560)


@skip_without_vulkan
def test_control_quants_vulkan_equals_cpu():
    expect_backends_agree("Q6_K", g.GGML_TYPE_Q6_K, g.quantize_q6_K, M=512, K=512, N=64)
    expect_backends_agree("Q4_0", g.GGML_TYPE_Q4_0, g.quantize_q4_0, M=512, K=512, N=64)
    expect_backends_agree("Q8_0", g.GGML_TYPE_Q8_0, g.quantize_q8_0, M=512, K=512, N=64)
