"""ggml_backend_sched: one graph across devices, with weights split between them."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import ggmlpy as g

ROOT = pathlib.Path(__file__).resolve().parent.parent

SPLIT_MODEL = r"""
import numpy as np, ggmlpy as g
vk = [d.name for d in g.devices() if d.backend == "Vulkan"]
if not vk:
    print("no vulkan device"); raise SystemExit(0)
gpu, cpu = g.ggml_backend_init_by_name(vk[0]), g.ggml_backend_cpu_init()
rng = np.random.default_rng(0)
w1, w2, x = rng.normal(size=(64, 64)) * 0.1, rng.normal(size=(64, 64)) * 0.1, rng.normal(size=(8, 64))
on_gpu, on_cpu = g.ggml_init(1 << 20, no_alloc=True), g.ggml_init(1 << 20, no_alloc=True)
W1 = g.ggml_new_tensor_2d(on_gpu, g.GGML_TYPE_F32, 64, 64)  # half of the model in GPU memory,
W2 = g.ggml_new_tensor_2d(on_cpu, g.GGML_TYPE_F32, 64, 64)  # half in host memory
X = g.ggml_new_tensor_2d(on_cpu, g.GGML_TYPE_F32, 64, 8)
g.ggml_backend_alloc_ctx_tensors(on_gpu, gpu)
g.ggml_backend_alloc_ctx_tensors(on_cpu, cpu)
for t, v in ((W1, w1), (W2, w2), (X, x)):
    g.ggml_set_f32(t, v)
ctx = g.ggml_init(1 << 20, no_alloc=True)
h = g.ggml_relu(ctx, g.ggml_mul_mat(ctx, W1, X))
y = g.ggml_set_output(g.ggml_mul_mat(ctx, W2, h))
gf = g.ggml_build_forward_expand(ctx, y)
sched = g.ggml_backend_sched_new([gpu, cpu])
g.ggml_backend_sched_graph_compute(sched, gf)
ref = np.maximum(x @ w1.T, 0) @ w2.T  # mul_mat(a, b) in numpy layout is b @ a.T
err = np.abs(g.ggml_get_f32(y) - ref).max() / np.abs(ref).max()
print(f"relerr {err:.2e} splits {sched.n_splits()} first layer on {sched.tensor_backend(h)}")
assert err < 5e-3, err
print("ok")
"""


def test_a_model_split_between_vulkan_and_cpu_memory():
    if "Vulkan" not in g.backends():
        pytest.skip("this libggml has no Vulkan backend (python build_ggml.py --backend vulkan)")
    env = dict(os.environ, GGMLPY_SOFTWARE_VULKAN="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SPLIT_MODEL], capture_output=True, text=True, timeout=300,
                         env=env, cwd=ROOT)
    if "no vulkan device" in out.stdout:
        pytest.skip("no Vulkan device, not even lavapipe (apt-get install mesa-vulkan-drivers)")
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_scheduler_on_two_cpu_backends_matches_numpy():
    a_be, b_be = g.ggml_backend_cpu_init(), g.ggml_backend_cpu_init()
    weights = g.ggml_init(1 << 20, no_alloc=True)
    W = g.ggml_new_tensor_2d(weights, g.GGML_TYPE_F32, 16, 16)
    X = g.ggml_new_tensor_2d(weights, g.GGML_TYPE_F32, 16, 4)
    g.ggml_backend_alloc_ctx_tensors(weights, a_be)
    w, x = np.random.default_rng(1).normal(size=(16, 16)), np.random.default_rng(2).normal(size=(4, 16))
    g.ggml_set_f32(W, w)
    g.ggml_set_f32(X, x)
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    y = g.ggml_set_output(g.ggml_tanh(ctx, g.ggml_mul_mat(ctx, W, X)))
    gf = g.ggml_build_forward_expand(ctx, y)
    sched = g.ggml_backend_sched_new([a_be, b_be])
    g.ggml_backend_sched_graph_compute(sched, gf)
    np.testing.assert_allclose(g.ggml_get_f32(y), np.tanh(x @ w.T), rtol=1e-5, atol=1e-6)


def test_scheduler_rejects_what_ggml_would_abort_on():
    cpu = g.ggml_backend_cpu_init()
    with pytest.raises(g.GGMLError, match="1 to"):
        g.ggml_backend_sched_new([])
    with pytest.raises(g.GGMLError, match="twice"):
        g.ggml_backend_sched_new([cpu, cpu])
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    a = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 4)  # never allocated
    gf = g.ggml_build_forward_expand(ctx, g.ggml_exp(ctx, a))
    with pytest.raises(g.GGMLError, match="backend buffer"):
        g.ggml_backend_sched_graph_compute(g.ggml_backend_sched_new([cpu]), gf)
