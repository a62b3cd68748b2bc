"""inst/examples/functional_resnet_cifar.R: a ResNet-like Functional CNN on synthetic 32x32 RGB
images of 3 classes, history plot, evaluation, save/load."""
import numpy as np
import pytest

import ggmlpy as g

# The script trains on 600 images for 15 epochs; 4 convolutions over 32x32 images take minutes
# per run on this CPU, so the test trains on 150 images for 4 epochs (the patterns are easy).
N_TRAIN, N_TEST, EPOCHS = 150, 60, 4


def test_functional_resnet_cifar(capsys, tmp_path):
    pytest.importorskip("matplotlib", reason="the history plot needs matplotlib")
    rng = np.random.default_rng(123)   # set.seed(123)
    g.ggml_set_seed(123)

    # 1. Synthetic dataset (32x32 RGB images, 3 classes)
    IMG_H, IMG_W, IMG_C, N_CLASSES = 32, 32, 3, 3

    def make_image(cls):
        img = np.zeros((IMG_H, IMG_W, IMG_C))
        for c in range(1, IMG_C + 1):
            freq = cls + c
            if cls == 1:
                base = np.outer(np.sin(freq * np.linspace(0, np.pi, IMG_H)), np.ones(IMG_W))
            elif cls == 2:
                base = np.outer(np.ones(IMG_H), np.cos(freq * np.linspace(0, np.pi, IMG_W)))
            else:
                base = np.outer(np.sin(freq * np.linspace(0, np.pi, IMG_H)), np.cos(freq * np.linspace(0, np.pi, IMG_W)))
            img[:, :, c - 1] = (base + 1) / 2 + rng.normal(scale=0.15, size=(IMG_H, IMG_W))
        return np.clip(img, 0, 1)

    def gen_dataset(n_per_class):
        n_total = n_per_class * N_CLASSES
        x = np.zeros((n_total, IMG_H, IMG_W, IMG_C))
        y = np.zeros((n_total, N_CLASSES))
        idx = 0
        for cls in range(1, N_CLASSES + 1):
            for _ in range(n_per_class):
                x[idx] = make_image(cls)
                y[idx, cls - 1] = 1
                idx += 1
        shuf = rng.permutation(n_total)
        return {"x": x[shuf], "y": y[shuf]}

    print("Generating training data...")
    train_data = gen_dataset(N_TRAIN // N_CLASSES)
    test_data = gen_dataset(N_TEST // N_CLASSES)
    x_train, y_train = train_data["x"], train_data["y"]
    x_test, y_test = test_data["x"], test_data["y"]
    print("Train:", " x ".join(map(str, x_train.shape)), " | Test:", " x ".join(map(str, x_test.shape)))

    # 2. Helper: residual block
    def residual_block(x, filters, block_name):
        main = g.ggml_layer_conv_2d(x, filters, kernel_size=(3, 3), activation=None, padding="same",
                                    name=block_name + "_conv")
        shortcut = g.ggml_layer_conv_2d(x, filters, kernel_size=(1, 1), activation=None, padding="same",
                                        name=block_name + "_proj")
        return g.ggml_layer_add([main, shortcut], name=block_name + "_add")

    # 3. Build model
    inp = g.ggml_input(shape=(IMG_H, IMG_W, IMG_C), name="image")
    x = g.ggml_layer_conv_2d(inp, 16, kernel_size=(3, 3), activation="relu", padding="same", name="stem_conv")
    x = residual_block(x, 16, "res1")
    x = residual_block(x, 32, "res2")
    output = g.ggml_layer_global_average_pooling_2d(x, name="gap")
    output = g.ggml_layer_dropout(output, rate=0.4, name="drop")
    output = g.ggml_layer_dense(output, 32, activation="relu", name="fc")
    output = g.ggml_layer_dense(output, N_CLASSES, activation="softmax", name="predictions")
    model = g.ggml_model(inputs=inp, outputs=output)
    print("\nModel summary:")
    print(model)

    # 4. Compile
    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])

    # 5. Train
    print("\nTraining ResNet-like model...")
    model = g.ggml_fit(model, x_train, y_train, epochs=EPOCHS, batch_size=32, validation_split=0.15, verbose=1)

    # 6. Plot training history (a PNG when not interactive)
    png_path = tmp_path / "history.png"
    model.history.plot(png_path)
    print("\nHistory plot saved to:", png_path)

    # 7. Evaluate
    score = g.ggml_evaluate(model, x_test, y_test, batch_size=32)
    print("\nTest loss    :", round(score["loss"], 4))
    print("Test accuracy:", round(score["accuracy"], 4))
    probs = g.ggml_predict(model, x_test, batch_size=32)
    classes = np.argmax(probs, axis=1) + 1
    true = np.argmax(y_test[:probs.shape[0]], axis=1) + 1
    print("\nPer-class accuracy:")
    for cls in range(1, N_CLASSES + 1):
        mask = true == cls
        if mask.any():
            print(f"  Class {cls}: {np.mean(classes[mask] == cls) * 100:.1f}%")

    # 8. Save / load
    path = tmp_path / "model.rds"
    g.ggml_save_model(model, path)
    print("\nModel saved to:", path, "(", round(path.stat().st_size / 1024, 1), "KB)")
    model2 = g.ggml_load_model(path)
    score2 = g.ggml_evaluate(model2, x_test, y_test, batch_size=32)
    print("Loaded model test accuracy:", round(score2["accuracy"], 4))

    out = capsys.readouterr().out
    h = model.history["train_loss"]
    assert len(h) == EPOCHS and np.all(np.isfinite(h)) and h[-1] < h[0]
    assert "res2_add" in out and "(32, 32, 32)" in out  # the nodes, with their shapes
    assert score["accuracy"] > 1 / N_CLASSES + 0.1
    assert png_path.stat().st_size > 0 and score2["accuracy"] == score["accuracy"]
