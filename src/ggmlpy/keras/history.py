"""ggml_history: per-epoch training curves, printable and plottable (PNG)."""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

from ..errors import GGMLError
from ..train.history import plot_curves

if TYPE_CHECKING:
    from .model import _Model


class ggml_history(dict):
    """Keys train_loss, train_accuracy, val_loss, val_accuracy (one value per epoch; None where
    there is no validation, NaN accuracy for mse) and epochs; plus fit_path, n_used, n_train and
    batch_order (each epoch's 0-based sample order, when recorded) as attributes. A fit of
    several outputs adds train_<output>_loss and val_<output>_loss per output (train_loss is
    their weighted sum) and, for cross-entropy outputs, train_/val_<output>_accuracy."""

    def __init__(self, rows, n_used=None, n_train=None, fit_path=None, batch_order=(), outputs=()):
        super().__init__(
            epochs=list(range(1, len(rows) + 1)),
            epoch=list(range(1, len(rows) + 1)),  # ggml_training_history's column name
            train_loss=[r[0] for r in rows],
            train_accuracy=[r[1] for r in rows],
            val_loss=[r[2] for r in rows],
            val_accuracy=[r[3] for r in rows])
        # multi-output fits: per-output curves train_<name>_loss, val_<name>_loss (and accuracies)
        for key in (rows[0][4] if rows and len(rows[0]) > 4 else {}):
            self[key] = [r[4][key] for r in rows]
        self.outputs = list(outputs)   # the names of the outputs trained (multi-output fits)
        self.n_used, self.n_train, self.fit_path = n_used, n_train, fit_path
        self.batch_order = [list(o) for o in batch_order]

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None

    def __repr__(self):
        n = len(self["epochs"])
        if n == 0:
            return "Training History (0 epochs)"
        lines = [f"Training History ({n} epoch{'s' if n != 1 else ''})",
                 f"  Final train loss:     {self['train_loss'][-1]:.4f}"]
        acc = self["train_accuracy"][-1]
        if acc is not None and not math.isnan(acc):
            lines.append(f"  Final train accuracy: {acc:.4f}")
        if self["val_loss"][-1] is not None:
            lines.append(f"  Final val loss:       {self['val_loss'][-1]:.4f}")
            if self["val_accuracy"][-1] is not None and not math.isnan(self["val_accuracy"][-1]):
                lines.append(f"  Final val accuracy:   {self['val_accuracy'][-1]:.4f}")
        return "\n".join(lines)

    def plot(self, path):
        """Loss and accuracy curves side by side, saved as a PNG at `path` (needs matplotlib)."""
        return plot_curves(path, self["epochs"], [
            (title, key, [("Train", self[f"train_{key}"], "tab:blue"), ("Val", self[f"val_{key}"], "tab:red")])
            for title, key in (("Loss", "loss"), ("Accuracy", "accuracy"))], "ggml_history.plot")


def ggml_training_history(model: _Model, format: str = "wide") -> ggml_history | dict[str, list] | None:
    """The per-epoch curves of the model's last ggml_fit, as ggmlR's data frame, by column.

    format="wide": this ggml_history (columns epoch, train_loss, train_accuracy, val_loss,
    val_accuracy; `.plot(path)` saves a PNG). format="long": columns epoch, metric ("loss",
    "accuracy"), split ("train", and "val" when validated) and value, one row per pair.
    None, with a warning, for a model never fitted."""
    if format not in ("wide", "long"):
        raise GGMLError(f"ggml_training_history: format must be 'wide' or 'long', got {format!r}")
    hist = getattr(model, "history", None)
    if not hist or not hist.get("epochs"):
        warnings.warn("Model has no training history (not fitted, or fit recorded none).", stacklevel=2)
        return None
    if format == "wide":
        return hist
    splits = ["train"] + (["val"] if any(v is not None for v in hist["val_loss"]) else [])
    long: dict = {"epoch": [], "metric": [], "split": [], "value": []}
    for split in splits:
        for metric in ("loss", "accuracy"):
            for epoch, value in zip(hist["epochs"], hist[f"{split}_{metric}"]):
                for key, v in (("epoch", epoch), ("metric", metric), ("split", split), ("value", value)):
                    long[key].append(v)
    return long
