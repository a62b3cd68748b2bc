"""inst/examples/functional_multiinput_true.R: two separate inputs (a window of a series and its
statistics), concatenated, binary classification; save/load round trip."""
import numpy as np

import ggmlpy as g


def test_functional_multiinput_true(capsys, tmp_path):
    rng = np.random.default_rng(99)   # set.seed(99)
    g.ggml_set_seed(99)

    # 1. Synthetic dataset
    T_LEN, N_META, N = 20, 3, 640

    def make_sample():
        freq, amp = rng.uniform(0.5, 3.0), rng.uniform(0.5, 2.0)
        phase, noise = rng.uniform(0, 2 * np.pi), rng.uniform(0.02, 0.2)
        t = 0.1 * np.arange(T_LEN + 1)
        y_raw = amp * np.sin(2 * np.pi * freq * t + phase) + rng.normal(scale=noise, size=T_LEN + 1)
        series, target = y_raw[:T_LEN], y_raw[T_LEN]
        meta = [series.mean() / amp, series.std(ddof=1) / amp, (series[T_LEN - 1] - series[0]) / (T_LEN * amp)]
        label = [1, 0] if target > series.mean() else [0, 1]
        return {"ts": series, "meta": meta, "y": label}

    samples = [make_sample() for _ in range(N)]
    x1_all = np.array([s["ts"] for s in samples])      # [N, T_LEN]
    x2_all = np.array([s["meta"] for s in samples])    # [N, N_META]
    y_all = np.array([s["y"] for s in samples], dtype=float)
    n_train = 512
    x1_train, x1_test = x1_all[:n_train], x1_all[n_train:]
    x2_train, x2_test = x2_all[:n_train], x2_all[n_train:]
    y_train, y_test = y_all[:n_train], y_all[n_train:]
    print(f"Train: x1={x1_train.shape[0]}x{x1_train.shape[1]}  x2={x2_train.shape[0]}x{x2_train.shape[1]}  "
          f"y={y_train.shape[0]}x{y_train.shape[1]}")

    # 2. Build model - two separate inputs
    inp1 = g.ggml_input(shape=T_LEN, name="timeseries")
    inp2 = g.ggml_input(shape=N_META, name="metadata")
    branch1 = g.ggml_layer_dense(inp1, 16, activation="relu", name="ts_fc1")
    branch1 = g.ggml_layer_dense(branch1, 8, activation="relu", name="ts_fc2")
    branch2 = g.ggml_layer_dense(inp2, 8, activation="relu", name="meta_fc")
    merged = g.ggml_layer_concatenate([branch1, branch2], axis=0, name="concat")
    output = g.ggml_layer_dense(merged, 8, activation="relu", name="head_fc")
    output = g.ggml_layer_dense(output, 2, activation="softmax", name="predictions")
    model = g.ggml_model(inputs=[inp1, inp2], outputs=output)
    print("\nModel summary:")
    print(model)

    # 3. Compile
    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])

    # 4. Train (x passed as list of two matrices)
    print("\nTraining...")
    model = g.ggml_fit(model, x=[x1_train, x2_train], y=y_train, epochs=15, batch_size=32,
                       validation_split=0.1, verbose=1)

    # 5. Evaluate
    score = g.ggml_evaluate(model, x=[x1_test, x2_test], y=y_test, batch_size=32)
    print(f"\nTest loss    : {score['loss']:.4f}")
    print(f"Test accuracy: {score['accuracy']:.4f}")

    # 6. Predict
    probs = g.ggml_predict(model, x=[x1_test, x2_test], batch_size=32)
    classes = np.argmax(probs, axis=1)
    true = np.argmax(y_test, axis=1)
    n_show = min(len(true), len(classes))
    print("\nConfusion matrix (rows = true, cols = predicted):")
    table = np.zeros((2, 2), dtype=int)
    np.add.at(table, (true[:n_show], classes[:n_show]), 1)
    print(table)

    # 7. Save / load round-trip
    path = tmp_path / "model.rds"
    g.ggml_save_model(model, path)
    print(f"\nModel saved to: {path} ({path.stat().st_size / 1024:.1f} KB)")
    model2 = g.ggml_load_model(path)
    score2 = g.ggml_evaluate(model2, x=[x1_test, x2_test], y=y_test, batch_size=32)
    print(f"Loaded model test accuracy: {score2['accuracy']:.4f}")

    out = capsys.readouterr().out
    h = model.history["train_loss"]
    assert np.all(np.isfinite(h)) and h[-1] < h[0]
    assert "concat" in out and "ts_fc2, meta_fc" in out
    majority = max(y_test.mean(axis=0))
    assert score["accuracy"] > majority  # better than always answering the larger class
    assert table.sum() == 128 and score2["accuracy"] == score["accuracy"]
