"""ggmlpy's random numbers: one numpy Generator of its own (PCG64), seeded by `manual_seed`.

Layer initialisation and dropout masks draw from it; `ag_checkpoint` saves and
restores its state so a replayed segment draws the same numbers.
"""
from __future__ import annotations

import numpy as np

from .errors import GGMLError

_gen = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed ggmlpy's random numbers (initialisation, dropout): the same seed gives the same model."""
    global _gen
    _gen = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    """ggmlpy's numpy Generator (draw from it to stay reproducible under manual_seed)."""
    return _gen


def get_rng_state() -> dict:
    """The state of ggmlpy's generator, for set_rng_state()."""
    return _gen.bit_generator.state


def set_rng_state(state: dict) -> None:
    """Restore a state from get_rng_state(): the next draws repeat."""
    _gen.bit_generator.state = state


def ggml_set_seed(seed: int | float | None) -> int | None:
    """ggmlR's ggml_set_seed: seed every random draw ggmlpy makes (weight initialisation, dropout
    masks, shuffling), as manual_seed does. Returns the seed as an int; None does nothing and
    returns None. Anything but a single integer value raises a GGMLError ("a single ... integer")."""
    if seed is None:
        return None
    value = seed
    if isinstance(value, (list, tuple, np.ndarray)):
        flat = np.asarray(value, dtype=object).ravel()
        if flat.size != 1:
            raise GGMLError(f"ggml_set_seed: seed must be a single non-NA integer (or None), got {seed!r}")
        value = flat[0]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise GGMLError(f"ggml_set_seed: seed must be a single non-NA integer (or None), got {seed!r}")
    if isinstance(value, (float, np.floating)) and (not np.isfinite(value) or value != int(value)):
        raise GGMLError(f"ggml_set_seed: seed must be a single non-NA integer (or None), got {seed!r}")
    value = int(value)
    manual_seed(value if value >= 0 else value % 2**32)  # R's seeds may be negative; numpy's may not
    return value
