"""inst/examples/mnist_cnn.R: a Sequential CNN on handwritten digits, evaluated, predicted, saved."""
import numpy as np
import pytest

import ggmlpy as g


def read_mnist():
    """The script reads MNIST with dslabs::read_mnist() (a download). Here: scikit-learn's bundled
    digits (1797 images of 8x8, 0..16), each pixel made a 3x3 block and the 24x24 image padded to
    MNIST's 28x28 and 0..255, split 1200 / 597 (MNIST's 60000 / 10000 would take minutes)."""
    datasets = pytest.importorskip("sklearn.datasets", reason="the digits come from scikit-learn")
    d = datasets.load_digits()
    images = np.pad(np.kron(d.images, np.ones((3, 3))), ((0, 0), (2, 2), (2, 2))) * (255 / 16)
    flat = images.reshape(len(images), 28 * 28)
    return {"train": {"images": flat[:1200], "labels": d.target[:1200]},
            "test": {"images": flat[1200:], "labels": d.target[1200:]}}


def test_mnist_cnn(capsys, tmp_path):
    g.ggml_set_seed(1)
    mnist = read_mnist()

    # Convert to keras3-like format
    x_train = mnist["train"]["images"].reshape(-1, 28, 28) / 255.0
    y_train = mnist["train"]["labels"]
    x_test = mnist["test"]["images"].reshape(-1, 28, 28) / 255.0
    y_test = mnist["test"]["labels"]

    def to_categorical(y, num_classes=10):
        y_cat = np.zeros((len(y), num_classes))
        for i in range(len(y)):
            y_cat[i, y[i]] = 1
        return y_cat

    y_train = to_categorical(y_train, 10)
    y_test = to_categorical(y_test, 10)

    # Reshape for CNN: [N, H, W] -> [N, H, W, C]
    x_train = x_train.reshape(x_train.shape + (1,))
    x_test = x_test.reshape(x_test.shape + (1,))
    print("Training data shape:", " x ".join(map(str, x_train.shape)))
    print("Training labels shape:", " x ".join(map(str, y_train.shape)))
    print("Test data shape:", " x ".join(map(str, x_test.shape)))

    # --- Build Model ---
    model = g.ggml_model_sequential()
    model = g.ggml_layer_conv_2d(model, filters=32, kernel_size=(3, 3), activation="relu", input_shape=(28, 28, 1))
    model = g.ggml_layer_max_pooling_2d(model, pool_size=(2, 2))
    model = g.ggml_layer_flatten(model)
    model = g.ggml_layer_dense(model, units=128, activation="relu")
    model = g.ggml_layer_dense(model, units=10, activation="softmax")
    print(model)

    # --- Compile ---
    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    print("\nModel compiled. Starting training...\n")

    # --- Train ---
    model = g.ggml_fit(model, x_train, y_train, epochs=5, batch_size=128, validation_split=0.2)

    # --- Evaluate ---
    score = g.ggml_evaluate(model, x_test, y_test, batch_size=128)
    print("\nTest loss:", score["loss"])
    print("Test accuracy:", score["accuracy"])

    # --- Predict ---
    preds = g.ggml_predict(model, x_test, batch_size=128)
    print("\nPrediction matrix shape:", " x ".join(map(str, preds.shape)))
    print("First 5 predicted classes:", *(np.argmax(preds[:5], axis=1)))
    print("First 5 true labels:     ", *(np.argmax(y_test[:5], axis=1)))

    # --- Save/Load Weights ---
    weights_path = tmp_path / "weights.rds"
    g.ggml_save_weights(model, weights_path)
    print("\nWeights saved to:", weights_path)
    print("File size:", weights_path.stat().st_size / 1024, "KB")

    out = capsys.readouterr().out
    assert "Training data shape: 1200 x 28 x 28 x 1" in out
    assert "(26, 26, 32)" in out and "(5408,)" in out and "Total parameters: 693962" in out
    h = model.history["train_loss"]
    assert len(h) == 5 and np.all(np.isfinite(h)) and h[-1] < h[0]
    assert score["accuracy"] > 0.5       # ten classes: chance is 0.1
    assert preds.shape == (597, 10)
    np.testing.assert_allclose(preds.sum(axis=1), 1, rtol=1e-5)
    assert weights_path.stat().st_size > 693962 * 4
