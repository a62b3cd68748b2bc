"""Training histories that plot themselves: ag_fit's (FitHistory) and, through `plot_curves`,
the Keras-like models' ggml_history."""
from __future__ import annotations

import math
import os
from collections.abc import Sequence

from ..errors import GGMLError

Curve = tuple[str, Sequence, str]           # (label, one value per epoch (None: not measured), colour)
Panel = tuple[str, str, Sequence[Curve]]    # (title, y-axis label, curves)


def plot_curves(path: str | os.PathLike, epochs: Sequence[int], panels: Sequence[Panel],
                what: str = "plot") -> str | os.PathLike:
    """Panels of per-epoch curves side by side, saved as a PNG at `path` (needs matplotlib); a
    curve with no value at all is left out, and a panel with two curves gets a legend."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise GGMLError(f"{what} needs matplotlib (pip install matplotlib)") from e
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.5), squeeze=False)
    for ax, (title, ylabel, curves) in zip(axes[0], panels):
        shown = [(label, values, colour) for label, values, colour in curves
                 if any(v is not None for v in values)]
        for label, values, colour in shown:
            ax.plot(list(epochs), [math.nan if v is None else v for v in values], color=colour, label=label)
        if len(shown) > 1:
            ax.legend()
        ax.set_xlabel("Epoch")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise GGMLError(f"{what}: could not write {os.fspath(path)}: {e}") from e
    finally:
        plt.close(fig)
    return path


class FitHistory(dict):
    """ag_fit's history: "loss" (per epoch), "lr", "time" and, with a val_loader, "val_loss";
    a dict as before, which also plots itself."""

    def plot(self, path: str | os.PathLike) -> str | os.PathLike:
        """The loss curves (training, and validation when measured) and the learning rate, side
        by side, saved as a PNG at `path` (needs matplotlib); returns `path`."""
        epochs = range(1, len(self["loss"]) + 1)
        return plot_curves(path, epochs, [
            ("Loss", "loss", [("Train", self["loss"], "tab:blue"), ("Val", self.get("val_loss", []), "tab:red")]),
            ("Learning rate", "lr", [("lr", self["lr"], "tab:green")])], "ag_fit's history.plot")
