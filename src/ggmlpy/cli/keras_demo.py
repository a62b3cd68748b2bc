"""`python -m ggmlpy demo --keras`: a Sequential CNN on scikit-learn's digits (8x8 images),
trained by ggml_fit (ggml's ggml_opt loop), scored on a held-out quarter of the data."""
from __future__ import annotations

import time

import numpy as np

import ggmlpy as g  # the demo is written against the public, flat API


def digits_cnn(epochs: int = 20, batch_size: int = 32, verbose: int = 0, seed: int = 0) -> dict:
    """Train the digits CNN; returns test accuracy, seconds per epoch and the model."""
    from sklearn.datasets import load_digits  # optional dependency (the demo extra), loaded when run
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.images / 16.0).reshape(-1, 8, 8, 1)          # [N, H, W, C]: samples as rows
    y = np.eye(10)[d.target]
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=d.target)
    g.ggml_set_seed(seed)   # initialisation and dropout
    m = g.ggml_model_sequential()
    m = g.ggml_layer_conv_2d(m, 16, kernel_size=3, activation="relu", padding="same", input_shape=(8, 8, 1))
    m = g.ggml_layer_max_pooling_2d(m, pool_size=2)
    m = g.ggml_layer_conv_2d(m, 32, kernel_size=3, activation="relu", padding="same")
    m = g.ggml_layer_flatten(m)
    m = g.ggml_layer_dense(m, 64, activation="relu")
    m = g.ggml_layer_dense(m, 10, activation="softmax")
    m = g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy", softmax_ce="exact")
    t0 = time.perf_counter()
    g.ggml_fit(m, x_tr, y_tr, epochs=epochs, batch_size=batch_size, verbose=verbose)
    per_epoch = (time.perf_counter() - t0) / epochs
    acc = float(np.mean(g.ggml_predict_classes(m, x_te) - 1 == y_te.argmax(1)))
    return {"test_accuracy": acc, "epoch_seconds": per_epoch, "model": m,
            "n_train": len(x_tr), "n_test": len(x_te)}


def run() -> int:
    try:
        import sklearn  # noqa: F401  (optional: the demo extra)
    except ImportError:
        print("the Keras demo needs scikit-learn (its bundled digits data set): pip install scikit-learn")
        return 1
    r = digits_cnn()
    r["model"].summary()
    print(f"digits CNN (ggml_fit, {r['n_train']} train / {r['n_test']} test images): "
          f"test accuracy {r['test_accuracy']:.1%}, {r['epoch_seconds'] * 1000:.0f} ms per epoch")
    return 0 if r["test_accuracy"] >= 0.97 else 1
