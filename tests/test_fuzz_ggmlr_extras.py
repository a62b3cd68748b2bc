"""Random, often invalid, calls into the later ggmlR additions that reach ggml (get_batch into
tensors, the model-parallel forwards, contexts without static graphs, the matrix drop-ins) must
raise an allowed exception or succeed, never abort. Run in a child process, as test_fuzz.py."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "FUZZ-EXTRAS-COMPLETE"


def test_fuzz_extras_never_abort():
    r = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0 and MARKER in r.stdout, (r.stdout[-3000:], r.stderr[-3000:])


def main(n_examples=150, seed=5):
    import numpy as np
    from hypothesis import HealthCheck, given, seed as hseed, settings, strategies as st

    import ggmlpy as g
    from ggmlpy.bindings import lib
    from ggmlpy.errors import DeviceError, GGMLError
    allowed = (GGMLError, DeviceError, ValueError, TypeError, MemoryError, OverflowError, KeyError)
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu])
    dim = st.integers(-1, 5)
    f32, i32 = g.GGML_TYPE_F32, g.GGML_TYPE_I32

    def attempt(f, *a, **k):
        try:
            f(*a, **k)
        except allowed:
            pass

    @hseed(seed)
    @settings(max_examples=n_examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        d = data.draw
        kind = d(st.sampled_from(["batch", "pp", "tp", "dyn", "mm"]))
        if kind == "batch":
            ne_dp, ne_lab, ndata = d(st.integers(1, 4)), d(st.integers(0, 3)), d(st.integers(1, 8))
            ds = g.ggml_opt_dataset_init(f32, d(st.sampled_from([f32, i32])), ne_dp, ne_lab, ndata)
            ctx = g.ggml_init(1 << 20, no_alloc=True)
            tb = g.ggml_new_tensor_2d(ctx, d(st.sampled_from([f32, i32])), max(1, d(dim)), max(1, d(dim)))
            tl = g.ggml_new_tensor_2d(ctx, d(st.sampled_from([f32, i32])), max(1, d(dim)), max(1, d(dim)))
            if d(st.booleans()):
                g.ggml_backend_alloc_ctx_tensors(ctx, cpu)
            attempt(g.ggml_opt_dataset_get_batch, ds, tb, d(st.sampled_from([tl, None])), d(dim))
        elif kind == "pp":
            shape = tuple(d(st.lists(dim, min_size=0, max_size=5)))
            n = d(st.integers(0, 12))
            st1 = {"device": d(st.sampled_from(["cpu", 0, "nope", 1.5])), "in_shape": shape,
                   "build": lambda ctx, inp: g.ggml_scale(ctx, inp, 2.0)}
            st2 = {"device": "cpu", "in_shape": tuple(d(st.lists(st.integers(1, 6), min_size=1, max_size=2))),
                   "build": lambda ctx, inp: g.ggml_relu(ctx, inp)}
            attempt(g.ggml_pp_forward, d(st.sampled_from([[st1], [st1, st2], []])), np.ones(n),
                    tuple(d(st.lists(dim, max_size=3))))
        elif kind == "tp":
            W = np.ones((d(st.integers(0, 4)), d(st.integers(0, 4))))
            X = np.ones((d(st.integers(0, 4)), d(st.integers(0, 4))))
            reps = d(st.sampled_from([[["cpu"]], [["cpu", "cpu"]], [[]], [], [["cpu"], ["cpu"]]]))
            w = d(st.sampled_from([None, [1], [1, 0], [0, 0], [-1, 2], [float("nan"), 1]]))
            attempt(g.ggml_tp_dp_forward, W, X, reps, weights=w)
        elif kind == "dyn":
            opt = g.ggml_opt_init(sched, d(st.integers(0, 3)), d(st.integers(0, 1)), d(st.integers(1, 3)))
            ctx = g.ggml_init(d(st.sampled_from([1 << 17, 1 << 20])), no_alloc=d(st.booleans()))
            w = g.ggml_new_tensor_2d(ctx, f32, 2, 2)
            g.ggml_set_param(w)
            x = g.ggml_new_tensor_2d(ctx, f32, 2, d(st.integers(1, 3)))
            out = g.ggml_mul_mat(ctx, w, x) if d(st.booleans()) else g.ggml_sum(ctx, x)
            gf = g.ggml_build_forward_expand(ctx, out)
            for step in d(st.lists(st.sampled_from(["prep", "alloc", "eval", "epoch", "labels"]), max_size=5)):
                if step == "prep":
                    attempt(g.ggml_opt_prepare_alloc, opt, ctx, gf, x, d(st.sampled_from([out, x])))
                elif step == "alloc":
                    attempt(g.ggml_opt_alloc, opt, d(st.booleans()))
                elif step == "eval":
                    attempt(g.ggml_opt_eval, opt, None)
                elif step == "epoch":
                    attempt(g.ggml_opt_epoch, opt, g.ggml_opt_dataset_init(f32, f32, 2, 2, 4))
                else:
                    attempt(g.ggml_opt_labels, opt)
        else:
            a = np.ones(tuple(d(st.lists(st.integers(0, 3), max_size=3))))
            b = np.ones(tuple(d(st.lists(st.integers(0, 3), max_size=3))))
            f = d(st.sampled_from([g.ggml_matmul, g.ggml_crossprod, g.ggml_tcrossprod, g.ggml_matmul_f64]))
            attempt(f, a, b, device=d(st.sampled_from(["cpu", "gpu", "auto", "x"])))
    run()
    print(MARKER, flush=True)


if __name__ == "__main__":
    main()
