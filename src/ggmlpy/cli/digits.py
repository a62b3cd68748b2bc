"""The main job: an MLP classifier for scikit-learn's bundled digits, trained with ggmlpy.

1797 8x8 images (no download), standardised, 80/20 split. MLP 64-128-128-128-10,
relu, dropout 0.1, Adam; the middle blocks run under ag_checkpoint (their
activations are recomputed during backward instead of kept on the tape).
Prints the progress bar, the test accuracy, the tape's memory for one batch with
and without checkpointing, and the time taken; saves the loss curves to
out/digits_loss.png (under the working directory) when matplotlib is installed.

    python -m ggmlpy demo                    (this, after a small low-level graph)
    python -m ggmlpy.cli.digits [--epochs 20] [--batch 32] [--seed 0] [--no-progress]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

import ggmlpy as g

PLOT = os.path.join("out", "digits_loss.png")


def load_digits_split(seed: int = 0, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test): x [64, n] standardised with the training statistics."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("the digits demo needs scikit-learn for its data set: "
                         "pip install scikit-learn  (or the demo extra: pip install \"ggmlpy[demo]\")") from None
    data = load_digits()
    x, y = data.data.astype(np.float64), data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)
    std[std == 0] = 1.0  # always-blank corner pixels
    x = (x - mean) / std
    return x[train].T, y[train], x[test].T, y[test]  # samples as columns


class DigitsMLP(g.Module):
    """64 -> 128 -> 128 -> 128 -> 10; the middle blocks optionally under ag_checkpoint."""

    def __init__(self, hidden: int = 128, n_middle: int = 2, dropout: float = 0.1, checkpoint: bool = True):
        super().__init__()
        self.first = g.ag_sequential(g.ag_linear(64, hidden, "relu"), g.ag_dropout(dropout))
        self.middle = [g.ag_sequential(g.ag_linear(hidden, hidden, "relu"), g.ag_dropout(dropout))
                       for _ in range(n_middle)]
        self.head = g.ag_linear(hidden, 10)
        self.checkpoint = checkpoint

    def forward(self, x):
        h = self.first(x)
        for block in self.middle:
            if self.checkpoint:
                h = g.ag_checkpoint(lambda t, block=block: block(t), h)  # bind the block, not the loop variable
            else:
                h = block(h)
        return self.head(h)


def accuracy(model, x, y) -> float:
    g.ag_eval(model)
    pred = model(g.ag_tensor(x)).numpy().argmax(axis=0)
    return float(np.mean(pred == y))


def tape_bytes_per_batch(model, xb, yb, checkpoint: bool) -> int:
    """Bytes the tape holds after the forward pass of one batch (nothing is updated)."""
    before = model.checkpoint
    model.checkpoint = checkpoint
    g.ag_train(model)
    with g.with_grad_tape():
        g.ag_softmax_cross_entropy_loss(model(xb), yb)
    model.checkpoint = before
    return g.tape_bytes()


def save_loss_curve(history, path: str) -> str | None:
    """ag_fit's history plots itself; without matplotlib there is no plot (the numbers are printed anyway)."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return history.plot(path)


def train(epochs: int = 20, batch: int = 32, lr: float = 2e-3, seed: int = 0, progress: bool = True,
          checkpoint: bool = True, plot: str | None = PLOT,
          verbose: bool = True) -> dict:
    """Train and report; returns the figures (also used by the tests, with few epochs)."""
    t0 = time.perf_counter()
    g.manual_seed(seed)
    x_train, y_train, x_test, y_test = load_digits_split(seed)
    model = DigitsMLP(checkpoint=checkpoint)
    opt = g.optimizer_adam(model.parameters(), lr=lr)
    sched = g.lr_scheduler_cosine(opt, T_max=epochs, lr_min=lr / 20)
    train_loader = g.ag_dataloader(x_train, y_train, batch_size=batch, shuffle=True)
    test_loader = g.ag_dataloader(x_test, y_test, batch_size=256, shuffle=False)
    history = g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, train_loader, epochs,
                       val_loader=test_loader, callbacks=[g.scheduler_step(sched)], progress=progress)
    train_s = time.perf_counter() - t0

    xb, yb = next(iter(g.ag_dataloader(x_train, y_train, batch_size=batch, shuffle=False)))
    with_ckpt = tape_bytes_per_batch(model, xb, yb, checkpoint=True)
    without = tape_bytes_per_batch(model, xb, yb, checkpoint=False)
    result = {"test_accuracy": accuracy(model, x_test, y_test), "train_accuracy": accuracy(model, x_train, y_train),
              "tape_bytes_checkpointed": with_ckpt, "tape_bytes_plain": without, "seconds": train_s,
              "history": history, "plot": save_loss_curve(history, plot) if plot else None}
    if verbose:
        print(f"digits: {x_train.shape[1]} train / {x_test.shape[1]} test images, MLP 64-128-128-128-10, "
              f"{epochs} epochs of Adam, batch {batch}, on {g.ag_device_name()}")
        print(f"test accuracy  {result['test_accuracy']:.2%}   (train {result['train_accuracy']:.2%})")
        print(f"tape for one batch of {batch}: {with_ckpt / 1024:.1f} KiB with the middle blocks checkpointed, "
              f"{without / 1024:.1f} KiB without")
        print(f"time: {train_s:.1f} s to load the data, train and evaluate ({np.mean(history['time']) * 1e3:.0f} ms/epoch)")
        print(f"loss curve: {result['plot']}" if result["plot"] else
              f"loss curve: skipped (pip install matplotlib to get {PLOT})")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train an MLP on scikit-learn's digits with ggmlpy.")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-checkpoint", action="store_true", help="train without ag_checkpoint")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    result = train(args.epochs, args.batch, args.lr, args.seed, progress=not args.no_progress,
                   checkpoint=not args.no_checkpoint)
    return 0 if result["test_accuracy"] >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
