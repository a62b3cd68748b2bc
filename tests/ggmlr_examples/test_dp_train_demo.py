"""inst/examples/dp_train_demo.R: dp_train with 1, 2 and N replicas, plain-matrix samples, and the
script's own built-in checks (here asserted)."""
import numpy as np

import ggmlpy as g


def test_dp_train_demo(capsys):
    print("ggmlR version:", g.ggml_version())
    try:
        n_avail = g.ggml_vulkan_device_count()
    except g.GGMLError:
        n_avail = 0
    print(f"Vulkan GPUs available: {n_avail}")

    # 0. Hyperparameters
    rng = np.random.default_rng(42)   # set.seed(42L)
    g.ggml_set_seed(42)
    D_IN, D_HID, D_OUT = 4, 16, 2
    N, N_ITER, LR = 128, 100, 5e-3

    # 1. Synthetic dataset  y = W_true * x + noise
    W_true = np.array([0.5, -0.3, 0.8, -0.1, 0.2, 0.6, -0.4, 0.9]).reshape((D_OUT, D_IN), order="F")
    X = rng.normal(size=(D_IN, N))
    Y = W_true @ X + rng.normal(scale=0.05, size=(D_OUT, N))
    dataset = [{"x": X[:, [i]], "y": Y[:, [i]]} for i in range(N)]   # list(x=[D_IN,1], y=[D_OUT,1])
    print(f"\nDataset: {N} samples, x=[{D_IN},1], y=[{D_OUT},1]")

    # 2. Model factory (Linear -> ReLU -> Linear)
    def make_model():
        W1 = g.ag_param(rng.normal(size=(D_HID, D_IN)) * np.sqrt(2 / D_IN))
        b1 = g.ag_param(np.zeros((D_HID, 1)))
        W2 = g.ag_param(rng.normal(size=(D_OUT, D_HID)) * np.sqrt(2 / D_HID))
        b2 = g.ag_param(np.zeros((D_OUT, 1)))

        def forward(x):
            h = g.ag_relu(g.ag_add(g.ag_matmul(W1, x), b1))
            return g.ag_add(g.ag_matmul(W2, h), b2)
        return {"forward": forward, "parameters": lambda: {"W1": W1, "b1": b1, "W2": W2, "b2": b2}}

    def forward_fn(model, s):
        return model["forward"](s["x"])   # a plain matrix as x, as in ggmlR

    def target_fn(s):
        return s["y"]

    def loss_fn(out, tgt):
        return g.ag_mse_loss(out, tgt)

    # 3. 1 replica
    print("--- 1 replica  (CPU, effective batch = 1) ---")
    result_1 = g.dp_train(make_model=make_model, data=dataset, loss_fn=loss_fn, forward_fn=forward_fn,
                          target_fn=target_fn, n_gpu=1, n_iter=N_ITER, lr=LR, max_norm=5.0, verbose=25)
    print(f"Loss: {result_1['loss_history'][0]:.4f} → {result_1['loss_history'][-1]:.4f}\n")

    # 4. 2 replicas
    n_rep2 = 2
    print(f"--- 2 replicas ({'GPU' if n_avail >= 1 else 'CPU'}, effective batch = 2) ---")
    result_2 = g.dp_train(make_model=make_model, data=dataset, loss_fn=loss_fn, forward_fn=forward_fn,
                          target_fn=target_fn, n_gpu=n_rep2, n_iter=N_ITER, lr=LR, max_norm=5.0, verbose=25)
    print(f"Loss: {result_2['loss_history'][0]:.4f} → {result_2['loss_history'][-1]:.4f}\n")

    # 5. N replicas
    n_repN = n_avail if n_avail >= 2 else 4
    print(f"--- {n_repN} replica(s) ({'multi-GPU' if n_avail >= 2 else 'CPU'}, effective batch = {n_repN}) ---")
    result_N = g.dp_train(make_model=make_model, data=dataset, loss_fn=loss_fn, forward_fn=forward_fn,
                          target_fn=target_fn, n_gpu=n_repN, n_iter=N_ITER, lr=LR, max_norm=5.0, verbose=25)
    print(f"Loss: {result_N['loss_history'][0]:.4f} → {result_N['loss_history'][-1]:.4f}\n")

    # 6. Inference with trained model (replica 0 from last run)
    print("--- Inference (replica 0 from last run) ---")
    x_new = rng.normal(size=(D_IN, 4))
    with g.with_grad_tape():
        pred = result_N["model"]["forward"](g.ag_tensor(x_new))
    print("Predictions (4 samples):")
    print(np.round(pred.data, 3))

    # 7. Built-in checks
    print("\n--- Checks ---")
    checks = []

    def check(cond, msg):
        print(f"  {'PASS' if cond else 'FAIL'}  {msg}")
        checks.append((bool(cond), msg))

    third = N_ITER // 3
    h1, h2, hN = result_1["loss_history"], result_2["loss_history"], result_N["loss_history"]
    check(len(h1) == N_ITER, "loss_history length (1 replica)")
    check(len(h2) == N_ITER, "loss_history length (2 replicas)")
    check(len(hN) == N_ITER, f"loss_history length ({n_repN} replicas)")
    check(np.all(np.isfinite(h1)), "no NaN/Inf (1 replica)")
    check(np.all(np.isfinite(h2)), "no NaN/Inf (2 replicas)")
    check(np.all(np.isfinite(hN)), f"no NaN/Inf ({n_repN} replicas)")
    check(np.mean(h1[-third:]) < np.mean(h1[:third]), "loss decreased (1 replica)")
    check(np.mean(h2[-third:]) < np.mean(h2[:third]), "loss decreased (2 replicas)")
    check(np.mean(hN[-third:]) < np.mean(hN[:third]), f"loss decreased ({n_repN} replicas)")
    check(all(k in result_N for k in ("params", "loss_history", "model")), "result has params / loss_history / model")
    check(np.mean(h2[-third:]) <= np.mean(h1[-third:]) * 1.5, "2-replica loss not worse than 1-replica (true DP sanity)")
    check(g.ag_default_device() == "cpu", "device restored to CPU after dp_train")
    check(np.all(np.isfinite(pred.data)), "inference output is finite")
    ok = all(c for c, _ in checks)
    print("\nAll checks passed." if ok else "\nSome checks FAILED.")

    out = capsys.readouterr().out
    assert ok, [m for c, m in checks if not c]
    assert "dp_train: iteration 100/100" in out and "All checks passed." in out
