"""inst/examples/functional_multiinput_timeseries.R: a dual-branch Functional regression model,
trained with adam then fine-tuned with sgd, evaluated, saved and loaded."""
import numpy as np

import ggmlpy as g


def test_functional_multiinput_timeseries(capsys, tmp_path):
    rng = np.random.default_rng(7)   # set.seed(7)
    g.ggml_set_seed(7)

    # 1. Synthetic dataset
    T_LEN, N_META = 40, 4
    N_IN = T_LEN + N_META
    N_TOTAL, N_TRAIN = 1000, 800

    def make_sample(i):
        freq, amp = rng.uniform(0.5, 3.0), rng.uniform(0.5, 2.0)
        phase, noise = rng.uniform(0, 2 * np.pi), rng.uniform(0.01, 0.3)
        t = i * 0.1 + 0.1 * np.arange(T_LEN + 1)
        series = amp * np.sin(2 * np.pi * freq * t + phase) + rng.normal(scale=noise, size=T_LEN + 1)
        return np.concatenate([series[:T_LEN], [freq, amp, phase / (2 * np.pi), noise], [series[T_LEN]]])

    mat = np.vstack([make_sample(i) for i in range(1, N_TOTAL + 1)])
    x_all = mat[:, :N_IN]                       # [N, 44]
    y_all = mat[:, [N_IN]]                      # [N, 1]
    x_train, y_train = x_all[:N_TRAIN], y_all[:N_TRAIN]
    x_test, y_test = x_all[N_TRAIN:], y_all[N_TRAIN:]
    print("Train:", " x ".join(map(str, x_train.shape)), " | Test:", " x ".join(map(str, x_test.shape)))

    # 2. Build model
    inp = g.ggml_input(shape=N_IN, name="features")
    branch_a = g.ggml_layer_dense(inp, 16, activation="relu", name="branch_a")
    branch_b = g.ggml_layer_dense(inp, 16, activation="relu", name="branch_b")
    merged = g.ggml_layer_add([branch_a, branch_b], name="add_merge")
    output = g.ggml_layer_dense(merged, 1, name="out")
    model = g.ggml_model(inputs=inp, outputs=output)
    print("\nModel summary:")
    print(model)

    # 3. Compile
    model = g.ggml_compile(model, optimizer="adam", loss="mse", metrics=["mae"])

    # 4. Train - phase 1: full model
    print("\nPhase 1: training full model...")
    model = g.ggml_fit(model, x_train, y_train, epochs=10, batch_size=64, validation_split=0.1, verbose=1)
    phase1 = list(model.history["train_loss"])

    # 5. Fine-tune with SGD
    print("\nPhase 2: fine-tuning with lower learning rate (SGD)...")
    model = g.ggml_compile(model, optimizer="sgd", loss="mse", metrics=["mae"])
    model = g.ggml_fit(model, x_train, y_train, epochs=5, batch_size=64, validation_split=0.1, verbose=1)

    # 6. Evaluate
    score = g.ggml_evaluate(model, x_test, y_test, batch_size=64)
    print("\nTest MSE:", round(score["loss"], 5))
    if score.get("mae") is not None:
        print("Test MAE:", round(score["mae"], 5))
    preds = g.ggml_predict(model, x_test, batch_size=64)
    n_pred = preds.shape[0]
    y_cmp = y_test[:n_pred]
    ss_res = np.sum((y_cmp - preds) ** 2)
    ss_tot = np.sum((y_cmp - y_cmp.mean()) ** 2)
    r2 = 1 - ss_res / ss_tot
    print("Test R²:", round(r2, 4))

    # 7. Save / load
    path = tmp_path / "model.rds"
    g.ggml_save_model(model, path)
    print("\nModel saved to:", path, "(", round(path.stat().st_size / 1024, 1), "KB)")
    model2 = g.ggml_load_model(path)
    score2 = g.ggml_evaluate(model2, x_test, y_test, batch_size=64)
    print("Loaded model Test MSE:", round(score2["loss"], 5))

    out = capsys.readouterr().out
    assert "add_merge" in out and "object at 0x" not in out
    assert np.all(np.isfinite(phase1)) and phase1[-1] < phase1[0]
    assert np.isfinite(score["loss"]) and score["mae"] > 0
    assert r2 > 0.1  # better than the mean: the last values of a sine wave tell about the next one
    assert preds.shape == (200, 1)
    np.testing.assert_allclose(score2["loss"], score["loss"], rtol=1e-6)
