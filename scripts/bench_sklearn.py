"""GGMLClassifier against scikit-learn's MLPClassifier: fit time and test accuracy on a 20 000 x 50
tabular problem, the same architecture, epochs, batch size and optimizer (Adam, lr 1e-3), no
dropout and no L2 penalty on either side, MLPClassifier forced to run every epoch. Fits
alternate (interleaved rounds), so both see the same machine load; medians over the rounds.

    python scripts/bench_sklearn.py [--rounds 3] [--epochs 10] [--batch-size 32] [--hidden 128 64]

Ends with `summary: ...` (the fit-time ratio ggml / scikit-learn, target <= 1.0, and the accuracies).
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

import ggmlpy as g
from benchlib import loadavg
from ggmlpy.sklearn import GGMLClassifier


def data(n=20_000, features=50, classes=4, seed=0):
    x, y = make_classification(n_samples=n + 5_000, n_features=features, n_informative=30, n_redundant=10,
                               n_classes=classes, n_clusters_per_class=2, class_sep=1.0, random_state=seed)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, train_size=n, random_state=seed, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    return scaler.transform(x_tr), scaler.transform(x_te), y_tr, y_te


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hidden", type=int, nargs="+", default=[128, 64])
    args = ap.parse_args()
    x_tr, x_te, y_tr, y_te = data()
    hidden = tuple(args.hidden)
    make = {
        "ggmlpy": lambda seed: GGMLClassifier(hidden_layers=hidden, dropout=0.0, epochs=args.epochs,
                                              batch_size=args.batch_size, learning_rate=1e-3, random_state=seed),
        "sklearn": lambda seed: MLPClassifier(hidden_layer_sizes=hidden, activation="relu", solver="adam",
                                              alpha=0.0, batch_size=args.batch_size, learning_rate_init=1e-3,
                                              max_iter=args.epochs, tol=0.0, n_iter_no_change=args.epochs + 1,
                                              shuffle=True, random_state=seed),
    }
    print(f"{x_tr.shape[0]} x {x_tr.shape[1]} train, {x_te.shape[0]} test, {len(np.unique(y_tr))} classes; "
          f"hidden {hidden}, {args.epochs} epochs, batch {args.batch_size}; ggml threads {g.get_num_threads()}")
    print(f"loadavg before: {loadavg()}")
    times = {k: [] for k in make}
    accs = {k: [] for k in make}
    for r in range(args.rounds):
        for label, new in make.items():
            est = new(r)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                t0 = time.perf_counter()
                est.fit(x_tr, y_tr)
                times[label].append(time.perf_counter() - t0)
            accs[label].append(float(np.mean(est.predict(x_te) == y_te)))
            print(f"  round {r + 1} {label:8s} fit {times[label][-1]:6.2f} s  test accuracy {accs[label][-1]:.4f}"
                  f"  (loadavg {loadavg()})")
    med = {k: statistics.median(v) for k, v in times.items()}
    acc = {k: statistics.median(v) for k, v in accs.items()}
    ratio = med["ggmlpy"] / med["sklearn"]
    print(f"loadavg after: {loadavg()}")
    print(f"summary: fit {med['ggmlpy']:.2f} s against MLPClassifier {med['sklearn']:.2f} s = {ratio:.2f}x "
          f"(target <= 1.0); test accuracy {acc['ggmlpy']:.4f} against {acc['sklearn']:.4f}; loadavg {loadavg()}")


if __name__ == "__main__":
    main()
