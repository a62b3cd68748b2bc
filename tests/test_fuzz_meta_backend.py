"""Random, often invalid, split answers and graphs on meta devices (ggml_backend_meta_device) must
raise GGMLError or compute the numpy result, never abort the process nor give a wrong number.
Run in a child process, as test_fuzz.py; with GGMLPY_SOFTWARE_VULKAN=1 lavapipe joins the devices."""
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "FUZZ-META-COMPLETE"


def test_fuzz_meta_backend_never_aborts_nor_miscomputes():
    r = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0 and MARKER in r.stdout, (r.stdout[-3000:], r.stderr[-3000:])


def _spec(rng, ne, n):
    """A split answer for a tensor of dims `ne` on n devices: valid or not, in every accepted form."""
    k = rng.integers(0, 10)
    if k == 0:
        return None
    if k == 1:
        return "mirrored"
    if k == 2:
        return "partial"
    if k in (3, 4, 5):
        return int(rng.integers(0, 4))
    if k == 6:
        return int(rng.choice([10, 11, 98, 99, 7, -1]))
    if k == 7:  # ggmlR's dict, sizes that add up (or, one time in five, do not)
        ax = int(rng.integers(0, 3))
        cuts = np.sort(rng.integers(0, ne[ax] + 1, n - 1)) if n > 1 else np.array([], int)
        parts = np.diff(np.concatenate([[0], cuts, [ne[ax]]])).tolist()
        if rng.random() < 0.2:
            parts[0] += 1
        return {"axis": ax, "ne": parts, "n_segments": 1}
    if k == 8:
        return (int(rng.integers(0, 3)), rng.integers(0, 4, n).tolist())
    return {"axis": 1, "ne": [1] * (2 * n), "n_segments": 2}


def main(n_cases=150, seed=11):
    import warnings

    import ggmlpy as g
    from ggmlpy import GGMLError
    warnings.simplefilter("ignore")  # the sticky-fallback warnings
    rng = np.random.default_rng(seed)
    cpu = g.ggml_backend_dev_by_type(g.ggml_backend_device_type_cpu())
    vk = g.ggml_backend_dev_by_name("Vulkan0")
    pool = [cpu] + ([vk] if vk is not None else [])
    ops = ["none", "relu", "scale", "bias", "sum", "soft_max", "transpose", "sum_rows", "mul"]
    computed = refused = 0
    for case in range(n_cases):
        n = int(rng.integers(1, 4))
        devs = [pool[int(rng.integers(0, len(pool)))] for _ in range(n)]
        K, M, N = (int(v) for v in rng.integers(1, 9, 3))
        specs = {"W": _spec(rng, (K, M, 1), n), "X": _spec(rng, (K, N, 1), n), "b": _spec(rng, (M, 1, 1), n)}
        op = ops[int(rng.integers(0, len(ops)))]
        w, x, bb = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (N, K), (M,)))
        try:
            meta = g.ggml_backend_meta_device(devs, specs)
            be = g.ggml_backend_dev_init(meta)
            ctx = g.ggml_init(1 << 20, no_alloc=True)
            W = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, K, M)
            X = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, K, N)
            b = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, M)
            for t, name in ((W, "W"), (X, "X"), (b, "b")):
                g.ggml_set_name(t, name)
            g.ggml_backend_alloc_ctx_tensors(ctx, be)
            for t, a in ((W, w), (X, x), (b, bb)):
                g.ggml_backend_tensor_set_data(t, a)
            for t, a in ((W, w), (X, x), (b, bb)):
                try:
                    assert np.array_equal(g.ggml_backend_tensor_get_data(t), a.ravel()), ("round trip", case, specs)
                except GGMLError:
                    pass
            cctx = g.ggml_init(1 << 20, no_alloc=True)
            y, ref = g.ggml_mul_mat(cctx, W, X), x @ w.T
            if op == "relu":
                y, ref = g.ggml_relu(cctx, y), np.maximum(ref, 0)
            elif op == "scale":
                y, ref = g.ggml_scale(cctx, y, 2.0), ref * 2
            elif op == "bias":
                y, ref = g.ggml_add(cctx, y, b), ref + bb
            elif op == "mul":
                y, ref = g.ggml_mul(cctx, y, b), ref * bb
            elif op == "sum":
                y, ref = g.ggml_sum(cctx, y), ref.sum().reshape(1)
            elif op == "soft_max":
                e = np.exp(ref - ref.max(1, keepdims=True))
                y, ref = g.ggml_soft_max(cctx, y), e / e.sum(1, keepdims=True)
            elif op == "transpose":
                y, ref = g.ggml_cont(cctx, g.ggml_transpose(cctx, y)), ref.T
            elif op == "sum_rows":
                y, ref = g.ggml_sum_rows(cctx, y), ref.sum(1, keepdims=True)
            gf = g.ggml_build_forward_expand(cctx, y)
            galloc = g.ggml_gallocr_new(be)
            g.ggml_gallocr_alloc_graph(galloc, gf)
            g.ggml_backend_graph_compute(be, gf)
            got = g.ggml_backend_tensor_get_data(y).reshape(ref.shape)
        except GGMLError:
            refused += 1
            continue
        tol = 2e-2 if vk in devs else 1e-4  # ggml's Vulkan matmul rounds src1 to f16
        assert np.allclose(got, ref, rtol=tol, atol=tol), ("wrong result", case, n, (K, M, N), specs, op)
        computed += 1
    assert computed > n_cases // 4 and refused > n_cases // 4, (computed, refused)
    print(MARKER, computed, refused)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
