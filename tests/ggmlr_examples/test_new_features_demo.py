"""inst/examples/new_features_demo.R: batch_norm, summary, history (printed and plotted),
predict_classes, freeing the compiled model's scheduler and backend, Conv1D shape inference."""
import numpy as np
import pytest

import ggmlpy as g


def test_new_features_demo(capsys, tmp_path):
    pytest.importorskip("matplotlib", reason="the history plot needs matplotlib")
    print("=== ggmlR 0.5.3 New Features Demo ===\n")

    # 1. Dense model with batch_norm, predict_classes, summary, history
    print("--- 1. Dense + batch_norm model ---\n")
    rng = np.random.default_rng(42)   # set.seed(42)
    g.ggml_set_seed(42)
    n = 256
    x = rng.uniform(size=(n, 4))
    y = np.zeros((n, 3))
    for i in range(n):
        s = x[i].sum()
        cls = 1 if s < 1.5 else 2 if s < 2.5 else 3
        y[i, cls - 1] = 1

    model = g.ggml_model_sequential()
    model = g.ggml_layer_dense(model, 32, activation="relu")
    model = g.ggml_layer_batch_norm(model)
    model = g.ggml_layer_dense(model, 16, activation="relu")
    model = g.ggml_layer_dense(model, 3, activation="softmax")
    model.input_shape = 4

    print("Model summary:")
    g.ggml_model_summary(model)
    print()

    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy")
    model = g.ggml_fit(model, x, y, epochs=10, batch_size=32, validation_split=0.2, verbose=1)

    print("\nTraining history:")
    print(model.history)

    # the script plots to a temporary PNG when not interactive
    png = tmp_path / "history.png"
    model.history.plot(png)
    print("(History plot saved to temp file)")

    classes = g.ggml_predict_classes(model, x, batch_size=32)
    true_classes = np.argmax(y, axis=1) + 1          # apply(y, 1, which.max)
    acc = np.mean(classes == true_classes)
    print("\npredict_classes accuracy:", f"{acc * 100:.1f}%")
    print("First 10 predicted:", *classes[:10])
    print("First 10 true:     ", *true_classes[:10])

    # Cleanup
    g.ggml_backend_sched_free(model.compilation["sched"])
    g.ggml_backend_free(model.compilation["backend"])

    # 2. Conv1D model (shape inference demo only)
    print("\n--- 2. Conv1D model (shape inference) ---\n")
    model_1d = g.ggml_model_sequential()
    model_1d = g.ggml_layer_conv_1d(model_1d, 16, kernel_size=5, activation="relu", input_shape=(50, 2))
    model_1d = g.ggml_layer_conv_1d(model_1d, 32, kernel_size=3, activation="relu")
    model_1d = g.ggml_layer_flatten(model_1d)
    model_1d = g.ggml_layer_dense(model_1d, 16, activation="relu")
    model_1d = g.ggml_layer_dense(model_1d, 2, activation="softmax")
    print("Conv1D model summary:")
    g.ggml_model_summary(model_1d)
    print("\n=== Demo complete ===")

    out = capsys.readouterr().out
    h = model.history
    assert len(h["train_loss"]) == 10 and np.all(np.isfinite(h["train_loss"]))
    assert h["train_loss"][-1] < h["train_loss"][0]
    assert acc > 0.5  # three classes: chance is about 1/3 (most samples sum to 1.5..2.5)
    assert png.stat().st_size > 0
    assert out.count("Model Summary (Sequential)") == 2 and "Total params: 803" in out  # 160+64+528+51
    assert "Total params: 24322" in out  # 176+1568+22544+34
    assert "(None, 46, 16)" in out and "(None, 44, 32)" in out and "(None, 1408)" in out
    assert "Training History (10 epochs)" in out and "=== Demo complete ===" in out
    # freed as the script does: the model makes a new backend and scheduler when it runs again
    np.testing.assert_array_equal(g.ggml_predict_classes(model, x, batch_size=32), classes)
