#!/usr/bin/env python3
"""One training epoch of ggml_fit (ggmlpy.keras on ggml's ggml_opt loop) against Keras 3 on the
PyTorch backend and a plain PyTorch loop, same models, same data, same thread count.

    python scripts/bench_keras.py [--threads N] [--repeats R] [--ggml-kernels]

Models: a 784-256-256-10 MLP (relu, softmax; Adam, cross-entropy, batch 128, 9984 synthetic
samples = 78 full batches, since ggml_opt drops a remainder) and the digits CNN of
`python -m ggmlpy demo --keras` (batch 32). Each figure is the median over R epochs (each a
fit(epochs=1) call, set-up included, after one warm-up call), timed in interleaved rounds
(one epoch of each framework in turn) so that the machine's drifting speed hits all alike.
Needs torch; Keras is optional (pip install keras). `--ggml-kernels` adds ggml_fit on ggml's own
kernels alone (ggmlpy.kernels off while its graphs are built: the products are ggml's MUL_MAT and
OUT_PROD, a convolution's input gradient ggml's IM2COL_BACK). Ends with
`summary: MLP R1x PyTorch, CNN R2x PyTorch[, CNN R3x Keras 3]` (ggml_fit's epochs).
"""
from __future__ import annotations

import argparse
import os
import sys

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--ggml-kernels", action="store_true", help="also time ggml_fit on ggml's own kernels alone")
args = ap.parse_args()
os.environ["GGMLPY_N_THREADS"] = str(args.threads)   # before ggmlpy is imported
os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggmlpy as g  # noqa: E402
from benchlib import interleaved, loadavg  # noqa: E402
from benchmodels import kernels_isa  # noqa: E402

import torch  # noqa: E402

torch.set_num_threads(args.threads)
try:
    import keras  # noqa: E402
except Exception:  # noqa: BLE001  (Keras without a usable backend)
    keras = None


def mlp_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(9984, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 9984)]
    return x, y, 128


def digits_data():
    from sklearn.datasets import load_digits
    d = load_digits()
    n = (len(d.images) // 32) * 32
    x = (d.images[:n] / 16.0).reshape(-1, 8, 8, 1).astype(np.float32)
    return x, np.eye(10, dtype=np.float32)[d.target[:n]], 32


# -- ggmlpy ----------------------------------------------------------------------------------------------
def ggml_mlp():
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 256, "relu", input_shape=784)
    m = g.ggml_layer_dense(m, 256, "relu")
    return g.ggml_compile(g.ggml_layer_dense(m, 10, "softmax"), softmax_ce="exact")


def ggml_cnn():
    m = g.ggml_model_sequential()
    m = g.ggml_layer_conv_2d(m, 16, 3, "relu", padding="same", input_shape=(8, 8, 1))
    m = g.ggml_layer_max_pooling_2d(m, 2)
    m = g.ggml_layer_conv_2d(m, 32, 3, "relu", padding="same")
    m = g.ggml_layer_flatten(m)
    m = g.ggml_layer_dense(m, 64, "relu")
    return g.ggml_compile(g.ggml_layer_dense(m, 10, "softmax"), softmax_ce="exact")


# -- Keras 3 (torch backend) -----------------------------------------------------------------------------
def keras_mlp():
    m = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, "relu"), keras.layers.Dense(256, "relu"),
                          keras.layers.Dense(10, "softmax")])
    m.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy")
    return m


def keras_cnn():
    m = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
                          keras.layers.MaxPooling2D(2), keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
                          keras.layers.Flatten(), keras.layers.Dense(64, "relu"), keras.layers.Dense(10, "softmax")])
    m.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy")
    return m


# -- plain PyTorch ------------------------------------------------------------------------------------------
def torch_mlp():
    nn = torch.nn
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def torch_cnn():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                         nn.ReLU(), nn.Flatten(), nn.Linear(32 * 16, 64), nn.ReLU(), nn.Linear(64, 10))


def torch_epoch(model, opt, x, y, batch):
    perm = torch.randperm(len(x))
    lossf = torch.nn.CrossEntropyLoss()
    for i in range(0, len(x), batch):
        idx = perm[i:i + batch]
        opt.zero_grad()
        loss = lossf(model(x[idx]), y[idx])
        loss.backward()
        opt.step()


def run(name, data, ggml_model, keras_model, torch_model, channels_first=False):
    x, y, batch = data
    fns = {}
    m = ggml_model()
    fns["ggmlpy ggml_fit"] = (lambda: m.fit(x, y, epochs=1, batch_size=batch), 1)
    if args.ggml_kernels:
        from ggmlpy import kernels
        m0 = ggml_model()

        def ggml_kernels_fit():
            prev = kernels.set_enabled(False)   # read when fit builds its graphs
            try:
                m0.fit(x, y, epochs=1, batch_size=batch)
            finally:
                kernels.set_enabled(prev)
        fns["ggml's kernels"] = (ggml_kernels_fit, 1)
    if keras is not None:
        km = keras_model()
        fns["Keras 3 (torch)"] = (lambda: km.fit(x, y, epochs=1, batch_size=batch, verbose=0), 1)
    tm = torch_model()
    opt = torch.optim.Adam(tm.parameters(), lr=1e-3)
    tx = torch.from_numpy(x.transpose(0, 3, 1, 2).copy() if channels_first else x)
    ty = torch.from_numpy(y.argmax(1))
    fns["PyTorch loop"] = (lambda: torch_epoch(tm, opt, tx, ty, batch), 1)
    res = interleaved(fns, repeats=args.repeats, warmup=1)
    base = res["PyTorch loop"]
    print(f"\n{name}: one epoch ({len(x)} samples, batch {batch}), {args.threads} thread(s), "
          f"median of {args.repeats} interleaved rounds")
    for k, v in res.items():
        print(f"  {k:18s} {v * 1000:9.1f} ms   {v / base:5.2f}x PyTorch")
    return res


if __name__ == "__main__":
    print(f"loadavg: {loadavg()}")
    print(kernels_isa())
    mlp = run("MLP 784-256-256-10", mlp_data(), ggml_mlp, keras_mlp, torch_mlp)
    cnn = run("digits CNN", digits_data(), ggml_cnn, keras_cnn, torch_cnn, channels_first=True)
    print(f"loadavg: {loadavg()}")
    fit = "ggmlpy ggml_fit"
    line = f"summary: MLP {mlp[fit] / mlp['PyTorch loop']:.2f}x PyTorch, CNN {cnn[fit] / cnn['PyTorch loop']:.2f}x PyTorch"
    if "Keras 3 (torch)" in cnn:
        line += f", CNN {cnn[fit] / cnn['Keras 3 (torch)']:.2f}x Keras 3"
    print(line)
